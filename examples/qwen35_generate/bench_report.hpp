// The results of qwen35_generate --bench (bench.cpp measures them) and their JSON and table forms.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

namespace q35::cli::bench {

struct device_facts {
  bool gpu = false;  // a CUDA device (else the sim: timings mean nothing for GPUs)
  std::string name = "sim";
  double copy_gbps = 0;       // device-to-device copy, read + write bytes / s (0: not measured)
  double zero_copy_gbps = 0;  // a kernel reading pinned host memory (0: not measured)
  uint64_t free_bytes = 0, total_bytes = 0;
};

struct bench_plan {
  std::vector<int64_t> contexts, prompts;
  int64_t tg = 128;
  int breakdown_steps = 8;
};

// Categories of one decode step (decoder::call, plus sampling).
enum category {
  cat_other,
  cat_norm,
  cat_attention,
  cat_gdn,
  cat_dense_ffn,
  cat_moe_ffn,
  cat_lm_head,
  cat_sampling,
  n_cat
};
constexpr const char* category_names[n_cat] = {"upload+embed", "norms",   "attention", "GDN",
                                               "dense FFN",    "MoE FFN", "LM head",   "sampling"};
constexpr const char* category_keys[n_cat] = {"upload_embedding", "norms",   "attention_layers", "gdn_layers",
                                              "dense_ffn",        "moe_ffn", "lm_head",          "sampling"};

struct step_breakdown {
  double ms[n_cat] = {};        // per eager step, by category
  double eager_forward_ms = 0;  // eager step without sampling (the sum of the categories but sampling)
  double graph_forward_ms = 0;  // the same step as the decoder runs it (graph replay on CUDA)
};

// A prefill row: tokens/s of a prompt of `tokens` tokens, and the FNV-1a of the bits of its last
// logits (the prompt depends only on its length, so rows of one model under any plan that computed
// the same thing have equal digests).
struct prefill_result {
  int64_t tokens = 0;
  double tok_s = 0;
  uint64_t logits_digest = 0;
};

struct context_result {
  int64_t context = 0;
  double tok_s = 0, ms_per_token = 0;
  double bytes_per_token = 0, kv_bytes = 0;
  double roofline_tok_s = 0, roofline_pct = 0;  // 0: no bandwidth measured
  int distinct_ids = 0;
  bool finite = true;
  // FNV-1a of the bits of the last logits after the tg run: the decode inputs depend only on the
  // context, so two rows of one model and plan that computed the same thing have equal digests
  uint64_t logits_digest = 0;
  step_breakdown b;
  // host-resident experts, over the tg run (hit_rate < 0: every expert on the device)
  double hit_rate = -1, host_bytes_per_token = 0, promotions_per_token = 0;
};

struct model_result {
  std::string name, source;
  std::string skipped;  // why the model was not run
  uint64_t weight_bytes = 0;
  // the memory plan: budget (0: none given), device slots per MoE layer (-1: every expert on the
  // device), bytes of routed experts in pinned host memory, and the plan in words
  uint64_t budget = 0, host_bytes = 0;
  int slots = -1, n_experts = 0;
  std::string plan;
  double weight_bytes_per_token = 0, state_bytes_per_token = 0;
  std::vector<prefill_result> prefill;
  std::vector<context_result> decode;
  bool graphs = false;
  std::string graph_failure;  // why decode steps ran without graphs (decoder::graph_failure), if one failed
};

// " @ 24.0 GiB": the budget a model ran under, or nothing.
std::string budget_tag(const model_result& r);
// v with `prec` decimals ("null" when not finite).
std::string num(double v, int prec = 3);
// The results so far as JSON at `path` (rewritten after every model).
void write_json(const std::string& path, const device_facts& dev, const bench_plan& plan,
                const std::vector<model_result>& results);
// The summary table: a row per model and context, the expert line, the step split.
void print_table(std::ostream& out, const device_facts& dev, const bench_plan& plan,
                 const std::vector<model_result>& results);
// Rows with host-resident experts against the all-resident row of the same model and prompt length
// (prefill: the staged grouped path) or context (decode) in the same run (a --vram budget that holds
// everything): one line each into `out`; false when a digest differs (the expert cache changed a logit).
bool check_resident_digests(std::ostream& out, const std::vector<model_result>& results);
// bench_<device name>.json
std::string default_json_path(const device_facts& dev);

}  // namespace q35::cli::bench
