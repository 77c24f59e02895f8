// Command-line options of qwen35_generate and their parsing (plain argv walking, no dependency).
// Flags follow llama-cli's conventions (-m, -p, -f, -n, -c, --temp, --top-k, ...).
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace q35::cli {

// Bad command line: main prints one line naming the problem and exits with failure_exit_code.
struct usage_error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

inline constexpr int failure_exit_code = 1;

enum class command { none, help, info, tokenize, detokenize, dump_tensor, generate, bench };

enum class kv_cache_type { f32, f16, bf16 };

struct options {
  command cmd = command::none;
  std::string model_path;        // -m
  std::string text;              // --tokenize TEXT / --detokenize "ID ID ..."
  std::optional<int64_t> n_ctx;  // -c: context size (default: 4096, at most the model's)
  std::string tensor_name;       // --dump-tensor NAME
  std::string out_path;          // --out PATH
  // generation
  std::optional<std::string> prompt;  // -p TEXT, or the contents of -f FILE
  int64_t n_predict = -1;             // -n: tokens to generate; -1 = until end of generation or a full context
  float temperature = 0.8f;           // --temp; <= 0: greedy
  int top_k = 40;                     // --top-k; 0 = off
  float top_p = 0.95f;                // --top-p; 1 = off
  float min_p = 0.05f;                // --min-p; 0 = off
  float repeat_penalty = 1.0f;        // --repeat-penalty; 1 = off
  float presence_penalty = 0.0f;      // --presence-penalty; 0 = off
  float frequency_penalty = 0.0f;     // --frequency-penalty; 0 = off
  int repeat_last_n = 64;             // --repeat-last-n
  bool ignore_eos = false;            // --ignore-eos: end-of-generation tokens are never drawn
  std::vector<std::pair<int32_t, float>> logit_bias;  // --logit-bias ID(+|-)BIAS, repeatable; in order
  std::optional<uint64_t> seed;                       // --seed; default: from the clock
  kv_cache_type cache_type_k = kv_cache_type::f16;    // -ctk
  kv_cache_type cache_type_v = kv_cache_type::f16;    // -ctv
  std::optional<std::string> system_prompt;           // -sys
  bool conversation = false;                          // -cnv
  bool no_think = false;                              // --no-think
  std::string dump_logits_path;                       // --dump-logits FILE
  bool print_token_ids = false;                       // --print-token-ids
  std::string prompt_cache_path;                      // --prompt-cache FILE
  int64_t n_batch = 512;                              // -b: prompt tokens per batch
  bool perplexity = false;                            // --perplexity: of the -f/-p text (perplexity.hpp)
  std::optional<int64_t> ppl_chunks;                  // --chunks N: at most N chunks of it
  // expert-selection traces of the session (MoE models): written at its end
  std::optional<std::string> expert_stats_path;    // --expert-stats FILE.json
  std::optional<std::string> expert_heatmap_path;  // --expert-heatmap FILE.svg
  // MoE layers: routed experts in pinned host memory behind this many device slots per layer
  std::optional<int64_t> expert_cache;          // --expert-cache N
  std::optional<uint64_t> vram;                 // --vram SIZE (bytes): the first of vram_list
  std::vector<uint64_t> vram_list;              // --vram SIZE[,SIZE...] (a list only with --bench)
  std::optional<std::string> expert_policy;     // --expert-policy frequency|lru
  std::optional<std::string> expert_plan_path;  // --expert-plan FILE: slots placed by a traced workload
  std::optional<int> expert_window;             // --expert-window N: experts per staging window (prompts)
  std::optional<int> expert_rebalance;          // --expert-rebalance N: decode steps between rebalances (0: never)
  // adaptive top-k of the MoE layers (opt-in): experts per token by routing entropy
  std::optional<std::array<int, 3>> moe_adaptive_k;          // --moe-adaptive-k K1,K2,K3
  std::optional<std::array<float, 2>> moe_adaptive_entropy;  // --moe-adaptive-entropy H1,H2 (nats)
  // --bench (-m optional: without it, synthetic full-size models)
  std::vector<std::string> bench_models;  // --bench-model NAME, repeatable
  std::string bench_json_path;            // --bench-json FILE (default bench_<gpu>.json)
  std::vector<int64_t> bench_contexts;    // --bench-ctx N,N,...: decode after prompts of these lengths
  std::vector<int64_t> bench_prompts;     // --bench-pp N,N,...: prefill lengths
  std::optional<int64_t> bench_layers;    // --bench-layers N: synthetic models cut to their first N layers
};

// Parses argv[1..argc); throws usage_error naming the offending argument.
options parse_args(const std::vector<std::string>& args);

// The usage text for `program`.
std::string usage(const std::string& program);

// "12 7 509" -> ids; throws usage_error on anything that is not a non-negative decimal integer.
std::vector<int32_t> parse_ids(const std::string& text);

}  // namespace q35::cli
