// --bench: llama-bench-like end-to-end numbers of the decoder. Per model: prefill tokens/s (ppN), decode
// tokens/s (tg128 after a prompt of each context length, greedy sampling on the device, CUDA graphs as
// the decoder uses them), bytes read per generated token against the copy bandwidth measured in the same
// run, and one decode step split by call from timestamps recorded between the decoder's calls.
// Models: -m FILE, or synthetic full-size Q4_K_M models built on the device (synth_model).
#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "bench_device.hpp"
#include "bench_report.hpp"
#include "commands.hpp"
#include "decoder.hpp"
#include "device_model.hpp"
#include "memory_plan.hpp"
#include "model_loader.hpp"
#include "q35/launch/launch.hpp"
#include "q35/models/qwen35_moe.hpp"
#include "synth_model.hpp"

namespace q35::cli {

using namespace bench;

namespace {

double seconds_since(clock_type::time_point t) { return std::chrono::duration<double>(clock_type::now() - t).count(); }

#if Q35_BACKEND_CUDA
constexpr bool on_gpu = true;
#else
constexpr bool on_gpu = false;
#endif

// ---- what is measured ----
category category_of(gen::decoder::call c) {
  switch (c) {
    case gen::decoder::call::norm:
      return cat_norm;
    case gen::decoder::call::attention:
      return cat_attention;
    case gen::decoder::call::gdn:
      return cat_gdn;
    case gen::decoder::call::dense_ffn:
      return cat_dense_ffn;
    case gen::decoder::call::moe_ffn:
      return cat_moe_ffn;
    case gen::decoder::call::lm_head:
      return cat_lm_head;
    default:
      return cat_other;
  }
}

// Bytes the weights cost per generated token: every tensor but token_embd (one row of it is gathered;
// tied: the LM head reads all of it), and of the routed expert tensors only k of n_experts matrices.
double weight_bytes_per_token(const io::model_hparams& h,
                              const std::vector<std::pair<std::string, uint64_t>>& tensors) {
  bool tied = true;
  for (const auto& [name, bytes] : tensors) tied = tied && name != "output.weight";
  double sum = 0;
  for (const auto& [name, bytes] : tensors) {
    if (io::is_mtp_tensor(h, name)) continue;
    if (name == "token_embd.weight") {
      sum += tied ? double(bytes) : double(bytes) / double(h.n_vocab);
    } else if (name.find("_exps.") != std::string::npos) {
      sum += double(bytes) * double(h.n_experts_used) / double(h.n_experts);
    } else {
      sum += double(bytes);
    }
  }
  return sum;
}

// K and V bytes a decode step reads at context c (f16 cache): every full-attention layer, c + 1 tokens.
double kv_bytes_at(const io::model_hparams& h, int64_t c) {
  return double(h.count(models::layer_type::full_attention)) * double(h.n_kv_heads) * double(h.head_dim + h.value_dim) *
         2.0 * double(c + 1);
}

// ---- one model ----
class model_bench {
 public:
  model_bench(const gen::device_model& m, const bench_plan& plan, const gen::decoder_config& cfg)
      : m_(m), plan_(plan), rng_(20261201) {
    check(dec_.init(m, cfg), "decoder init");
    greedy_.temperature = 0.0f, greedy_.top_k = 0, greedy_.top_p = 1.0f, greedy_.min_p = 0.0f;
    greedy_.repeat_penalty = 1.0f, greedy_.repeat_last_n = 0;
  }

  uint64_t recurrent_bytes() const { return dec_.recurrent_bytes(); }
  bool graphs() const { return dec_.graphs_active(); }
  const std::string& graph_failure() const { return dec_.graph_failure(); }

  // Warm-up: a short prompt and a few steps (records the decode graph), then a fresh sequence.
  void warm_up() {
    feed_prompt(8);
    int32_t id = 0;
    for (int i = 0; i < 4; ++i) step(id);
    check(dec_.clear(), "clear");
  }

