// Parsing of qwen35_generate's command line: a table of flags, each with its value handler.
#include "args.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <fstream>
#include <functional>
#include <sstream>
#include <string_view>
#include <utility>

#include "memory_plan.hpp"

namespace q35::cli {

namespace {

struct flag {
  std::vector<std::string_view> names;
  const char* value_name;  // nullptr: the flag takes no value
  std::function<void(options&, const std::string& name, const std::string& value)> apply;
};

int64_t parse_int(const std::string& flag_name, const std::string& value, int64_t min, int64_t max = INT64_MAX) {
  int64_t v = 0;
  const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), v);
  if (value.empty() || ec != std::errc() || end != value.data() + value.size())
    throw usage_error(flag_name + " expects an integer, got '" + value + "'");
  if (v < min || v > max)
    throw usage_error(flag_name + " must be in " + std::to_string(min) + ".." +
                      (max == INT64_MAX ? std::string("") : std::to_string(max)) + ", got " + value);
  return v;
}

float parse_float(const std::string& flag_name, const std::string& value, double min, double max) {
  // from_chars for floats: strict, locale-independent
  double v = 0;
  const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), v);
  if (value.empty() || ec != std::errc() || end != value.data() + value.size() || !std::isfinite(v))
    throw usage_error(flag_name + " expects a number, got '" + value + "'");
  if (v < min || v > max)
    throw usage_error(flag_name + " must be in [" + std::to_string(min) + ", " + std::to_string(max) + "], got " +
                      value);
  return float(v);
}

kv_cache_type parse_cache_type(const std::string& flag_name, const std::string& value) {
  if (value == "f32") return kv_cache_type::f32;
  if (value == "f16") return kv_cache_type::f16;
  if (value == "bf16") return kv_cache_type::bf16;
  throw usage_error(flag_name + " expects f32, f16 or bf16, got '" + value + "'");
}

void set_command(options& o, command c, const std::string& name) {
  if (o.cmd != command::none && o.cmd != command::help && o.cmd != c)
    throw usage_error("more than one command given (" + name + ")");
  if (o.cmd != command::help) o.cmd = c;
}

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw usage_error("-f: cannot read '" + path + "'");
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}

// "0,4096,32768" -> {0, 4096, 32768}; each value in [min, 1 << 20].
std::vector<int64_t> parse_int_list(const std::string& flag_name, const std::string& value, int64_t min) {
  std::vector<int64_t> out;
  size_t pos = 0;
  while (pos <= value.size()) {
    const size_t end = std::min(value.find(',', pos), value.size());
    out.push_back(parse_int(flag_name, value.substr(pos, end - pos), min, int64_t(1) << 20));
    pos = end + 1;
  }
  return out;
}

// "1,2,3" -> the three k values of --moe-adaptive-k (each >= 1; the file bounds them by expert_used_count).
std::array<int, 3> parse_adaptive_k(const std::string& flag_name, const std::string& value) {
  const std::vector<int64_t> v = parse_int_list(flag_name, value, 1);
  if (v.size() != 3)
    throw usage_error(flag_name + " expects three k values K1,K2,K3 (entropy below H1, below H2, above), got '" +
                      value + "'");
  return {int(v[0]), int(v[1]), int(v[2])};
}

// "1.2,2.5" -> the two ascending entropy thresholds (nats) of --moe-adaptive-entropy.
std::array<float, 2> parse_adaptive_entropy(const std::string& flag_name, const std::string& value) {
  const size_t comma = value.find(',');
  if (comma == std::string::npos || value.find(',', comma + 1) != std::string::npos)
    throw usage_error(flag_name + " expects two thresholds H1,H2 in nats, got '" + value + "'");
  const float h1 = parse_float(flag_name, value.substr(0, comma), 0.0, 1e6);
  const float h2 = parse_float(flag_name, value.substr(comma + 1), 0.0, 1e6);
  if (!(h1 <= h2)) throw usage_error(flag_name + " thresholds must ascend (H1 <= H2), got '" + value + "'");
  return {h1, h2};
}

