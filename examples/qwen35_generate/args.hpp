// Command-line options of qwen35_generate and their parsing (plain argv walking, no dependency).
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace q35::cli {

// Bad command line: main prints the message and the usage text, and exits with usage_exit_code.
struct usage_error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

inline constexpr int usage_exit_code = 2;
inline constexpr int failure_exit_code = 1;

enum class command { none, help, info, tokenize, detokenize, dump_tensor };

struct options {
  command cmd = command::none;
  std::string model_path;   // -m
  std::string text;         // --tokenize TEXT / --detokenize "ID ID ..."
  int64_t n_ctx = 4096;     // -c: context size the memory estimate of --info is for
  std::string tensor_name;  // --dump-tensor NAME
  std::string out_path;     // --out PATH
};

// Parses argv[1..argc); throws usage_error naming the offending argument.
options parse_args(const std::vector<std::string>& args);

// The usage text for `program`.
std::string usage(const std::string& program);

// "12 7 509" -> ids; throws usage_error on anything that is not a non-negative decimal integer.
std::vector<int32_t> parse_ids(const std::string& text);

}  // namespace q35::cli
