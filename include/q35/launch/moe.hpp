// launch::moe_ffn: the MoE FFN of one qwen35moe layer,
//   h += sum_{j < k} w_j * down_{e_j}(silu(gate_{e_j} x) * (up_{e_j} x))
//        + sigmoid(w_shexp . x) * down_sh(silu(gate_sh x) * (up_sh x))          (spec §2.3)
// for any token count, with run-time expert counts and weight formats. Decode path: the router
// (ids and weights stay on the device), one launch for the gate+up SwiGLU of every selected expert
// and of the shared expert, one for the weighted down projections added to the residual: 3 kernel
// launches (plus a memset of the router's tile counters) when the shared expert has the routed
// experts' formats, 5 when not (its gate+up and down then run through launch::matmul). Its rows are
// computed per (token, expert) pair, so with gemm_every_count (the router's decode policy, and the
// shared expert's matmuls, if any, on the GEMM at every count) it serves up to 64 tokens with rows as
// each would be alone.
// Prefill path (more than moe_decode_max_tokens tokens, or 64 with gemm_every_count): router,
// grouping by expert (launch::moe_group: CUB radix sort on CUDA), a grouped tensor-core GEMM per
// projection (the dense GEMMs' tiles over each expert's sorted pairs, kernels/gemm_rows.hpp: int8 for
// the GGUF integer formats on the GEMV's 16-bit activations, split fp16/bf16 for F16/BF16/F32), the
// shared expert through launch::matmul, and a combination back to token order in a fixed summation
// order.
//
// The parts: launch/moe_plan.hpp (where the paths split, the workspace, the staging area, the
// checks), launch/moe_decode.hpp, launch/moe_grouped.hpp and launch/moe_group.hpp (the grouping).
#pragma once

#include <cstdint>

#include "q35/arch/memory.hpp"
#include "q35/core/status.hpp"
#include "q35/launch/ffn.hpp"
#include "q35/launch/launch.hpp"
#include "q35/launch/moe_decode.hpp"
#include "q35/launch/moe_group.hpp"
#include "q35/launch/moe_grouped.hpp"
#include "q35/launch/moe_plan.hpp"
#include "q35/launch/router.hpp"

namespace q35::launch {

namespace detail {
// Step 1 (both paths): ids, weights = top-k of softmax(W_r x), renormalised; gate = sigmoid(w_shexp . x).
template <int = 0>
inline status moe_route(const ffn_layer_args& a, const moe_weights& w, stream_t stream) {
  const ffn_shape& s = a.shape;
  const moe_buffers b = moe_buffers_of(a);
  const bool shared = s.shared_ff_dim > 0;
  Q35_TRY(fill_bytes(b.ws + b.l.counters, 0, size_t(a.n_tokens) * sizeof(uint32_t), stream));
  router_view_args r;
  r.n_tokens = a.n_tokens, r.n_embd = s.n_embd, r.n_experts = s.n_experts, r.n_experts_used = s.n_experts_used;
  r.x = a.x, r.w_router = w.router, r.maybe_w_shexp = shared ? w.shexp_gate_inp : quant::weight_view{};
  r.ids = b.ids, r.weights = b.weights, r.maybe_shexp_gate = shared ? b.gate : nullptr;
  r.maybe_expert_counts = a.maybe_expert_counts;
  r.route = a.route;
  r.maybe_k_used = a.route.adaptive ? reinterpret_cast<int32_t*>(b.ws + b.l.k_used) : nullptr;
  r.workspace = {reinterpret_cast<float*>(b.ws + b.l.logits), reinterpret_cast<uint32_t*>(b.ws + b.l.counters),
                 a.n_tokens, s.n_experts};
  // with gemm_every_count the decode policy at every count (1..64): a token's logits, so its experts and
  // weights, as they would be alone (the batch policy past 8 tokens sums them in another order)
  return a.gemm_every_count ? router<kernels::router_policy_decode>(r, stream) : router(r, stream);
}
}  // namespace detail

// h += MoE(x) for a.n_tokens tokens. Asynchronous on `stream`; the workspace needs no preparation
// (the router's counters are cleared here) and may be shared with other ops between calls.
template <int = 0>
inline status moe_ffn(const ffn_layer_args& a, const moe_weights& w, stream_t stream = nullptr) {
  Q35_TRY(validate_moe(a, w));
  if (a.n_tokens == 0) return status::success();
  Q35_TRY(detail::moe_route(a, w, stream));
  if (a.n_tokens > moe_decode_limit(a.gemm_every_count))
    return detail::moe_grouped(a, w, detail::moe_buffers_of(a).l, stream);
  if (!w.maybe_index.empty()) Q35_TRY(detail::moe_apply_index(a, w, stream));
  Q35_TRY(detail::moe_decode_gate_up(a, w, stream));
  return detail::moe_decode_down(a, w, stream);
}

}  // namespace q35::launch
