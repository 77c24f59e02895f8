// --tokenize and --detokenize: the tokenizer of the model file, no weights touched.
#include <string>
#include <vector>

#include "commands.hpp"
#include "q35/io/gguf.hpp"
#include "q35/io/tokenizer.hpp"

namespace q35::cli {

int run_tokenize(const options& opt, std::ostream& out) {
  const auto tok = io::tokenizer::from_gguf(io::gguf_file::open(opt.model_path));
  const std::vector<int32_t> ids = tok.encode(opt.text, /*parse_special=*/true);
  for (size_t i = 0; i < ids.size(); ++i) out << (i ? " " : "") << ids[i];
  out << '\n';
  return 0;
}

int run_detokenize(const options& opt, std::ostream& out) {
  const std::vector<int32_t> ids = parse_ids(opt.text);  // before opening: a usage error needs no file
  const auto tok = io::tokenizer::from_gguf(io::gguf_file::open(opt.model_path));
  const std::string text = tok.decode(ids, /*render_special=*/true);
  out << text << '\n';
  return 0;
}

}  // namespace q35::cli
