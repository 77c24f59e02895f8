// The commands of qwen35_generate, one function each: they print to `out` and return the exit
// code, and let gguf_error / tokenizer_error propagate to main.
#pragma once

#include <ostream>

#include "args.hpp"

namespace q35::cli {

int run_info(const options& opt, std::ostream& out);
int run_tokenize(const options& opt, std::ostream& out);
int run_detokenize(const options& opt, std::ostream& out);
int run_dump_tensor(const options& opt, std::ostream& out);
int run_generate(const options& opt, std::ostream& out);
int run_bench(const options& opt, std::ostream& out);

}  // namespace q35::cli
