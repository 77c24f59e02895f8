// Generation: -p / -f raw completion, or -cnv chat through the ChatML template; streams UTF-8 text as
// tokens arrive and prints llama.cpp-style timings on stderr.
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "commands.hpp"
#include "decoder.hpp"
#include "device_model.hpp"
#include "expert_report.hpp"
#include "expert_trace.hpp"
#include "memory_plan.hpp"
#include "model_loader.hpp"
#include "perplexity.hpp"
#include "prompt_cache.hpp"
#include "q35/io/chat_template.hpp"
#include "q35/io/model_info.hpp"
#include "q35/io/stream_decoder.hpp"
#include "q35/io/tokenizer.hpp"

namespace q35::cli {

namespace {

using clock_type = std::chrono::steady_clock;
double seconds_since(clock_type::time_point t) { return std::chrono::duration<double>(clock_type::now() - t).count(); }

void check(const status& s, const std::string& what) {
  if (!s.ok()) throw std::runtime_error(what + ": " + s.message());
}

kv::kv_type to_kv_type(kv_cache_type t) {
  return t == kv_cache_type::f32 ? kv::kv_type::f32 : t == kv_cache_type::bf16 ? kv::kv_type::bf16 : kv::kv_type::f16;
}

// A progress bar on stderr, only when it is a terminal.
struct progress_bar {
  bool on = isatty(2) != 0;
  int last = -1;
  void operator()(uint64_t done, uint64_t total) {
    if (!on || total == 0) return;
    const int pct = int(done * 100 / total);
    if (pct == last) return;
    last = pct;
    std::fprintf(stderr, "\rloading [%-40s] %3d%%", std::string(size_t(pct * 40 / 100), '=').c_str(), pct);
    if (done == total) std::fprintf(stderr, "\n");
    std::fflush(stderr);
  }
};

struct timings {
  double load_s = 0, prompt_s = 0, gen_s = 0;
  int64_t prompt_tokens = 0, gen_tokens = 0;
};

class session {
 public:
  session(const options& opt, const io::gguf_file& file, const io::tokenizer& tok, gen::decoder& dec)
      : opt_(opt), file_(file), tok_(tok), dec_(dec), out_(tok) {
    params_.temperature = opt.temperature;
    params_.top_k = opt.top_k;
    params_.top_p = opt.top_p;
    params_.min_p = opt.min_p;
    params_.repeat_penalty = opt.repeat_penalty;
    params_.presence_penalty = opt.presence_penalty;
    params_.frequency_penalty = opt.frequency_penalty;
    params_.repeat_last_n = opt.repeat_last_n;
    params_.seed = opt.seed ? *opt.seed : uint64_t(std::chrono::system_clock::now().time_since_epoch().count());
    for (const auto& [id, b] : opt.logit_bias) {
      if (id >= dec_.n_vocab())
        throw usage_error("--logit-bias: token id " + std::to_string(id) + " is outside the model's vocabulary of " +
                          std::to_string(dec_.n_vocab()) + " tokens");
      bias_.push_back({id, b});
    }
    if (opt.ignore_eos)  // after the user's biases, as llama.cpp adds its -inf for --ignore-eos
      for (const int32_t id : tok_.eog_ids()) bias_.push_back({id, -INFINITY});
    if (bias_.size() > size_t(launch::logit_bias_max_entries))
      throw usage_error("--logit-bias: given " + std::to_string(bias_.size()) + " times, at most " +
                        std::to_string(launch::logit_bias_max_entries));
    if (!opt.dump_logits_path.empty()) {
      dump_.open(opt.dump_logits_path, std::ios::binary | std::ios::trunc);
      if (!dump_) throw std::runtime_error("--dump-logits: cannot write '" + opt.dump_logits_path + "'");
    }
  }

