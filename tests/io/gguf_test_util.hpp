// Helpers for the GGUF tests: fixture paths, whole-file reads, and the message of a gguf_error.
#pragma once

#include <doctest/doctest.h>

#include <fstream>
#include <iterator>
#include <string>

#include "q35/io/gguf_format.hpp"

namespace q35::test {

// A fixture committed in tests/data.
inline std::string data_path(const std::string& name) { return std::string(Q35_TEST_DATA_DIR) + "/" + name; }

// A large fixture that lives only in ../shared/fixtures (next to the repository); empty when absent.
inline std::string shared_fixture(const std::string& name) {
  const std::string p = std::string(Q35_TEST_DATA_DIR) + "/../../../shared/fixtures/" + name;
  return std::ifstream(p).good() ? p : std::string();
}

// Decorator for cases on a ../shared fixture: doctest reports the case as skipped when it is absent.
inline auto needs_shared_fixture(const std::string& name) { return doctest::skip(shared_fixture(name).empty()); }

inline std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  REQUIRE_MESSAGE(in.good(), "cannot read " << path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// The message of the gguf_error f() throws, or `none` when it throws nothing.
template <class F>
std::string gguf_error_of(F&& f, const std::string& none = "(no error)") {
  try {
    f();
  } catch (const q35::io::gguf_error& e) {
    return e.what();
  }
  return none;
}

}  // namespace q35::test