// "15043+1.5", "15043-2", "15043-inf" (llama-cli's --logit-bias): a token id, then a signed bias in
// [-100, 100] or -inf (the token is never sampled).
std::pair<int32_t, float> parse_logit_bias(const std::string& flag_name, const std::string& value) {
  const size_t sign = value.find_first_of("+-", 1);
  const auto bad = [&] {
    return usage_error(flag_name + " expects TOKEN_ID+BIAS or TOKEN_ID-BIAS (e.g. 15043+1.5, 15043-inf), got '" +
                       value + "'");
  };
  if (sign == std::string::npos) throw bad();
  int32_t id = 0;
  const char* id_end = value.data() + sign;
  const auto [end, ec] = std::from_chars(value.data(), id_end, id);
  if (ec != std::errc() || end != id_end || id < 0) throw bad();
  const std::string magnitude = value.substr(sign + 1);
  if (value[sign] == '-' && magnitude == "inf") return {id, -INFINITY};
  double b = 0;
  const char* m_end = magnitude.data() + magnitude.size();
  const auto [b_end, b_ec] = std::from_chars(magnitude.data(), m_end, b);
  if (magnitude.empty() || magnitude[0] == '-' || b_ec != std::errc() || b_end != m_end || !std::isfinite(b))
    throw bad();
  if (b > 100.0)
    throw usage_error(flag_name + " '" + value + "': the bias is beyond 100 in magnitude (-inf bans the token)");
  return {id, float(value[sign] == '-' ? -b : b)};
}

using apply_fn = std::function<void(options&, const std::string&, const std::string&)>;

