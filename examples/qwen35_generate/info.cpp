// --info: what the file is (architecture, hyper-parameters, tokenizer), what it holds (tensors and
// bytes by type) and what it needs in memory.
#include <cstdio>
#include <map>
#include <sstream>
#include <string>

#include "commands.hpp"
#include "q35/io/ggml_types.hpp"
#include "q35/io/gguf.hpp"
#include "q35/io/tokenizer.hpp"

namespace q35::cli {

namespace {

std::string mib(uint64_t bytes) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.2f MiB", double(bytes) / (1024.0 * 1024.0));
  return buf;
}

// A metadata value as text: scalars in full, short numeric arrays in full, long arrays by length.
std::string value_text(const io::gguf_file& f, const io::gguf_kv& kv) {
  std::ostringstream s;
  switch (kv.type) {
    case io::gguf_type::string:
      return "'" + f.get_string(kv.key) + "'";
    case io::gguf_type::bool_:
      return f.get_bool(kv.key) ? "true" : "false";
    case io::gguf_type::float32:
    case io::gguf_type::float64:
      s << f.get_float(kv.key);
      return s.str();
    case io::gguf_type::array:
      if (kv.count > 8 || kv.elem_type == io::gguf_type::string)
        return "[" + std::to_string(kv.count) + " x " + std::string(io::gguf_type_name(kv.elem_type)) + "]";
      s << "[";
      if (io::gguf_is_integer(kv.elem_type)) {
        const auto v = f.get_int_array(kv.key);
        for (size_t i = 0; i < v.size(); ++i) s << (i ? ", " : "") << v[i];
      } else {
        const auto v = f.get_float_array(kv.key);
        for (size_t i = 0; i < v.size(); ++i) s << (i ? ", " : "") << v[i];
      }
      s << "]";
      return s.str();
    default:
      if (io::gguf_is_integer(kv.type)) return std::to_string(f.get_int(kv.key));
      return "(" + std::string(io::gguf_type_name(kv.type)) + ")";
  }
}

}  // namespace

int run_info(const options& opt, std::ostream& out) {
  const auto file = io::gguf_file::open(opt.model_path);
  const std::string arch = file.get_string("general.architecture");
  out << "file:          " << opt.model_path << " (GGUF v" << file.version() << ", " << mib(file.file_bytes())
      << ", alignment " << file.alignment() << ")\n";
  out << "architecture:  " << arch << "\n";

  out << "hyper-parameters:\n";
  const std::string prefix = arch + ".";
  for (const io::gguf_kv& kv : file.metadata())
    if (kv.key.starts_with(prefix))
      out << "  " << kv.key.substr(prefix.size()) << " = " << value_text(file, kv) << "\n";

  if (file.has("tokenizer.ggml.model")) {
    const auto tok = io::tokenizer::from_gguf(file);
    out << "tokenizer:     " << file.get_string("tokenizer.ggml.model") << " / "
        << file.get_string("tokenizer.ggml.pre") << ", " << tok.n_vocab() << " tokens, " << tok.n_merges() << " merges";
    if (tok.specials().eos) out << ", eos " << *tok.specials().eos << " " << tok.token_text(*tok.specials().eos);
    out << "\n";
  }

  struct by_type {
    uint64_t count = 0, bytes = 0;
  };
  std::map<std::string, by_type> types;
  uint64_t total = 0;
  for (const auto& t : file.tensors()) {
    auto& e = types[std::string(t.type_name())];
    ++e.count;
    e.bytes += t.n_bytes;
    total += t.n_bytes;
  }
  out << "tensors:       " << file.tensors().size() << ", " << mib(total) << "\n";
  for (const auto& [name, e] : types)
    out << "  " << name << ": " << e.count << " tensors, " << mib(e.bytes) << " (" << e.bytes << " bytes)\n";
  out << "memory:        weights " << mib(total) << " (context -c " << opt.n_ctx << ")\n";
  return 0;
}

}  // namespace q35::cli