  // Prefill tokens/s of a prompt of n tokens from an empty context (on a GPU the median of 3 for short prompts),
  // and its last logits' digest. The prompt depends on n alone (as decode's on its context).
  prefill_result prefill(int64_t n) {
    prefill_result r;
    r.tokens = n;
    std::mt19937_64 prompt_rng(20261204u + uint64_t(n));
    const std::vector<int32_t> ids = random_ids(n, prompt_rng);
    std::vector<double> s;
    for (int k = 0; k < (on_gpu && n <= 1024 ? 3 : 1); ++k) {  // the sim: one (its timings mean nothing)
      check(dec_.clear(), "clear");
      check(synchronize(dec_.stream()), "clear");  // the reset of the state is not the prompt's time
      const auto t0 = clock_type::now();
      check(dec_.eval(ids), "prefill");
      check(synchronize(dec_.stream()), "prefill");
      s.push_back(seconds_since(t0));
    }
    std::sort(s.begin(), s.end());
    r.tok_s = double(n) / s[s.size() / 2];
    r.logits_digest = last_logits_digest(nullptr);
    return r;
  }

  // tg after a prompt of `c` tokens, then the step breakdown there.
  context_result decode(int64_t c) {
    context_result r;
    r.context = c;
    check(dec_.clear(), "clear");
    // context 0: one token, so there are logits to sample; the prompt depends on c alone, so runs of
    // this model under other budgets decode the same tokens (logits_digest)
    std::mt19937_64 prompt_rng(20261203u + uint64_t(c));
    check(dec_.eval(random_ids(std::max<int64_t>(c, 1), prompt_rng)), "prompt");
    // eval returns with the prompt's last chunk still queued; without this wait the first step would
    // wait for it inside the timed loop and tg at a long context would count part of its prefill
    check(synchronize(dec_.stream()), "prompt");
    int32_t id = 0;
    std::vector<int32_t> ids;
    const gen::expert_cache_stats before = cache_totals();
    const auto t0 = clock_type::now();
    for (int64_t i = 0; i < plan_.tg; ++i) {
      step(id);
      ids.push_back(id);
    }
    check(synchronize(dec_.stream()), "decode");
    const double s = seconds_since(t0);
    r.tok_s = double(plan_.tg) / s;
    r.ms_per_token = 1e3 * s / double(plan_.tg);
    if (dec_.expert_slots() >= 0) {
      const gen::expert_cache_stats after = cache_totals();
      const double looks = double(after.hits - before.hits + after.misses - before.misses);
      r.hit_rate = looks > 0 ? double(after.hits - before.hits) / looks : 0;
      r.host_bytes_per_token = double(after.host_bytes - before.host_bytes) / double(plan_.tg);
      r.promotions_per_token = double(after.promotions - before.promotions) / double(plan_.tg);
    }
    std::sort(ids.begin(), ids.end());
    r.distinct_ids = int(std::unique(ids.begin(), ids.end()) - ids.begin());
    r.logits_digest = last_logits_digest(&r.finite);
    r.b = breakdown(id);
    return r;
  }

  // The decoder's configuration for `plan` (the context its longest run needs, f16 KV).
  static gen::decoder_config config(const bench_plan& plan, int64_t n_batch, gen::expert_policy policy) {
    gen::decoder_config cfg;
    const int64_t max_ctx = plan.contexts.empty() ? 0 : *std::max_element(plan.contexts.begin(), plan.contexts.end());
    int64_t max_pp = 0;
    for (int64_t p : plan.prompts) max_pp = std::max(max_pp, p);
    cfg.n_ctx = std::max(max_ctx + plan.tg + 2 * plan.breakdown_steps + 16, max_pp + 16);
    cfg.n_batch = n_batch;
    cfg.kv_type = kv::kv_type::f16;
    cfg.expert_cache_policy = policy;
    return cfg;
  }

 private:
  // The expert cache's record summed over the MoE layers (zero without host-resident experts).
  gen::expert_cache_stats cache_totals() {
    std::vector<gen::expert_cache_stats> per_layer;
    check(dec_.expert_cache(per_layer), "expert cache");
    gen::expert_cache_stats t;
    for (const gen::expert_cache_stats& c : per_layer) {
      t.hits += c.hits, t.misses += c.misses, t.staged += c.staged;
      t.host_bytes += c.host_bytes, t.promotions += c.promotions;
    }
    return t;
  }

  // FNV-1a over the bits of the last logits; *finite (if given) is cleared by a non-finite logit.
  uint64_t last_logits_digest(bool* finite) {
    std::vector<float> logits;
    check(dec_.last_logits(logits), "logits");
    uint64_t h = 0xcbf29ce484222325ull;
    for (float v : logits) {
      if (finite) *finite = *finite && std::isfinite(v);
      uint32_t u;
      std::memcpy(&u, &v, 4);
      for (int k = 0; k < 4; ++k) h = (h ^ ((u >> (8 * k)) & 0xffu)) * 0x100000001b3ull;
    }
    return h;
  }

