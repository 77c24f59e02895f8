// The FFN half of a decoder layer, as the decoder calls it: shapes and weight views bound from a
// file, and the dense SwiGLU FFN  h += W_down (silu(W_gate x) * (W_up x))  in two launches (gate+up
// fused into one matmul with the swiglu epilogue, down with the residual epilogue). The MoE FFN
// (launch::moe_ffn) is in launch/moe.hpp and takes the same ffn_layer_args.
#pragma once

#include <cstdint>
#include <string>

#include "q35/core/status.hpp"
#include "q35/launch/matmul.hpp"
#include "q35/ops/router.hpp"
#include "q35/quant/weight_view.hpp"

namespace q35::launch {

struct dense_ffn_weights {
  quant::weight_view gate, up;  // [ff_dim][n_embd] (GGUF ffn_gate, ffn_up)
  quant::weight_view down;      // [n_embd][ff_dim] (ffn_down)
};

// Experts reached through per-expert matrix indexes (an expert cache: some experts in device slots,
// the rest in mapped host memory): expert e's gate/up matrices are matrix gate_up[e] of the
// gate_exps/up_exps views (data + gate_up[e] * stride), its down matrix down[e] of down_exps. The
// decode kernels read through it. The grouped (prefill) path's GEMMs read packed experts: it first
// copies the experts the call selected (only those: kernels/moe_stage.hpp) into `maybe_staging`, as
// many at a time as it holds (launch::moe_staging_bytes: one expert at least, all of them for one
// pass; the up matrix must lie within the gate's stride, as in a merged ffn_gate_up_exps tensor),
// which a call of more than moe_decode_max_tokens tokens needs. An expert whose index lies in the
// in-place range of its matrix (device memory: a slot) is read where it is by the grouped GEMMs
// instead of being copied (empty ranges: every selected expert is staged).
struct moe_expert_index {
  const int32_t* gate_up = nullptr;  // [n_experts], device
  const int32_t* down = nullptr;     // [n_experts], device
  int32_t n_virtual = 0;             // every index lies in [0, n_virtual)
  void* maybe_staging = nullptr;     // device scratch for the grouped path (256-byte aligned), or null
  size_t staging_bytes = 0;
  int32_t in_place_gu_begin = 0, in_place_gu_end = 0;  // gate_up indexes in device memory, within [0, n_virtual]
  int32_t in_place_dn_begin = 0, in_place_dn_end = 0;  // down indexes in device memory
  bool empty() const { return gate_up == nullptr; }
};

struct moe_weights {
  quant::weight_view router;                // [n_experts][n_embd] (ffn_gate_inp)
  quant::weight_view gate_exps, up_exps;    // [n_experts][expert_ff_dim][n_embd] (views of a merged gate_up allowed)
  quant::weight_view down_exps;             // [n_experts][n_embd][expert_ff_dim]
  quant::weight_view shexp_gate_inp;        // [1][n_embd] (ffn_gate_inp_shexp); empty when no shared expert
  quant::weight_view shexp_gate, shexp_up;  // [shared_ff_dim][n_embd]; empty when no shared expert
  quant::weight_view shexp_down;            // [n_embd][shared_ff_dim]; empty when no shared expert
  moe_expert_index maybe_index;             // the experts through an index (decode path only), or empty
};

struct ffn_shape {
  int n_embd = 0, ff_dim = 0;  // ff_dim: the dense FFN's width (unused by moe_ffn)
  int n_experts = 0, n_experts_used = 0, expert_ff_dim = 0, shared_ff_dim = 0;  // MoE (shared_ff_dim 0: none)
};

struct ffn_layer_args {
  ffn_shape shape;
  const float* x = nullptr;  // [n_tokens][n_embd], the layer input after post_attention_norm, 16-byte aligned
  float* h = nullptr;        // [n_tokens][n_embd], the residual stream: h += FFN(x)
  int64_t n_tokens = 0;
  void* workspace = nullptr;  // device scratch of *_workspace_bytes(shape, >= n_tokens) bytes, 256-byte aligned
  size_t workspace_bytes = 0;
  int* error_flag = nullptr;                // device int, set to 1 when a device-side expert id is out of range (MoE)
  uint64_t* maybe_expert_counts = nullptr;  // [n_experts] selection histogram the router adds to (MoE), or null
  // x already quantized by its producer (rmsnorm's act16 output: n_tokens rows of n_embd), read by
  // the GEMV's integer path instead of quantizing x again; or empty.
  quant::act16_view maybe_x16;
  // Each matmul computes a token's row as it would alone (launch::matmul_args::row_invariant).
  bool row_invariant = false;
  // A token's row as it would be alone in any call of 1..gemm_i8_invariant_tokens (64) tokens. dense_ffn:
  // both matmuls on the GEMM at every token count (launch::matmul_args::gemm_every_count). moe_ffn: the
  // router's decode policy and the decode kernels (rows per pair) up to 64 tokens, not 8, and an unfused
  // shared expert's matmuls on the GEMM at every count. Past 64 tokens each takes its usual path.
  bool gemm_every_count = false;
  // MoE: the router's options. With route.adaptive a token may use fewer than n_experts_used
  // experts (its other slots are empty and cost nothing); softmax scoring is required.
  ops::route_options route;
};

namespace detail {
inline status bad_ffn(const std::string& what, const std::string& m) {
  return error(status_code::invalid_argument, "launch::" + what + ": " + m);
}
// The weight view's shape is rows x cols (x n_mats), else an error naming the tensor.
inline status check_view(const std::string& fn, const char* name, const quant::weight_view& w, int64_t rows,
                         int64_t cols, int64_t n_mats = 1) {
  const auto str = [](int64_t v) { return std::to_string(v); };
  if (w.empty()) return bad_ffn(fn, std::string(name) + " is missing");
  if (w.rows != rows || w.cols != cols || w.n_mats != n_mats)
    return bad_ffn(fn, std::string(name) + " is " + str(w.n_mats) + " x " + str(w.rows) + " x " + str(w.cols) +
                           ", expected " + str(n_mats) + " x " + str(rows) + " x " + str(cols));
  return status::success();
}
}  // namespace detail

// Device scratch of dense_ffn for up to max_tokens tokens: the SwiGLU activations [max_tokens][ff_dim].
inline size_t dense_ffn_workspace_bytes(const ffn_shape& s, int64_t max_tokens) {
  return detail::align_256(size_t(max_tokens) * size_t(s.ff_dim) * sizeof(float)) +
         detail::align_256(matmul_workspace_bytes(s.ff_dim, max_tokens, s.n_embd)) +
         detail::align_256(matmul_workspace_bytes(s.n_embd, max_tokens, 2 * s.ff_dim));
}

// h += W_down (silu(W_gate x) * (W_up x)) for a.n_tokens tokens: two launches. Asynchronous.
template <int = 0>
inline status dense_ffn(const ffn_layer_args& a, const dense_ffn_weights& w, stream_t stream = nullptr) {
  const ffn_shape& s = a.shape;
  const std::string fn = "dense_ffn";
  if (s.n_embd < 1 || s.ff_dim < 1) return detail::bad_ffn(fn, "n_embd and ff_dim must be positive");
  Q35_TRY(detail::check_view(fn, "gate", w.gate, s.ff_dim, s.n_embd));
  Q35_TRY(detail::check_view(fn, "up", w.up, s.ff_dim, s.n_embd));
  Q35_TRY(detail::check_view(fn, "down", w.down, s.n_embd, s.ff_dim));
  if (a.n_tokens < 0) return detail::bad_ffn(fn, "n_tokens = " + std::to_string(a.n_tokens) + " is negative");
  if (a.n_tokens == 0) return status::success();
  if (!a.x || !a.h) return detail::bad_ffn(fn, "x or h is null");
  const size_t need = dense_ffn_workspace_bytes(s, a.n_tokens);
  if (!a.workspace || a.workspace_bytes < need)
    return detail::bad_ffn(
        fn, "workspace of " + std::to_string(a.workspace_bytes) + " bytes, " + std::to_string(need) + " needed");
  auto* act = static_cast<float*>(a.workspace);  // [n_tokens][ff_dim]
  auto* scratch = static_cast<uint8_t*>(a.workspace) + detail::align_256(size_t(a.n_tokens) * s.ff_dim * 4);
  const size_t scratch_bytes = need - detail::align_256(size_t(a.n_tokens) * s.ff_dim * 4);
  // act = silu(W_gate x) * (W_up x)
  matmul_args g;
  g.w = w.gate, g.maybe_w_up = w.up, g.x = a.x, g.y = act, g.n_tokens = a.n_tokens;
  g.epilogue = ops::epilogue::swiglu, g.maybe_workspace = scratch, g.workspace_bytes = scratch_bytes;
  g.maybe_x16 = a.maybe_x16, g.row_invariant = a.row_invariant, g.gemm_every_count = a.gemm_every_count;
  Q35_TRY(matmul(g, stream));
  // h += W_down act
  matmul_args d;
  d.w = w.down, d.x = act, d.y = a.h, d.n_tokens = a.n_tokens, d.epilogue = ops::epilogue::residual;
  d.maybe_workspace = scratch, d.workspace_bytes = scratch_bytes, d.row_invariant = a.row_invariant;
  d.gemm_every_count = a.gemm_every_count;
  return matmul(d, stream);
}

}  // namespace q35::launch
