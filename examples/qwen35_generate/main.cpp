// qwen35_generate: command-line front end of q35: text generation from any Qwen3.5 GGUF (raw prompt or
// chat), GGUF inspection, the tokenizer and tensor dumps. Exit codes: 0 ok, 1 any failure (bad flag or
// value, bad file, prompt too long), always with one line on stderr naming the problem.
#include <exception>
#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

#include "args.hpp"
#include "commands.hpp"

namespace {

// Errors are printed as one line.
std::string one_line(std::string s) {
  for (char& c : s)
    if (c == '\n' || c == '\r') c = ' ';
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  namespace cli = q35::cli;
  const std::string program = argc > 0 ? std::filesystem::path(argv[0]).filename().string() : "qwen35_generate";
  try {
    const cli::options opt = cli::parse_args(std::vector<std::string>(argv + 1, argv + argc));
    if (opt.cmd == cli::command::help) {
      std::cout << cli::usage(program);
      return 0;
    }
    std::error_code ec;
    if ((opt.cmd != cli::command::bench || !opt.model_path.empty()) &&
        !std::filesystem::is_regular_file(opt.model_path, ec))
      throw cli::usage_error("model file '" + opt.model_path + "' does not exist or is not a regular file");
    switch (opt.cmd) {
      case cli::command::info:
        return cli::run_info(opt, std::cout);
      case cli::command::tokenize:
        return cli::run_tokenize(opt, std::cout);
      case cli::command::detokenize:
        return cli::run_detokenize(opt, std::cout);
      case cli::command::dump_tensor:
        return cli::run_dump_tensor(opt, std::cout);
      case cli::command::generate:
        return cli::run_generate(opt, std::cout);
      case cli::command::bench:
        return cli::run_bench(opt, std::cout);
      default:
        break;
    }
    throw cli::usage_error("no command given");
  } catch (const cli::usage_error& e) {
    std::cerr << program << ": error: " << one_line(e.what()) << " (see --help)\n";
    return cli::failure_exit_code;
  } catch (const std::exception& e) {  // gguf_error, tokenizer_error, I/O: one clear line
    std::cerr << program << ": error: " << one_line(e.what()) << '\n';
    return cli::failure_exit_code;
  } catch (...) {
    std::cerr << program << ": error: unknown exception\n";
    return cli::failure_exit_code;
  }
}