  std::vector<int32_t> random_ids(int64_t n) { return random_ids(n, rng_); }
  std::vector<int32_t> random_ids(int64_t n, std::mt19937_64& g) const {
    std::uniform_int_distribution<int32_t> pick(0, int32_t(m_.hparams().n_vocab) - 1);
    std::vector<int32_t> ids(static_cast<size_t>(n));
    for (int32_t& x : ids) x = pick(g);
    return ids;
  }
  void feed_prompt(int64_t n) {
    if (n > 0) check(dec_.eval(random_ids(n)), "prompt");
  }
  // One generated token: sample the last logits on the device, feed the id back.
  void step(int32_t& id) {
    check(dec_.sample(greedy_, {}, id), "sample");
    check(dec_.eval({&id, 1}), "decode step");
  }

  // The mean of plan.breakdown_steps eager steps split by call (timestamps recorded between the calls),
  // and of as many steps as the decoder runs them (graph replay on CUDA), forward only.
  step_breakdown breakdown(int32_t& id) {
    step_breakdown b;
    const int n = plan_.breakdown_steps;
    if (n < 1) return b;
    timeline t;
    t.reserve(4 * m_.layers().size() + 16);
    std::vector<category> cats;
    dec_.set_call_hook([&](gen::decoder::call c) {
      t.record(dec_.stream());
      cats.push_back(category_of(c));
    });
    for (int i = 0; i < n; ++i) {
      t.clear();
      cats.clear();
      const size_t start = t.record(dec_.stream());
      check(dec_.eval({&id, 1}), "eager step");
      const size_t forward_end = t.record(dec_.stream());
      check(dec_.sample(greedy_, {}, id), "sample");
      const size_t end = t.record(dec_.stream());
      for (size_t k = 0; k < cats.size(); ++k) b.ms[cats[k]] += t.ms(start + k, start + k + 1) / n;
      b.eager_forward_ms += t.ms(start, forward_end) / n;
      b.ms[cat_sampling] += t.ms(forward_end, end) / n;
    }
    dec_.set_call_hook({});
    for (int i = 0; i < n; ++i) {
      t.clear();
      const size_t e0 = t.record(dec_.stream());
      check(dec_.eval({&id, 1}), "step");
      const size_t e1 = t.record(dec_.stream());
      check(dec_.sample(greedy_, {}, id), "sample");
      b.graph_forward_ms += t.ms(e0, e1) / n;
    }
    return b;
  }

