// For the composition's tests (doctest): a fixture model of tests/data bound and loaded onto the
// device, and a check that a q35::status is ok that prints its message when it is not.
#pragma once

#include <doctest/doctest.h>

#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "device_model.hpp"
#include "model_loader.hpp"

#define Q35_OK(expr)                 \
  do {                               \
    const ::q35::status s_ = (expr); \
    INFO(s_.to_string());            \
    REQUIRE(s_.ok());                \
  } while (0)

namespace q35::test {

struct loaded_model {
  io::gguf_file file;
  io::bound_model bound;
  gen::device_model model;
};

// The Q4_K_M fixtures of tests/data: every layer schedule (dense FFN, MoE, interleaved), and those with MoE layers.
inline constexpr const char* q4km_fixtures[] = {"tiny_dense_q4km.gguf", "tiny_moe_q4km.gguf",
                                                "tiny_interleaved_q4km.gguf"};
inline constexpr const char* q4km_moe_fixtures[] = {"tiny_moe_q4km.gguf", "tiny_interleaved_q4km.gguf"};

// A little-endian float32 file (the fixtures' logits rows), whole.
inline std::vector<float> read_f32(const std::string& path) {
  std::ifstream f(path, std::ios::binary | std::ios::ate);
  REQUIRE(f);
  const auto n = size_t(f.tellg());
  std::vector<float> v(n / 4);
  f.seekg(0);
  f.read(reinterpret_cast<char*>(v.data()), std::streamsize(n));
  return v;
}

// tests/data/<name>, matched against the known model traits (any valid file binds).
inline std::unique_ptr<loaded_model> load_model(const std::string& name) {
  auto l = std::unique_ptr<loaded_model>(
      new loaded_model{io::gguf_file::open(std::string(Q35_TEST_DATA_DIR) + "/" + name), {}, {}});
  std::string matched;
  l->bound = cli::bind_any_model(l->file, matched);
  Q35_OK(l->model.load(l->file, l->bound));
  return l;
}

}  // namespace q35::test
