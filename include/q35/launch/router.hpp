// launch::router: the host API of the fused router (hidden state -> expert ids and weights, plus
// the shared-expert gate) for one MoE layer and any number of tokens, in one launch.
//
//   launch::router_workspace ws;  Q35_TRY(ws.allocate(max_tokens, Traits::n_experts));   // once
//   launch::router_args<float> a{...};  a.workspace = ws.view();
//   Q35_TRY(launch::router<Traits>(a, stream));
#pragma once

#include <cstdint>
#include <string>
#include <type_traits>

#include "q35/arch/memory.hpp"
#include "q35/core/dispatch.hpp"
#include "q35/core/status.hpp"
#include "q35/kernels/router.hpp"
#include "q35/launch/launch.hpp"
#include "q35/quant/format_list.hpp"
#include "q35/quant/weight_view.hpp"

namespace q35::launch {

// Scratch of the router: the logits of every token and one arrival counter per token tile. The
// counters must be 0 before the first launch (allocate() does it); every launch leaves them 0.
struct router_workspace_view {
  float* logits = nullptr;            // [max_tokens, n_experts + 1]
  uint32_t* tile_counters = nullptr;  // [max_tokens] (one per tile is used)
  int64_t max_tokens = 0;
  int n_experts = 0;
};

class router_workspace {
 public:
  status allocate(int64_t max_tokens, int n_experts) {
    if (max_tokens < 0 || n_experts < 1) return error(status_code::invalid_argument, "router_workspace: bad size");
    Q35_TRY(logits_.allocate(size_t(max_tokens) * size_t(n_experts + 1)));
    Q35_TRY(counters_.allocate(size_t(max_tokens)));
    Q35_TRY(fill_bytes(counters_.data(), 0, counters_.bytes()));
    max_tokens_ = max_tokens;
    n_expert_ = n_experts;
    return synchronize();
  }
  router_workspace_view view() { return {logits_.data(), counters_.data(), max_tokens_, n_expert_}; }