  const gen::device_model& m_;
  const bench_plan& plan_;
  std::mt19937_64 rng_;
  gen::decoder dec_;
  launch::sampling_params greedy_;
};

// Runs the plan on model `m`; `tensors` (name, bytes) count the bytes per token.
void run_model(model_result& r, const gen::device_model& m,
               const std::vector<std::pair<std::string, uint64_t>>& tensors, const bench_plan& plan,
               const device_facts& dev, const gen::decoder_config& cfg, std::ostream& out) {
  const io::model_hparams& h = m.hparams();
  model_bench b(m, plan, cfg);
  r.weight_bytes = m.weight_bytes();
  r.weight_bytes_per_token = weight_bytes_per_token(h, tensors);
  r.state_bytes_per_token = 2.0 * double(b.recurrent_bytes());  // GDN state read + written
  b.warm_up();
  r.graphs = b.graphs();
  r.graph_failure = b.graph_failure();
  for (int64_t p : plan.prompts) {
    r.prefill.push_back(b.prefill(p));
    std::fprintf(stderr, "  %s pp%lld: %.1f tok/s\n", r.name.c_str(), (long long)p, r.prefill.back().tok_s);
  }
  for (int64_t c : plan.contexts) {
    context_result d = b.decode(c);
    d.kv_bytes = kv_bytes_at(h, c + plan.tg / 2);  // the mean context of the tg run
    d.bytes_per_token = r.weight_bytes_per_token + r.state_bytes_per_token + d.kv_bytes;
    if (dev.copy_gbps > 0 && (d.hit_rate < 0 || dev.zero_copy_gbps > 0)) {
      // host-resident experts: what the kernels read from host memory goes at the zero-copy bandwidth
      const double host = std::min(d.host_bytes_per_token, d.bytes_per_token);
      const double s_per_token =
          (d.bytes_per_token - host) / (dev.copy_gbps * 1e9) + (host > 0 ? host / (dev.zero_copy_gbps * 1e9) : 0.0);
      d.roofline_tok_s = 1.0 / s_per_token;
      d.roofline_pct = 100.0 * d.tok_s / d.roofline_tok_s;
    }
    std::fprintf(stderr, "  %s tg%lld @ %lld: %.1f tok/s\n", r.name.c_str(), (long long)plan.tg, (long long)c, d.tok_s);
    r.decode.push_back(d);
  }
  (void)out;
}

// Host memory available for pinned expert copies (Linux: MemAvailable), or UINT64_MAX when unknown.
uint64_t available_host_bytes() {
  std::ifstream f("/proc/meminfo");
  std::string key;
  uint64_t kb = 0;
  std::string unit;
  while (f >> key >> kb >> unit)
    if (key == "MemAvailable:") return kb * 1024;
  return UINT64_MAX;
}

// The budgets to run each model under: --vram's list, or one run without a budget.
std::vector<std::optional<uint64_t>> budgets_of(const options& opt) {
  std::vector<std::optional<uint64_t>> b(opt.vram_list.begin(), opt.vram_list.end());
  if (b.empty()) b.push_back(std::nullopt);
  return b;
}

// Plans model `r` (budget: --vram, or the device's free memory) and records the plan; false (with
// r.skipped) when it cannot run here. Without --vram or --expert-cache every expert is on the device.
template <class Plan>
bool plan_model(model_result& r, const options& opt, std::optional<uint64_t> budget, const Plan& plan_fn,
                gen::memory_plan& plan) {
  r.budget = budget.value_or(0);
  const std::optional<int64_t> slots = opt.expert_cache;
  // neither flag: no limit, so every expert is on the device (then checked against what is free)
  const uint64_t limit = budget ? *budget : slots ? gen::default_memory_budget() : UINT64_MAX;
  const status st = plan_fn(limit, slots, plan);
  if (!st.ok()) {
    r.skipped = st.message();
    return false;
  }
  r.slots = plan.slots, r.n_experts = plan.n_experts, r.host_bytes = plan.host_bytes();
  r.plan = plan.describe();
  if (on_gpu && plan.device_bytes() > gen::default_memory_budget()) {
    r.skipped = "the plan needs " + gen::format_bytes(plan.device_bytes()) + " of device memory, " +
                gen::format_bytes(gen::default_memory_budget()) + " free (less a margin)";
    return false;
  }
  if (!on_gpu && plan.device_bytes() + plan.host_bytes() > available_host_bytes()) {  // the sim's device is the host
    r.skipped = "the plan needs " + gen::format_bytes(plan.device_bytes() + plan.host_bytes()) +
                " of host memory on the sim, " + gen::format_bytes(available_host_bytes()) + " available";
    return false;
  }
  if (plan.host_bytes() > available_host_bytes()) {
    r.skipped = "the plan needs " + gen::format_bytes(plan.host_bytes()) + " of host memory for the experts, " +
                gen::format_bytes(available_host_bytes()) + " available";
    return false;
  }
  if (!budget && plan.host_experts() && limit != UINT64_MAX) r.budget = limit;
  return true;
}

}  // namespace

int run_bench(const options& opt, std::ostream& out) {
  bench_plan plan;
  plan.contexts = !opt.bench_contexts.empty() ? opt.bench_contexts
                  : on_gpu                    ? std::vector<int64_t>{0, 4096, 32768}
                                              : std::vector<int64_t>{0, 48};
  plan.prompts = !opt.bench_prompts.empty() ? opt.bench_prompts
                 : on_gpu                   ? std::vector<int64_t>{512, 4096}
                                            : std::vector<int64_t>{32};
  plan.tg = opt.n_predict > 0 ? opt.n_predict : on_gpu ? 128 : 4;
  plan.breakdown_steps = on_gpu ? 8 : 1;
  gen::decoder_config cfg = model_bench::config(
      plan, opt.n_batch, opt.expert_policy == "lru" ? gen::expert_policy::lru : gen::expert_policy::frequency);
  if (opt.expert_window) cfg.expert_staging_window = *opt.expert_window;
  if (opt.expert_rebalance) cfg.expert_rebalance_steps = *opt.expert_rebalance;

  const device_facts dev = query_device(!opt.vram_list.empty() || opt.expert_cache);
  const std::string json_path = opt.bench_json_path.empty() ? default_json_path(dev) : opt.bench_json_path;
  std::vector<model_result> results;
  bool all_finite = true;
  auto finish_model = [&](model_result& r) {
    if (!r.skipped.empty())
      std::fprintf(stderr, "%s%s: skipped (%s)%s%s\n", r.name.c_str(), budget_tag(r).c_str(), r.skipped.c_str(),
                   r.plan.empty() ? "" : "\n  plan: ", r.plan.c_str());
    for (const context_result& d : r.decode) all_finite = all_finite && d.finite;
    results.push_back(r);
    write_json(json_path, dev, plan, results);  // rewritten after every model: a time-out keeps what was done
  };

  if (!opt.model_path.empty()) {
    const io::gguf_file f = io::gguf_file::open(opt.model_path);
    std::string name;
    const io::bound_model m = bind_any_model(f, name);
    std::vector<std::pair<std::string, uint64_t>> tensors;
    for (const io::tensor_info& t : f.tensors()) tensors.emplace_back(t.name, t.n_bytes);
    for (const std::optional<uint64_t>& budget : budgets_of(opt)) {
      model_result r;
      r.name = name;
      r.source = opt.model_path;
      gen::memory_plan mp;
      if (plan_model(
              r, opt, budget,
              [&](uint64_t limit, std::optional<int64_t> slots, gen::memory_plan& p) {
                return gen::plan_memory(f, m.hparams, m.weights, cfg, limit, slots, p);
              },
              mp)) {
        gen::device_model dm;
        check(dm.load(f, m, {}, mp.slots), "loading " + opt.model_path);
        std::fprintf(stderr, "benchmarking %s%s (%s)\n  plan: %s\n", r.name.c_str(), budget_tag(r).c_str(),
                     opt.model_path.c_str(), r.plan.c_str());
        run_model(r, dm, tensors, plan, dev, cfg, out);
      }
      finish_model(r);
    }
  } else {
    std::vector<std::string> keys = opt.bench_models;
    if (keys.empty())
      keys = on_gpu ? std::vector<std::string>{"9B", "35B-A3B", "27B", "122B-A10B"}
                    : std::vector<std::string>{"tiny-dense", "tiny-moe"};
    const std::vector<gen::synth_entry> known = gen::synth_models();
    for (const std::string& key : keys) {
      const gen::synth_entry* it = gen::find_synth_model(known, key);
      if (!it) {
        model_result r;
        r.name = key;
        r.skipped = "no such synthetic model; known: " + gen::synth_model_keys();
        finish_model(r);
        continue;
      }
      gen::synth_entry cut;
      if (opt.bench_layers) {
        const status st = gen::first_layers(*it, uint32_t(*opt.bench_layers), cut);
        if (!st.ok()) {
          model_result r;
          r.name = it->name;
          r.skipped = "--bench-layers: " + st.message();
          finish_model(r);
          continue;
        }
        it = &cut;
      }
      for (const std::optional<uint64_t>& budget : budgets_of(opt)) {
        model_result r;
        r.name = it->name;
        r.source = "synthetic Q4_K_M (random weights built on the device)";
        gen::memory_plan mp;
        if (!plan_model(
                r, opt, budget,
                [&](uint64_t limit, std::optional<int64_t> slots, gen::memory_plan& p) {
                  return gen::plan_synth_memory(it->h, it->tied, cfg, limit, slots, p);
                },
                mp)) {
          finish_model(r);
          continue;
        }
        std::fprintf(stderr, "building %s%s: synthetic Q4_K_M\n  plan: %s\n", r.name.c_str(), budget_tag(r).c_str(),
                     r.plan.c_str());
        const auto t0 = clock_type::now();
        gen::synth_model sm;
        check(sm.build(it->h, it->tied, 0x9e3779b97f4a7c15ull, nullptr, mp.slots), "building " + r.name);
        std::fprintf(stderr, "  built in %.2f s\n", seconds_since(t0));
        std::vector<std::pair<std::string, uint64_t>> tensors;
        for (const gen::synth_tensor& t : sm.tensors()) tensors.emplace_back(t.name, t.n_bytes);
        run_model(r, sm.model(), tensors, plan, dev, cfg, out);
        finish_model(r);
      }
    }
  }
  print_table(out, dev, plan, results);
  const bool resident_same = check_resident_digests(out, results);
  out << "JSON: " << json_path << "\n";
  if (!all_finite) {
    std::cerr << "--bench: a model produced non-finite logits\n";
    return failure_exit_code;
  }
  if (!resident_same) {
    std::cerr << "--bench: host-resident experts changed the logits against the all-resident row\n";
    return failure_exit_code;
  }
  return 0;
}

}  // namespace q35::cli
