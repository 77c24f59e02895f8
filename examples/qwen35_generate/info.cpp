// --info: the reader's description of the model (architecture, matched traits, hyper-parameters,
// tensors and bytes by type, memory for weights plus state at -c tokens) and the tokenizer.
#include <ostream>

#include "commands.hpp"
#include "q35/io/gguf.hpp"
#include "q35/io/model_info.hpp"
#include "q35/io/tokenizer.hpp"

namespace q35::cli {

int run_info(const options& opt, std::ostream& out) {
  const auto file = io::gguf_file::open(opt.model_path);
  out << io::format_model_info(io::describe_model(file, uint64_t(opt.n_ctx.value_or(4096))));
  const auto tok = io::tokenizer::from_gguf(file);
  out << "tokenizer: " << file.get_string("tokenizer.ggml.model") << " / " << file.get_string("tokenizer.ggml.pre")
      << ", " << tok.n_vocab() << " tokens, " << tok.n_merges() << " merges";
  if (tok.specials().eos) out << ", eos " << *tok.specials().eos << " " << tok.token_text(*tok.specials().eos);
  out << "\n";
  return 0;
}

}  // namespace q35::cli