 private:
  device_buffer<float> logits_;
  device_buffer<uint32_t> counters_;
  int64_t max_tokens_ = 0;
  int n_expert_ = 0;
};

template <class WeightT = float>
struct router_args {
  int64_t n_tokens = 0;
  int n_embd = 0;                           // hidden size (the GGUF's embedding_length)
  int n_experts = 0;                        // experts per layer (expert_count); must equal Traits::n_experts
  int n_experts_used = 0;                   // experts per token (expert_used_count); must equal Traits::n_experts_used
  const float* x = nullptr;                 // [n_tokens, n_embd], row-major, 16-byte aligned
  const WeightT* w_router = nullptr;        // [n_experts, n_embd], row-major (GGUF ne = [n_embd, n_experts])
  const WeightT* maybe_w_shexp = nullptr;   // [n_embd], or null when the layer has no shared expert
  int32_t* ids = nullptr;                   // [n_tokens, n_experts_used]
  float* weights = nullptr;                 // [n_tokens, n_experts_used]
  int32_t* maybe_k_used = nullptr;          // [n_tokens]; required when route.adaptive
  float* maybe_shexp_gate = nullptr;        // [n_tokens]; required when maybe_w_shexp is set
  uint64_t* maybe_expert_counts = nullptr;  // [n_experts] histogram this launch adds to (expert_load::counts)
  router_workspace_view workspace;
  ops::route_options route;
};

namespace detail {
inline status bad_router_arg(const std::string& what) {
  return error(status_code::invalid_argument, "launch::router: " + what);
}
inline bool aligned_16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// Checks the adaptive top-k options against k = n_experts_used (nothing to check when off).
inline status validate_route(const ops::route_options& route, int n_experts_used) {
  if (!route.adaptive) return status::success();
  if (route.score != ops::router_score::softmax)
    return bad_router_arg("adaptive top-k needs softmax scoring (its entropy is over the softmax)");
  for (int kv : route.adaptive_k.k_values)
    if (kv < 1 || kv > n_experts_used)
      return bad_router_arg("adaptive k value " + std::to_string(kv) +
                            " is outside 1..n_experts_used = " + std::to_string(n_experts_used));
  const float* t = route.adaptive_k.entropy_below;
  if (!(t[0] <= t[1])) return bad_router_arg("adaptive entropy thresholds must be ascending");
  return status::success();
}

// Checks the expert count and k against the kernel's limits.
template <class WeightT>
status validate_router_counts(const router_args<WeightT>& a) {
  const auto str = [](auto v) { return std::to_string(v); };
  if (a.n_experts < 1 || a.n_experts > ops::router_max_experts)
    return bad_router_arg("n_experts = " + str(a.n_experts) + " is outside 1.." + str(ops::router_max_experts));
  if (a.n_experts_used < 1 || a.n_experts_used > ops::router_max_k)
    return bad_router_arg("n_experts_used (k) = " + str(a.n_experts_used) + " is outside 1.." + str(ops::router_max_k));
  if (a.n_experts_used > a.n_experts)
    return bad_router_arg("n_experts_used (k) = " + str(a.n_experts_used) + " exceeds n_experts = " + str(a.n_experts));
  return status::success();
}

// Checks the rest of args (after the counts and, for router<Traits>, the traits).
template <class WeightT>
status validate_router_rest(const router_args<WeightT>& a) {
  const auto str = [](auto v) { return std::to_string(v); };
  // the GEMV engine reads a row in 16-element units (and whole blocks)
  using format = kernels::router_format_t<WeightT>;
  if (a.n_embd < 1 || a.n_embd % quant::unit_elems != 0)
    return bad_router_arg("n_embd = " + str(a.n_embd) + " is not a positive multiple of the GEMV unit of " +
                          str(quant::unit_elems) + " elements");
  if (a.n_embd % format::block_elems != 0)
    return bad_router_arg("n_embd = " + str(a.n_embd) + " is not a multiple of the weight format's block of " +
                          str(format::block_elems));
  if (a.n_tokens < 0) return bad_router_arg("n_tokens = " + str(a.n_tokens) + " is negative");
  if (a.n_tokens == 0) return status::success();
  if (!a.x) return bad_router_arg("x is null");
  if (!a.w_router) return bad_router_arg("w_router is null");
  if (!a.ids) return bad_router_arg("ids is null");
  if (!a.weights) return bad_router_arg("weights is null");
  if (a.maybe_w_shexp && !a.maybe_shexp_gate)
    return bad_router_arg("maybe_shexp_gate is null but maybe_w_shexp is set");
  if (!detail::aligned_16(a.x) || !detail::aligned_16(a.w_router) || !detail::aligned_16(a.maybe_w_shexp))
    return bad_router_arg("x, w_router and maybe_w_shexp must be 16-byte aligned");
  if (!a.workspace.logits || !a.workspace.tile_counters) return bad_router_arg("workspace is not allocated");
  if (a.workspace.max_tokens < a.n_tokens || a.workspace.n_experts < a.n_experts)
    return bad_router_arg("workspace holds " + str(a.workspace.max_tokens) + " tokens x " + str(a.workspace.n_experts) +
                          " experts, the call needs " + str(a.n_tokens) + " x " + str(a.n_experts));
  if (a.route.adaptive && !a.maybe_k_used) return bad_router_arg("maybe_k_used is null but route.adaptive is set");
  return validate_route(a.route, a.n_experts_used);
}
}  // namespace detail

// Checks args against the traits and the kernel's limits; the message names the bad value.
template <kernels::router_traits Traits, class WeightT>
status validate(const router_args<WeightT>& a) {
  const auto str = [](auto v) { return std::to_string(v); };
  Q35_TRY(detail::validate_router_counts(a));
  if (a.n_experts != Traits::n_experts || a.n_experts_used != Traits::n_experts_used)
    return detail::bad_router_arg("n_experts = " + str(a.n_experts) + ", n_experts_used = " + str(a.n_experts_used) +
                                  " do not match the traits (" + str(Traits::n_experts) + ", " +
                                  str(Traits::n_experts_used) + ")");
  if constexpr (requires { Traits::n_embd; }) {
    if (a.n_embd != Traits::n_embd)
      return detail::bad_router_arg("n_embd = " + str(a.n_embd) + " does not match the traits (" + str(Traits::n_embd) +
                                    ")");
  }
  return detail::validate_router_rest(a);
}

namespace detail {
template <class Traits, class WeightT, class Policy>
status run_router(const router_args<WeightT>& a, stream_t stream) {
  using kernel = kernels::router_kernel<Traits, WeightT, Policy>;
  const typename kernel::params p{a.x,
                                  a.w_router,
                                  a.maybe_w_shexp,
                                  a.ids,
                                  a.weights,
                                  a.maybe_k_used,
                                  a.maybe_shexp_gate,
                                  a.maybe_expert_counts,
                                  a.workspace.logits,
                                  a.workspace.tile_counters,
                                  a.n_tokens,
                                  a.n_embd,
                                  a.n_experts,
                                  a.n_experts_used,
                                  a.route};
  return launch<kernel>(p, stream);
}
}  // namespace detail

// Routes a.n_tokens tokens in one launch (none for 0 tokens). Asynchronous on cuda. The default
// policy is router_policy_decode up to router_decode_max_tokens tokens, router_policy_batch above.
template <kernels::router_traits Traits, class WeightT, class Policy = kernels::router_policy_auto>
status router(const router_args<WeightT>& a, stream_t stream = nullptr) {
  Q35_TRY((validate<Traits, WeightT>(a)));
  if (a.n_tokens == 0) return status::success();
  if constexpr (std::is_same_v<Policy, kernels::router_policy_auto>) {
    if (a.n_tokens <= kernels::router_decode_max_tokens)
      return detail::run_router<Traits, WeightT, kernels::router_policy_decode>(a, stream);
    return detail::run_router<Traits, WeightT, kernels::router_policy_batch>(a, stream);
  } else {
    return detail::run_router<Traits, WeightT, Policy>(a, stream);
  }
}

// ---- Run-time shapes and weight formats (what a decoder bound from a file calls) ----------------

// router_args with the weights as run-time-typed views: n_experts (<= 512) and n_experts_used
// (<= 16) are plain values, and the weights may be in any format the router reads.
struct router_view_args {
  int64_t n_tokens = 0;
  int n_embd = 0, n_experts = 0, n_experts_used = 0;
  const float* x = nullptr;           // [n_tokens, n_embd], row-major, 16-byte aligned
  quant::weight_view w_router;        // [n_experts][n_embd] (GGUF ffn_gate_inp): f32, f16, bf16, q8_0, q4_0, q4_K..q6_K
  quant::weight_view maybe_w_shexp;   // [1][n_embd] (ffn_gate_inp_shexp) in w_router's type, or empty
  int32_t* ids = nullptr;             // [n_tokens, n_experts_used]
  float* weights = nullptr;           // [n_tokens, n_experts_used]
  int32_t* maybe_k_used = nullptr;    // [n_tokens]; required when route.adaptive
  float* maybe_shexp_gate = nullptr;  // [n_tokens]; required when maybe_w_shexp is set
  uint64_t* maybe_expert_counts = nullptr;  // [n_experts], or null
  router_workspace_view workspace;
  ops::route_options route;
};

namespace detail {
// The element type the router kernel reads for a format: the scalar for f32/f16/bf16, else the block.
template <class Format>
using router_weight_t = std::conditional_t<
    Format::id == quant::type_id::f32, float,
    std::conditional_t<Format::id == quant::type_id::f16, half,
                       std::conditional_t<Format::id == quant::type_id::bf16, bf16, typename Format::block>>>;

// Compile-time bound of a run-time expert count: 32 * ItemsPerLane experts, k up to 16.
template <int ItemsPerLane>
struct router_bound {
  static constexpr int n_experts = warp_size * ItemsPerLane;
  static constexpr int n_experts_used = ops::router_max_k;
};
}  // namespace detail

// Routes a.n_tokens tokens in one launch, like router<Traits>, for shapes and formats known only at
// run time: one instance per (format, bucket of 32, 64, 128, 256 or 512 experts, policy).
template <class Policy = kernels::router_policy_auto>
status router(const router_view_args& a, stream_t stream = nullptr) {
  const auto str = [](auto v) { return std::to_string(v); };
  if (a.w_router.rows != a.n_experts || a.w_router.cols != a.n_embd || a.w_router.n_mats != 1)
    return detail::bad_router_arg("w_router is " + str(a.w_router.rows) + " x " + str(a.w_router.cols) + " x " +
                                  str(a.w_router.n_mats) + ", expected n_experts x n_embd = " + str(a.n_experts) +
                                  " x " + str(a.n_embd));
  if (!a.maybe_w_shexp.empty() &&
      (a.maybe_w_shexp.type != a.w_router.type || a.maybe_w_shexp.cols != a.n_embd || a.maybe_w_shexp.rows != 1))
    return detail::bad_router_arg("maybe_w_shexp must be one row of n_embd = " + str(a.n_embd) +
                                  " in w_router's ggml type " + str(a.w_router.type));
  return quant::with_format(a.w_router.type, [&](auto tag) -> status {
    using weight_t = detail::router_weight_t<typename decltype(tag)::type>;
    router_args<weight_t> r;
    r.n_tokens = a.n_tokens, r.n_embd = a.n_embd, r.n_experts = a.n_experts, r.n_experts_used = a.n_experts_used;
    r.x = a.x;
    r.w_router = static_cast<const weight_t*>(a.w_router.data);
    r.maybe_w_shexp = static_cast<const weight_t*>(a.maybe_w_shexp.data);
    r.ids = a.ids, r.weights = a.weights, r.maybe_k_used = a.maybe_k_used, r.maybe_shexp_gate = a.maybe_shexp_gate;
    r.maybe_expert_counts = a.maybe_expert_counts, r.workspace = a.workspace, r.route = a.route;
    Q35_TRY(detail::validate_router_counts(r));
    Q35_TRY(detail::validate_router_rest(r));
    if (r.n_tokens == 0) return status::success();
    const int items = ceil_div(a.n_experts, warp_size);
    const int bucket = items <= 1 ? 1 : items <= 2 ? 2 : items <= 4 ? 4 : items <= 8 ? 8 : 16;
    return dispatch<1, 2, 4, 8, 16>(bucket, [&](auto b) -> status {
      using bound = detail::router_bound<decltype(b)::value>;
      if constexpr (std::is_same_v<Policy, kernels::router_policy_auto>) {
        if (r.n_tokens <= kernels::router_decode_max_tokens)
          return detail::run_router<bound, weight_t, kernels::router_policy_decode>(r, stream);
        return detail::run_router<bound, weight_t, kernels::router_policy_batch>(r, stream);
      } else {
        return detail::run_router<bound, weight_t, Policy>(r, stream);
      }
    });
  });
}

}  // namespace q35::launch