const std::vector<flag>& flags() {
  static const std::vector<flag> table = {
      {{"-h", "--help"}, nullptr, [](options& o, auto&, auto&) { o.cmd = command::help; }},
      {{"-m", "--model"}, "FILE", [](options& o, auto&, const std::string& v) { o.model_path = v; }},
      {{"-c", "--ctx-size"},
       "N",
       [](options& o, const std::string& n, const std::string& v) { o.n_ctx = parse_int(n, v, 1); }},
      {{"-b", "--batch-size"},
       "N",
       [](options& o, const std::string& n, const std::string& v) { o.n_batch = parse_int(n, v, 1, 65536); }},
      {{"--info"}, nullptr, [](options& o, const std::string& n, auto&) { set_command(o, command::info, n); }},
      {{"--tokenize"},
       "TEXT",
       [](options& o, const std::string& n, const std::string& v) {
         set_command(o, command::tokenize, n), o.text = v;
       }},
      {{"--detokenize"},
       "IDS",
       [](options& o, const std::string& n, const std::string& v) {
         set_command(o, command::detokenize, n), o.text = v;
       }},
      {{"--dump-tensor"},
       "NAME",
       [](options& o, const std::string& n, const std::string& v) {
         set_command(o, command::dump_tensor, n), o.tensor_name = v;
       }},
      {{"--out"}, "PATH", [](options& o, auto&, const std::string& v) { o.out_path = v; }},
      {{"-p", "--prompt"},
       "TEXT",
       [](options& o, const std::string& n, const std::string& v) {
         if (o.prompt) throw usage_error(n + ": a prompt was already given");
         o.prompt = v;
       }},
      {{"-f", "--file"},
       "FILE",
       [](options& o, const std::string& n, const std::string& v) {
         if (o.prompt) throw usage_error(n + ": a prompt was already given");
         o.prompt = read_file(v);
       }},
      {{"-n", "--n-predict"},
       "N",
       [](options& o, const std::string& n, const std::string& v) { o.n_predict = parse_int(n, v, -1); }},
      {{"--temp"},
       "T",
       [](options& o, const std::string& n, const std::string& v) { o.temperature = parse_float(n, v, -1e9, 1e9); }},
      {{"--top-k"},
       "N",
       [](options& o, const std::string& n, const std::string& v) { o.top_k = int(parse_int(n, v, 0, INT32_MAX)); }},
      {{"--top-p"},
       "P",
       [](options& o, const std::string& n, const std::string& v) { o.top_p = parse_float(n, v, 0.0, 1.0); }},
      {{"--min-p"},
       "P",
       [](options& o, const std::string& n, const std::string& v) { o.min_p = parse_float(n, v, 0.0, 1.0); }},
      {{"--repeat-penalty"},
       "X",
       [](options& o, const std::string& n, const std::string& v) { o.repeat_penalty = parse_float(n, v, 1e-6, 1e6); }},
      {{"--presence-penalty"},
       "X",
       [](options& o, const std::string& n, const std::string& v) {
         o.presence_penalty = parse_float(n, v, -100.0, 100.0);
       }},
      {{"--frequency-penalty"},
       "X",
       [](options& o, const std::string& n, const std::string& v) {
         o.frequency_penalty = parse_float(n, v, -100.0, 100.0);
       }},
      {{"--repeat-last-n"},
       "N",
       [](options& o, const std::string& n, const std::string& v) { o.repeat_last_n = int(parse_int(n, v, 0, 4096)); }},
      {{"--ignore-eos"}, nullptr, [](options& o, auto&, auto&) { o.ignore_eos = true; }},
      {{"-l", "--logit-bias"},
       "ID(+|-)BIAS",
       [](options& o, const std::string& n, const std::string& v) { o.logit_bias.push_back(parse_logit_bias(n, v)); }},
      {{"--seed", "-s"},
       "N",
       [](options& o, const std::string& n, const std::string& v) {
         const int64_t s = parse_int(n, v, -1);
         if (s >= 0)
           o.seed = uint64_t(s);
         else
           o.seed.reset();
       }},
      {{"-ctk", "--cache-type-k"},
       "TYPE",
       [](options& o, const std::string& n, const std::string& v) { o.cache_type_k = parse_cache_type(n, v); }},
      {{"-ctv", "--cache-type-v"},
       "TYPE",
       [](options& o, const std::string& n, const std::string& v) { o.cache_type_v = parse_cache_type(n, v); }},
      {{"-sys", "--system"}, "TEXT", [](options& o, auto&, const std::string& v) { o.system_prompt = v; }},
      {{"-cnv", "--conversation"}, nullptr, [](options& o, auto&, auto&) { o.conversation = true; }},
      {{"--no-think"}, nullptr, [](options& o, auto&, auto&) { o.no_think = true; }},
      {{"--dump-logits"}, "FILE", [](options& o, auto&, const std::string& v) { o.dump_logits_path = v; }},
      {{"--print-token-ids"}, nullptr, [](options& o, auto&, auto&) { o.print_token_ids = true; }},
      {{"--perplexity"}, nullptr, [](options& o, auto&, auto&) { o.perplexity = true; }},
      {{"--chunks"},
       "N",
       [](options& o, const std::string& n, const std::string& v) { o.ppl_chunks = parse_int(n, v, 1, INT64_MAX); }},
      {{"--prompt-cache"}, "FILE", [](options& o, auto&, const std::string& v) { o.prompt_cache_path = v; }},
      {{"--expert-stats"}, "FILE", [](options& o, auto&, const std::string& v) { o.expert_stats_path = v; }},
      {{"--expert-heatmap"}, "FILE", [](options& o, auto&, const std::string& v) { o.expert_heatmap_path = v; }},
      {{"--expert-cache"},
       "N",
       [](options& o, const std::string& n, const std::string& v) { o.expert_cache = parse_int(n, v, 0, 65536); }},
      {{"--expert-plan"}, "FILE", [](options& o, auto&, const std::string& v) { o.expert_plan_path = v; }},
      {{"--expert-window"},
       "N",
       [](options& o, const std::string& n, const std::string& v) {
         o.expert_window = int(parse_int(n, v, 1, 65536));
       }},
      {{"--expert-rebalance"},
       "N",
       [](options& o, const std::string& n, const std::string& v) {
         o.expert_rebalance = int(parse_int(n, v, 0, 1 << 20));
       }},
      {{"--expert-policy"},
       "NAME",
       [](options& o, const std::string& n, const std::string& v) {
         if (v != "frequency" && v != "lru") throw usage_error(n + " expects frequency or lru, got '" + v + "'");
         o.expert_policy = v;
       }},
      {{"--vram"},
       "SIZE",
       [](options& o, const std::string& n, const std::string& v) {
         o.vram_list.clear();
         for (size_t at = 0; at <= v.size();) {
           const size_t comma = std::min(v.find(',', at), v.size());
           const std::string one = v.substr(at, comma - at);
           const std::optional<uint64_t> b = gen::parse_memory_size(one);
           if (!b)
             throw usage_error(n + " expects a size in bytes with an optional K, M, G or T suffix (e.g. 24G, " +
                               "16000M), got '" + one + "'");
           o.vram_list.push_back(*b);
           at = comma + 1;
         }
         o.vram = o.vram_list.front();
       }},
      {{"--moe-adaptive-k"},
       "K1,K2,K3",
       [](options& o, const std::string& n, const std::string& v) { o.moe_adaptive_k = parse_adaptive_k(n, v); }},
      {{"--moe-adaptive-entropy"},
       "H1,H2",
       [](options& o, const std::string& n,
          const std::string& v) { o.moe_adaptive_entropy = parse_adaptive_entropy(n, v); }},
      {{"--bench"}, nullptr, [](options& o, const std::string& n, auto&) { set_command(o, command::bench, n); }},
      {{"--bench-model"}, "NAME", [](options& o, auto&, const std::string& v) { o.bench_models.push_back(v); }},
      {{"--bench-json"}, "FILE", [](options& o, auto&, const std::string& v) { o.bench_json_path = v; }},
      {{"--bench-ctx"},
       "LIST",
       [](options& o, const std::string& n, const std::string& v) { o.bench_contexts = parse_int_list(n, v, 0); }},
      {{"--bench-pp"},
       "LIST",
       [](options& o, const std::string& n, const std::string& v) { o.bench_prompts = parse_int_list(n, v, 1); }},
      {{"--bench-layers"},
       "N",
       [](options& o, const std::string& n, const std::string& v) { o.bench_layers = parse_int(n, v, 1, 65536); }},
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
    f->apply(o, a, value);
  }
  if (o.cmd == command::help) return o;
  if (o.cmd == command::none && (o.prompt || o.conversation)) o.cmd = command::generate;
  if (o.cmd == command::none)
    throw usage_error(
        "nothing to do: give a prompt (-p, -f), -cnv, or a command (--info, --tokenize, --detokenize, --dump-tensor, "
        "--bench)");
  if (o.model_path.empty() && o.cmd != command::bench) throw usage_error("no model file given (-m FILE)");
  if (o.cmd == command::bench && !o.model_path.empty() && !o.bench_models.empty())
    throw usage_error("--bench-model picks a synthetic model: it cannot be combined with -m");
  if (o.bench_layers && (o.cmd != command::bench || !o.model_path.empty()))
    throw usage_error("--bench-layers cuts the synthetic models of --bench (without -m)");
  if (o.cmd == command::dump_tensor && o.out_path.empty()) throw usage_error("--dump-tensor needs --out PATH");
  if (o.cmd != command::generate && o.prompt) throw usage_error("-p/-f cannot be combined with another command");
  if (o.system_prompt && !o.conversation) throw usage_error("-sys is used by the chat template: add -cnv");
  if (o.no_think && !o.conversation) throw usage_error("--no-think is used by the chat template: add -cnv");
  for (const auto& [name, path] :
       {std::pair{"--expert-stats", &o.expert_stats_path}, std::pair{"--expert-heatmap", &o.expert_heatmap_path}}) {
    if (!*path) continue;
    if (path->value().empty()) throw usage_error(std::string(name) + ": empty path");
    if (o.cmd != command::generate)
      throw usage_error(std::string(name) + " traces a generation session (-p, -f, -cnv)");
  }
  if (o.moe_adaptive_entropy && !o.moe_adaptive_k)
    throw usage_error("--moe-adaptive-entropy sets the thresholds of --moe-adaptive-k: add it");
  const bool runs_model = o.cmd == command::generate || o.cmd == command::bench;
  if (o.expert_cache && !runs_model)
    throw usage_error("--expert-cache applies to generation (-p, -f, -cnv) and --bench");
  if (o.expert_policy && !runs_model)
    throw usage_error("--expert-policy applies to generation (-p, -f, -cnv) and --bench");
  if (o.vram && !runs_model) throw usage_error("--vram applies to generation (-p, -f, -cnv) and --bench");
  if (o.expert_window && !runs_model)
    throw usage_error("--expert-window applies to generation (-p, -f, -cnv) and --bench");
  if (o.expert_rebalance && !runs_model)
    throw usage_error("--expert-rebalance applies to generation (-p, -f, -cnv) and --bench");
  if (o.expert_plan_path && o.expert_plan_path->empty()) throw usage_error("--expert-plan: empty path");
  if (o.expert_plan_path && o.cmd != command::generate)
    throw usage_error("--expert-plan applies to generation (-p, -f, -cnv) of the traced model");
  if (o.vram_list.size() > 1 && o.cmd != command::bench)
    throw usage_error("--vram takes a list of budgets only with --bench (one row each)");
  if (o.moe_adaptive_k && o.cmd != command::generate)
    throw usage_error("--moe-adaptive-k applies to generation (-p, -f, -cnv)");
  if (o.ppl_chunks && !o.perplexity) throw usage_error("--chunks counts the chunks of --perplexity: add it");
  if (o.perplexity) {
    if (!o.prompt || o.cmd != command::generate) throw usage_error("--perplexity needs a text (-f FILE or -p TEXT)");
    if (o.conversation) throw usage_error("--perplexity measures a text: it cannot be combined with -cnv");
    if (!o.prompt_cache_path.empty() || !o.dump_logits_path.empty())
      throw usage_error("--perplexity cannot be combined with --prompt-cache or --dump-logits");
  }
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
         " -m FILE [-p PROMPT | -f FILE | -cnv] [options]\n"
         "       " +
         program +
         " -m FILE --info | --tokenize TEXT | --detokenize IDS | --dump-tensor NAME --out PATH\n"
         "       " +
         program +
         " --bench [-m FILE | --bench-model NAME ...] [--bench-json FILE]\n"
         "\n"
         "generation:\n"
         "  -p, --prompt TEXT      raw completion prompt (special tokens parsed, no chat template; with -cnv:\n"
         "                         the first user message)\n"
         "  -f, --file FILE        the prompt from a file\n"
         "  -cnv, --conversation   chat through the ChatML template; further user turns from stdin, one per line\n"
         "  -sys, --system TEXT    system message (with -cnv)\n"
         "  --no-think             the generation prompt carries an empty think block (with -cnv)\n"
         "  -n, --n-predict N      tokens to generate (default -1: until end of generation or a full context)\n"
         "  -c, --ctx-size N       context size in tokens (default 4096, at most the model's)\n"
         "  -b, --batch-size N     prompt tokens per batch (default 512)\n"
         "  --temp T               temperature (default 0.8; <= 0: greedy)\n"
         "  --top-k N              top-k (default 40; 0 = off)\n"
         "  --top-p P              top-p (default 0.95; 1 = off)\n"
         "  --min-p P              min-p (default 0.05; 0 = off)\n"
         "  --repeat-penalty X     repetition penalty (default 1.0 = off)\n"
         "  --presence-penalty X   subtracted once from each token of the window (default 0 = off;\n"
         "                         Qwen3.5's card suggests 1.5 against endless repetition)\n"
         "  --frequency-penalty X  subtracted per occurrence in the window (default 0 = off)\n"
         "  --repeat-last-n N      tokens the penalties look back, prompt included (default 64, at\n"
         "                         most 4096)\n"
         "  -l, --logit-bias ID(+|-)BIAS\n"
         "                         add BIAS (at most 100; -inf: never) to token ID's logit before the\n"
         "                         penalties, e.g. 15043+1.5; repeatable\n"
         "  --ignore-eos           never draw an end-of-generation token: generate -n tokens (or\n"
         "                         to a full context)\n"
         "  -s, --seed N           sampling seed (default -1: from the clock)\n"
         "  -ctk, -ctv TYPE        KV cache element type for K / V: f32, f16 (default), bf16\n"
         "  --dump-logits FILE     little-endian float32 logits rows: every prompt position, then every\n"
         "                         generated token\n"
         "  --print-token-ids      print the prompt's and the generated token ids on stderr\n"
         "  --perplexity           the perplexity of the -f/-p text instead of generating, as llama-perplexity\n"
         "                         measures it: chunks of -c tokens, each token of a chunk's second half\n"
         "                         scored; prints the running estimate per chunk and the final one\n"
         "  --chunks N             --perplexity: at most N chunks (default: every whole chunk)\n"
         "  --prompt-cache FILE    resume from the state saved after an earlier prompt that this one extends,\n"
         "                         and save the state after this prompt\n"
         "  --expert-stats FILE    MoE models: at the end of the session, write per MoE layer the tokens routed\n"
         "                         to each expert (every prompt and generated token, every turn) as JSON\n"
         "  --expert-heatmap FILE  MoE models: the same counts as an SVG heat map (layers x experts)\n"
         "  --expert-cache N       MoE models: keep the routed experts in pinned host memory and N of each\n"
         "                         MoE layer's experts in device slots (the most used, promoted as the session\n"
         "                         goes); the decode kernels read the others over the bus. N >= expert_count:\n"
         "                         every expert on the device. Default: as many as --vram holds\n"
         "  --expert-plan FILE     MoE models: place the slots by a workload traced with --expert-stats FILE:\n"
         "                         each layer gets the slots that save the most bus bytes for it and starts\n"
         "                         with its most selected experts (the same number per layer without it)\n"
         "  --expert-policy NAME   which experts the slots hold: frequency (the most selections, halved every\n"
         "                         rebalance; the default) or lru (the most recently selected)\n"
         "  --expert-rebalance N   MoE models with host experts: decode steps between rebalances of the slots\n"
         "                         (each reads the router's counts; default 16; 0: the slots keep their first\n"
         "                         experts)\n"
         "  --expert-window N      MoE models with host experts: a prompt chunk of more than 8 tokens copies\n"
         "                         its selected experts into a staging area N experts at a time (default 64);\n"
         "                         a smaller area leaves more device memory for slots, a larger one fewer\n"
         "                         launches\n"
         "  --vram SIZE            device memory q35 may use (24G, 16000M, 1.5GiB; K/M/G/T are powers of\n"
         "                         1024). Weights but the routed experts, KV cache, state and workspaces go\n"
         "                         first; then every routed expert if all fit, else as many slots per MoE\n"
         "                         layer as fit, the rest in pinned host memory. Default: the device's free\n"
         "                         memory less max(512 MiB, 4%) (the sim: no limit)\n"
         "  --moe-adaptive-k K1,K2,K3\n"
         "                         MoE models: fewer experts when the router is sure: a token whose routing\n"
         "                         entropy is below H1 uses K1 experts, below H2 K2, else K3 (each at most the\n"
         "                         file's expert_used_count); departs from the trained routing\n"
         "  --moe-adaptive-entropy H1,H2\n"
         "                         the entropy thresholds in nats (default 1.2,2.5)\n"
         "\n"
         "commands:\n"
         "  --info                 architecture, matched model, hyper-parameters, tensors by type, memory\n"
         "                         for weights + state at -c tokens, tokenizer\n"
         "  --tokenize TEXT        token ids of TEXT (special tokens such as <|im_start|> parsed), one line\n"
         "  --detokenize \"ID ...\"  the text of space-separated token ids\n"
         "  --dump-tensor NAME     tensor NAME dequantized to little-endian float32 (with --out PATH)\n"
         "  --bench                decode tokens/s (tg128 after prompts of --bench-ctx tokens), prefill tokens/s\n"
         "                         (--bench-pp), bytes per token against the measured copy bandwidth and a\n"
         "                         decode step split by call; of -m FILE, or else of synthetic full-size Q4_K_M\n"
         "                         models built on the device (on the sim: tiny shapes, timings meaningless)\n"
         "  --bench-model NAME     a synthetic model: 9B, 27B, 35B-A3B, 122B-A10B, 397B-A17B, 9B-MoE, tiny-dense,\n"
         "                         tiny-moe (repeatable)\n"
         "                         With --vram SIZE[,SIZE...] each model runs once per budget, its routed experts\n"
         "                         in host memory behind as many slots as fit (--expert-cache N: N slots); the\n"
         "                         rows add the hit rate, host bytes per token and the zero-copy bandwidth\n"
         "  --bench-json FILE      results as JSON (default bench_<gpu>.json)\n"
         "  --bench-ctx LIST       decode contexts, comma-separated (default 0,4096,32768; sim 0,48)\n"
         "  --bench-pp LIST        prefill lengths, comma-separated (default 512,4096; sim 32)\n"
         "  --bench-layers N       synthetic models cut to their first N layers (each layer full size; the\n"
         "                         schedule's first N entries): a big shape's layers on a small machine\n"
         "\n"
         "  -m, --model FILE       a qwen35 / qwen35moe GGUF file\n"
         "  -h, --help             this text\n";
}

}  // namespace q35::cli