  // Feeds `ids` (after what is already in the context; may be empty when a restored state already holds
  // the prompt and its logits), calls `after_prompt` once the prompt is in, then generates up to -n
  // tokens; returns false when the context filled up.
  template <class AfterPrompt>
  bool turn(const std::vector<int32_t>& ids, timings& t, AfterPrompt&& after_prompt) {
    if (dec_.n_past() + int64_t(ids.size()) > dec_.n_ctx())
      throw std::runtime_error(
          "the prompt has " + std::to_string(ids.size()) + " tokens, " +
          (dec_.n_past() ? "which with the " + std::to_string(dec_.n_past()) + " tokens already in the context are"
                         : std::string("which is")) +
          " more than the context of " + std::to_string(dec_.n_ctx()) + " tokens (-c)");
    if (opt_.print_token_ids) print_ids("prompt", ids);
    const auto t0 = clock_type::now();
    std::vector<float> rows;
    if (!ids.empty()) {
      check(dec_.eval(ids, dump_.is_open() ? &rows : nullptr), "evaluating the prompt");
      fed_ += int64_t(ids.size());
      write_rows(rows);
      std::vector<float> probe;
      check(dec_.last_logits(probe), "evaluating the prompt");  // waits for the prompt (timing)
    }
    t.prompt_s += seconds_since(t0);
    t.prompt_tokens += int64_t(ids.size());
    after_prompt();

    const auto t1 = clock_type::now();
    std::vector<int32_t> generated;
    bool full = false;
    for (int64_t i = 0; opt_.n_predict < 0 || i < opt_.n_predict; ++i) {
      if (dec_.n_past() >= dec_.n_ctx()) {
        full = true;
        break;
      }
      int32_t id = 0;
      const gen::seq_sample request{0, params_, dec_.tokens(), bias_};
      std::vector<int32_t> drawn;
      check(dec_.sample({&request, 1}, drawn), "sampling");
      id = drawn[0];
      generated.push_back(id);
      ++t.gen_tokens;
      if (tok_.is_eog(id)) break;
      std::cout << out_.push(id) << std::flush;
      rows.clear();
      check(dec_.eval({&id, 1}, dump_.is_open() ? &rows : nullptr), "decoding");
      ++fed_;
      write_rows(rows);
    }
    std::cout << out_.flush() << std::flush;
    t.gen_s += seconds_since(t1);
    if (opt_.print_token_ids) print_ids("generated", generated);
    if (full) std::cerr << "\n[context full: " << dec_.n_ctx() << " tokens (-c); generation stopped]\n";
    return !full;
  }

  const launch::sampling_params& params() const { return params_; }
  int64_t tokens_fed() const { return fed_; }  // prompt and generated tokens evaluated by the decoder

 private:
  void write_rows(const std::vector<float>& rows) {
    if (!dump_.is_open() || rows.empty()) return;
    dump_.write(reinterpret_cast<const char*>(rows.data()), std::streamsize(rows.size() * sizeof(float)));
    if (!dump_) throw std::runtime_error("--dump-logits: writing '" + opt_.dump_logits_path + "' failed");
  }
  static void print_ids(const char* what, const std::vector<int32_t>& ids) {
    std::cerr << "[" << what << " ids:";
    for (int32_t id : ids) std::cerr << ' ' << id;
    std::cerr << "]\n";
  }

