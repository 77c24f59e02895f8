// Command-line options of qwen35_server and their parsing (plain argv walking; flags after
// llama-server's: -m, --host, --port, -np, -c, -b, --api-key, -ctk/-ctv, --timeout).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "q35/kv/kv_pool.hpp"

namespace q35::server {

// Requests running (-np) plus waiting (--queue) at most: each holds a connection thread of the HTTP
// pool, which has that many plus spares for the requests answered at once.
inline constexpr size_t max_held_requests = 4096;
inline constexpr size_t spare_http_threads = 8;

struct options {
  std::string model_path;
  std::string host = "127.0.0.1";
  int port = 8080;  // 0: any free port (printed)
  int n_parallel = 4;
  std::optional<int64_t> n_ctx;  // default: min(4096, the model's)
  int64_t n_batch = 512;
  std::string api_key;
  std::string cache_type_k = "f16", cache_type_v = "f16";
  int timeout_s = 600;
  size_t max_queue = 64;
  bool batch_invariant = true;
  bool batch_invariant_gemm = false;                        // decode groups of up to 64 rows on the GEMM (decoder.hpp)
  int prefix_cache = 16;                                    // prefix checkpoints kept (0: no prefix reuse)
  std::optional<uint64_t> vram;                             // device memory budget (bytes)
  std::optional<int64_t> expert_cache;                      // device slots per MoE layer
  bool lru_experts = false;                                 // --expert-policy lru
  std::optional<int> expert_window;                         // --expert-window N: experts per staging window
  std::optional<int> expert_rebalance;                      // --expert-rebalance N: steps between rebalances
  std::optional<std::string> expert_plan;                   // --expert-plan FILE: slots placed by a traced workload
  std::optional<std::string> expert_stats, expert_heatmap;  // written when the server stops
  std::string bench_model;                                  // a synthetic model's key (gen::synth_models), or empty
};

// The --help text.
extern const char* const usage_text;

// The options of argv; a bad flag or value throws std::invalid_argument with one line naming both.
// -h / --help prints usage_text and exits.
options parse_args(int argc, char** argv);

// The KV element type a -ctk/-ctv name (already checked by parse_args) stands for.
kv::kv_type to_kv_type(const std::string& t);

}  // namespace q35::server
