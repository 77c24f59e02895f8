// Parsing of qwen35_generate's command line: a table of flags, each with its value handler, so later
// commands (--dump-tensor NAME --out PATH, generation with -p PROMPT -n N) add rows, not branches.
#include "args.hpp"

#include <charconv>
#include <functional>
#include <string_view>

namespace q35::cli {

namespace {

struct flag {
  std::vector<std::string_view> names;
  const char* value_name;  // nullptr: the flag takes no value
  std::function<void(options&, const std::string&)> apply;
};

int64_t parse_int(const std::string& flag_name, const std::string& value, int64_t min) {
  int64_t v = 0;
  const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), v);
  if (value.empty() || ec != std::errc() || end != value.data() + value.size())
    throw usage_error(flag_name + " expects an integer, got '" + value + "'");
  if (v < min) throw usage_error(flag_name + " must be at least " + std::to_string(min) + ", got " + value);
  return v;
}

void set_command(options& o, command c, const std::string& name) {
  if (o.cmd != command::none && o.cmd != command::help) throw usage_error("more than one command given (" + name + ")");
  if (o.cmd != command::help) o.cmd = c;
}

const std::vector<flag>& flags() {
  static const std::vector<flag> table = {
      {{"-h", "--help"}, nullptr, [](options& o, const std::string&) { o.cmd = command::help; }},
      {{"-m", "--model"}, "FILE", [](options& o, const std::string& v) { o.model_path = v; }},
      {{"-c", "--ctx-size"}, "N", [](options& o, const std::string& v) { o.n_ctx = parse_int("-c", v, 1); }},
      {{"--info"}, nullptr, [](options& o, const std::string&) { set_command(o, command::info, "--info"); }},
      {{"--tokenize"},
       "TEXT",
       [](options& o, const std::string& v) {
         set_command(o, command::tokenize, "--tokenize");
         o.text = v;
       }},
      {{"--detokenize"},
       "IDS",
       [](options& o, const std::string& v) {
         set_command(o, command::detokenize, "--detokenize");
         o.text = v;
       }},
      {{"--dump-tensor"},
       "NAME",
       [](options& o, const std::string& v) {
         set_command(o, command::dump_tensor, "--dump-tensor");
         o.tensor_name = v;
       }},
      {{"--out"}, "PATH", [](options& o, const std::string& v) { o.out_path = v; }},
  };
  return table;
}

}  // namespace

options parse_args(const std::vector<std::string>& args) {
  options o;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    const flag* f = nullptr;
    for (const flag& candidate : flags())
      for (std::string_view n : candidate.names)
        if (a == n) f = &candidate;
    if (f == nullptr) throw usage_error("unknown argument '" + a + "'");
    std::string value;
    if (f->value_name != nullptr) {
      if (i + 1 >= args.size()) throw usage_error(a + " needs a value (" + f->value_name + ")");
      value = args[++i];
    }
    f->apply(o, value);
  }
  if (o.cmd == command::help) return o;
  if (o.cmd == command::none) throw usage_error("no command given (--info, --tokenize, --detokenize or --dump-tensor)");
  if (o.model_path.empty()) throw usage_error("no model file given (-m FILE)");
  if (o.cmd == command::dump_tensor && o.out_path.empty()) throw usage_error("--dump-tensor needs --out PATH");
  return o;
}

std::vector<int32_t> parse_ids(const std::string& text) {
  std::vector<int32_t> ids;
  size_t pos = 0;
  while (pos < text.size()) {
    if (text[pos] == ' ' || text[pos] == '\t' || text[pos] == '\n' || text[pos] == ',') {
      ++pos;
      continue;
    }
    size_t end = pos;
    while (end < text.size() && text[end] != ' ' && text[end] != '\t' && text[end] != '\n' && text[end] != ',') ++end;
    const std::string word = text.substr(pos, end - pos);
    int32_t id = 0;
    const auto [p, ec] = std::from_chars(word.data(), word.data() + word.size(), id);
    if (ec != std::errc() || p != word.data() + word.size() || id < 0)
      throw usage_error("--detokenize expects non-negative integer token ids, got '" + word + "'");
    ids.push_back(id);
    pos = end;
  }
  return ids;
}

std::string usage(const std::string& program) {
  return "usage: " + program +
         " -m FILE COMMAND\n"
         "\n"
         "commands:\n"
         "  --info                 architecture, matched model, hyper-parameters, tensors by type, memory\n"
         "                         for weights + state at -c tokens, tokenizer\n"
         "  --tokenize TEXT        token ids of TEXT (special tokens such as <|im_start|> parsed), one line\n"
         "  --detokenize \"ID ...\"  the text of space-separated token ids\n"
         "  --dump-tensor NAME     tensor NAME dequantized to little-endian float32 (with --out PATH)\n"
         "\n"
         "options:\n"
         "  -m, --model FILE       a qwen35 / qwen35moe GGUF file\n"
         "  -c, --ctx-size N       context size for the --info memory estimate (default: the model's)\n"
         "  --out PATH             output file of --dump-tensor\n"
         "  -h, --help             this text\n";
}

}  // namespace q35::cli