  const options& opt_;
  const io::gguf_file& file_;
  const io::tokenizer& tok_;
  gen::decoder& dec_;
  io::stream_decoder out_;
  launch::sampling_params params_;
  std::vector<launch::logit_bias_entry> bias_;  // --logit-bias, in the order given
  std::ofstream dump_;
  int64_t fed_ = 0;
};

// --expert-stats / --expert-heatmap: the flags given, with their paths.
std::vector<std::pair<std::string, std::string>> expert_outputs(const options& opt) {
  std::vector<std::pair<std::string, std::string>> o;
  if (opt.expert_stats_path) o.emplace_back("--expert-stats", *opt.expert_stats_path);
  if (opt.expert_heatmap_path) o.emplace_back("--expert-heatmap", *opt.expert_heatmap_path);
  return o;
}

// --moe-adaptive-k / --moe-adaptive-entropy against the file: none without the flag; an error naming
// the flag when the model has no MoE layers or a k value exceeds its expert_used_count.
std::optional<ops::adaptive_k_options> adaptive_k_of(const options& opt, const io::model_hparams& h) {
  if (!opt.moe_adaptive_k) return std::nullopt;
  if (h.count(models::ffn_type::moe) == 0)
    throw std::runtime_error("--moe-adaptive-k: " + opt.model_path + " has no MoE layers");
  ops::adaptive_k_options a;
  for (int i = 0; i < 3; ++i) {
    const int k = (*opt.moe_adaptive_k)[size_t(i)];
    if (k > int(h.n_experts_used))
      throw std::runtime_error("--moe-adaptive-k: k value " + std::to_string(k) + " exceeds the model's " + h.arch +
                               ".expert_used_count = " + std::to_string(h.n_experts_used));
    a.k_values[i] = k;
  }
  if (opt.moe_adaptive_entropy)
    for (int i = 0; i < 2; ++i) a.entropy_below[i] = (*opt.moe_adaptive_entropy)[size_t(i)];
  return a;
}

// The session's expert selections to the files of --expert-stats and --expert-heatmap.
void write_expert_report(const options& opt, const io::gguf_file& file, const io::model_hparams& h, gen::decoder& dec,
                         int64_t tokens) {
  gen::expert_report r;
  r.model = file.has("general.name") ? file.get_string("general.name")
                                     : std::filesystem::path(opt.model_path).filename().string();
  r.arch = h.arch;
  r.n_experts = int(h.n_experts);
  r.n_experts_used = int(h.n_experts_used);
  r.tokens = tokens;
  if (const auto a = adaptive_k_of(opt, h)) {
    r.adaptive_entropy_below.assign(std::begin(a->entropy_below), std::end(a->entropy_below));
    r.adaptive_k_values.assign(std::begin(a->k_values), std::end(a->k_values));
  }
  check(gen::fill_expert_report(dec, r), "reading the expert statistics");
  if (opt.expert_stats_path) gen::write_output("--expert-stats", *opt.expert_stats_path, gen::expert_report_json(r));
  if (opt.expert_heatmap_path)
    gen::write_output("--expert-heatmap", *opt.expert_heatmap_path, gen::expert_heatmap_svg(r));
}

void print_timings(const timings& t, const gen::device_model& m, const gen::decoder& d) {
  std::fprintf(stderr, "\n%s: load time    = %10.2f ms\n", "q35", t.load_s * 1e3);
  std::fprintf(stderr, "%s: prompt eval  = %10.2f ms / %5lld tokens (%8.2f tokens per second)\n", "q35",
               t.prompt_s * 1e3, (long long)t.prompt_tokens,
               t.prompt_s > 0 ? double(t.prompt_tokens) / t.prompt_s : 0.0);
  std::fprintf(stderr, "%s: generation   = %10.2f ms / %5lld tokens (%8.2f tokens per second)\n", "q35", t.gen_s * 1e3,
               (long long)t.gen_tokens, t.gen_s > 0 ? double(t.gen_tokens) / t.gen_s : 0.0);
  std::fprintf(stderr, "%s: memory: weights %s, KV cache %s, recurrent state %s, workspace %s (%s backend)\n", "q35",
               io::format_bytes(m.weight_bytes()).c_str(), io::format_bytes(d.kv_bytes()).c_str(),
               io::format_bytes(d.recurrent_bytes()).c_str(), io::format_bytes(d.workspace_bytes()).c_str(),
               Q35_BACKEND_NAME);
  if (!d.graph_failure().empty())
    std::fprintf(stderr, "%s: decode steps ran without CUDA graphs: %s\n", "q35", d.graph_failure().c_str());
}

}  // namespace

int run_generate(const options& opt, std::ostream&) {
  timings t;
  const auto t_load = clock_type::now();
  const auto file = io::gguf_file::open(opt.model_path);
  std::string matched;
  const io::bound_model bound = bind_any_model(file, matched);
  const io::tokenizer tok = io::tokenizer::from_gguf(file);
  check(gen::check_supported(bound.hparams), file.path());
  const int64_t model_ctx = bound.hparams.context_length;
  const int64_t n_ctx = opt.n_ctx ? *opt.n_ctx : std::min<int64_t>(4096, model_ctx);
  if (n_ctx > model_ctx)
    throw std::runtime_error("-c " + std::to_string(n_ctx) + " exceeds the model's context length " +
                             std::to_string(model_ctx) + " (" + bound.hparams.arch + ".context_length)");
  if (opt.cache_type_k != opt.cache_type_v)
    throw std::runtime_error("-ctk and -ctv must name the same type (the KV pool holds one element type)");
  const auto expert_files = expert_outputs(opt);
  for (const auto& [flag, path] : expert_files) {
    const std::string bad = gen::check_output_path(flag, path);
    if (!bad.empty()) throw std::runtime_error(bad);
    if (bound.hparams.count(models::ffn_type::moe) == 0)
      throw std::runtime_error(flag + ": " + opt.model_path + " has no MoE layers (no expert selections to trace)");
  }

  std::optional<ops::adaptive_k_options> adaptive = adaptive_k_of(opt, bound.hparams);

  if (opt.expert_cache && bound.hparams.count(models::ffn_type::moe) == 0)
    throw std::runtime_error("--expert-cache: " + opt.model_path + " has no MoE layers");
  if (opt.expert_policy && bound.hparams.count(models::ffn_type::moe) == 0)
    throw std::runtime_error("--expert-policy: " + opt.model_path + " has no MoE layers");
  if (opt.expert_window && bound.hparams.count(models::ffn_type::moe) == 0)
    throw std::runtime_error("--expert-window: " + opt.model_path + " has no MoE layers");
  if (opt.expert_rebalance && bound.hparams.count(models::ffn_type::moe) == 0)
    throw std::runtime_error("--expert-rebalance: " + opt.model_path + " has no MoE layers");
  // a traced workload (an earlier session's --expert-stats) places the slots (--expert-plan)
  std::optional<std::vector<std::vector<uint64_t>>> trace;
  if (opt.expert_plan_path) {
    if (bound.hparams.count(models::ffn_type::moe) == 0)
      throw std::runtime_error("--expert-plan: " + opt.model_path + " has no MoE layers");
    trace.emplace();
    if (const status st = gen::read_expert_trace(*opt.expert_plan_path, bound.hparams, *trace); !st.ok())
      throw std::runtime_error(st.message());  // names the flag and the file
  }
  gen::decoder_config cfg;
  cfg.n_ctx = n_ctx;
  cfg.kv_type = to_kv_type(opt.cache_type_k);
  cfg.n_batch = opt.n_batch;
  cfg.keep_all_logits = !opt.dump_logits_path.empty();
  if (opt.perplexity) cfg.score_rows = 64;  // 64 x n_vocab floats of LM-head rows at once
  cfg.expert_stats = !expert_files.empty();
  cfg.moe_adaptive_k = adaptive;
  if (opt.expert_policy == "lru") cfg.expert_cache_policy = gen::expert_policy::lru;
  if (opt.expert_window) cfg.expert_staging_window = *opt.expert_window;
  if (opt.expert_rebalance) cfg.expert_rebalance_steps = *opt.expert_rebalance;

  // The memory plan: the non-expert part first, then every routed expert or as many slots as fit.
  const uint64_t budget = opt.vram ? *opt.vram : gen::default_memory_budget();
  gen::memory_plan plan;
  check(gen::plan_memory(file, bound.hparams, bound.weights, cfg, budget, opt.expert_cache, plan,
                         trace ? &*trace : nullptr),
        opt.vram ? "--vram " + gen::format_bytes(budget) : std::string("the device's free memory"));
  if (opt.vram || plan.host_experts()) std::fprintf(stderr, "q35: memory plan: %s\n", plan.describe().c_str());

  gen::device_model model;
  progress_bar bar;
  const auto progress = [&](uint64_t d, uint64_t n) { bar(d, n); };
  check(plan.host_experts() ? model.load(file, bound, progress, plan.placement()) : model.load(file, bound, progress),
        "loading " + opt.model_path);
  gen::decoder dec;
  check(dec.init(model, cfg), "setting up the decoder");
  t.load_s = seconds_since(t_load);

  session s(opt, file, tok, dec);
  if (!opt.conversation) {
    std::vector<int32_t> ids;
    const bool add_bos = file.has("tokenizer.ggml.add_bos_token") && file.get_bool("tokenizer.ggml.add_bos_token");
    if (add_bos && tok.specials().bos) ids.push_back(*tok.specials().bos);
    const std::vector<int32_t> text = tok.encode(*opt.prompt, /*parse_special=*/true);
    ids.insert(ids.end(), text.begin(), text.end());
    if (opt.perplexity) {
      const auto t_ppl = clock_type::now();
      const perplexity_result r = run_perplexity(opt, ids, dec, std::cout);
      t.prompt_s = seconds_since(t_ppl), t.prompt_tokens = r.chunks * dec.n_ctx();
      if (!expert_files.empty()) write_expert_report(opt, file, bound.hparams, dec, t.prompt_tokens);
      print_timings(t, model, dec);
      return 0;
    }
    if (ids.empty()) throw std::runtime_error("the prompt is empty (no tokens to start from)");
    std::cout << *opt.prompt << std::flush;
    if (opt.prompt_cache_path.empty()) {
      s.turn(ids, t, [] {});
    } else {
      // resume from the saved state when this prompt extends the cached one; save after the prompt
      const size_t resumed = resume_from_cache(opt.prompt_cache_path, file, dec, ids);
      s.turn(std::vector<int32_t>(ids.begin() + long(resumed), ids.end()), t,
             [&] { save_cache(opt.prompt_cache_path, file, dec); });
    }
  } else {
    // The first turn is the template's rendering of the system and user messages; each later turn feeds
    // only its new tokens (the end of the assistant's turn, the user message, the generation prompt), so
    // the state is kept across turns. The model keeps its own earlier thinking in context (the template
    // would drop it when re-rendering, which a recurrent state cannot follow without re-processing).
    std::vector<io::chat_message> first;
    if (opt.system_prompt) first.push_back({"system", *opt.system_prompt, {}});
    io::chat_options copt;
    copt.enable_thinking = !opt.no_think;
    const std::string generation_prompt =
        copt.enable_thinking ? "<|im_start|>assistant\n<think>\n" : "<|im_start|>assistant\n<think>\n\n</think>\n\n";
    std::string user;
    for (bool first_turn = true;; first_turn = false) {
      if (first_turn && opt.prompt) {
        user = *opt.prompt;
      } else {
        if (isatty(0)) std::cerr << "\n> " << std::flush;
        if (!std::getline(std::cin, user)) break;
        if (user.empty()) continue;
      }
      std::string text;
      if (dec.n_past() == 0) {
        first.push_back({"user", user, {}});
        text = io::render_chat(first, copt);
      } else {
        text = "<|im_end|>\n<|im_start|>user\n" + user + "<|im_end|>\n" + generation_prompt;
      }
      if (!s.turn(tok.encode(text, /*parse_special=*/true), t, [] {})) break;
      std::cout << "\n" << std::flush;
    }
  }
  if (!expert_files.empty()) write_expert_report(opt, file, bound.hparams, dec, s.tokens_fed());
  if (model.experts()) {
    std::vector<gen::expert_cache_stats> cache;
    check(dec.expert_cache(cache), "reading the expert cache's record");
    gen::expert_cache_stats all;
    for (const gen::expert_cache_stats& c : cache)
      all.hits += c.hits, all.misses += c.misses, all.host_bytes += c.host_bytes, all.promotions += c.promotions;
    std::fprintf(stderr,
                 "q35: expert cache: hit rate %.1f%% of %llu decode selections, %.1f MiB from host memory, "
                 "%llu promotions\n",
                 all.hits + all.misses ? 100.0 * double(all.hits) / double(all.hits + all.misses) : 0.0,
                 (unsigned long long)(all.hits + all.misses), double(all.host_bytes) / 1048576.0,
                 (unsigned long long)all.promotions);
  }
  print_timings(t, model, dec);
  return 0;
}

}  // namespace q35::cli
