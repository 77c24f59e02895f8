// launch::moe_ffn's plan for a call: where the decode path ends and the grouped path begins, the
// workspace layout of each, the staging area of an indexed layer, and the checks of shapes, views and
// workspace (validate_moe).
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <tuple>

#include "q35/core/status.hpp"
#include "q35/launch/ffn.hpp"
#include "q35/launch/matmul.hpp"
#include "q35/launch/moe_group.hpp"
#include "q35/launch/router.hpp"

namespace q35::launch {

// Token counts up to which moe_ffn runs the decode kernels; above, the grouped (prefill) path.
inline constexpr int64_t moe_decode_max_tokens = 8;
// ... with ffn_layer_args::gemm_every_count: the decode kernels compute every (token, expert) pair and
// every token's down sum on its own, so their rows are the same at any count; the flag keeps them up to
// the count to which the unfused shared expert's matmuls (on the GEMM at every count) are invariant.
inline constexpr int64_t moe_decode_max_tokens_every_count = gemm_i8_invariant_tokens;
inline int64_t moe_decode_limit(bool gemm_every_count) {
  return gemm_every_count ? moe_decode_max_tokens_every_count : moe_decode_max_tokens;
}

namespace detail {
// Byte offsets of moe_ffn's scratch regions for n tokens (each 256-byte aligned) and its
// gemm_every_count: the grouped path's regions (sorted pairs .. y) only above moe_decode_limit, the
// decode path's below.
struct moe_layout {
  size_t counters, logits, ids, weights, k_used, gate, act, sh_act, sh_y;
  size_t x16, act16, sh_act16;  // decode only: x, act and sh_act quantized for the GEMV engine's integer path
  size_t index_gu, index_dn;    // decode only: the pairs' matrix indexes (moe_weights::maybe_index)
  size_t sorted_pairs, offsets, tile_starts, group_temp, y;
  size_t expert_at;  // grouped only: where a staged window's experts are (kernels::gemm_groups::maybe_expert_at)
  size_t x8, act8;   // grouped only: x and act split for the int8 tensor-core GEMM (quant/act8x2.hpp)
  size_t mm;  // the shared expert's matmul scratch (its activations for the tensor-core GEMM): grouped, or every_count
  size_t total;
};
template <int = 0>
inline moe_layout moe_plan(const ffn_shape& s, int64_t n, bool gemm_every_count = false) {
  moe_layout l{};
  size_t at = 0;
  auto take = [&](size_t bytes) {
    const size_t here = at;
    at += align_256(bytes);
    return here;
  };
  const size_t t = size_t(n), k = size_t(s.n_experts_used);
  l.counters = take(t * sizeof(uint32_t));                        // router tile counters [n]
  l.logits = take(t * size_t(s.n_experts + 1) * sizeof(float));   // router logits [n][E + 1]
  l.ids = take(t * k * sizeof(int32_t));                          // [n][k]
  l.weights = take(t * k * sizeof(float));                        // [n][k]
  l.k_used = take(t * sizeof(int32_t));                           // [n] experts used (adaptive top-k)
  l.gate = take(t * sizeof(float));                               // shared-expert gate [n]
  l.act = take(t * k * size_t(s.expert_ff_dim) * sizeof(float));  // [n * k][expert_ff]
  l.sh_act = take(t * size_t(s.shared_ff_dim) * sizeof(float));   // [n][shared_ff]
  l.sh_y = take(t * size_t(s.n_embd) * sizeof(float));            // [n][n_embd] (shared expert in another format)
  const bool decode = n <= moe_decode_limit(gemm_every_count);
  const auto a16 = [&](int64_t cols, int64_t rows) {
    return decode && cols % quant::act16_group_elems == 0 ? quant::act16_bytes(cols, rows) : 0;
  };
  l.x16 = take(a16(s.n_embd, n));                                        // [n][n_embd]
  l.act16 = take(a16(s.expert_ff_dim, n * int64_t(k)));                  // [n * k][expert_ff]
  l.sh_act16 = take(s.shared_ff_dim > 0 ? a16(s.shared_ff_dim, n) : 0);  // [n][shared_ff]
  l.index_gu = take(decode ? t * k * sizeof(int32_t) : 0);               // [n][k]
  l.index_dn = take(decode ? t * k * sizeof(int32_t) : 0);               // [n][k]
  const size_t e1 = size_t(s.n_experts + 1), pairs = decode ? 0 : t * k;
  l.sorted_pairs = take(pairs * sizeof(int32_t));          // [n * k]
  l.offsets = take(pairs ? e1 * sizeof(int32_t) : 0);      // [E + 1]
  l.tile_starts = take(pairs ? e1 * sizeof(int32_t) : 0);  // [E + 1]
  l.group_temp = take(pairs ? moe_group_temp_bytes(int32_t(pairs), s.n_experts) : 0);
  l.y = take(pairs * size_t(s.n_embd) * sizeof(float));                   // [n * k][n_embd] expert outputs, pair order
  l.expert_at = take(pairs ? size_t(s.n_experts) * sizeof(int64_t) : 0);  // [E]
  const auto a8 = [&](int64_t cols, int64_t rows) {
    return pairs && cols % quant::act16_group_elems == 0 ? quant::act8x2_bytes(cols, rows) : 0;
  };
  l.x8 = take(a8(s.n_embd, n));                        // [n][n_embd]
  l.act8 = take(a8(s.expert_ff_dim, n * int64_t(k)));  // [n * k][expert_ff], sorted order
  // (a shared expert in the routed experts' formats is computed by the decode kernels, which need none)
  const bool sh_matmul = s.shared_ff_dim > 0 && (pairs || gemm_every_count);
  l.mm = take(sh_matmul ? std::max(matmul_workspace_bytes(s.n_embd, n, 2 * s.shared_ff_dim),
                                   matmul_workspace_bytes(s.shared_ff_dim, n, s.n_embd))
                        : 0);
  l.total = at;
  return l;
}

inline status check_cols(const std::string& fn, const char* name, const quant::weight_view& w) {
  int block = 0;
  Q35_TRY(quant::with_format(w.type, [&](auto tag) { block = decltype(tag)::type::block_elems; }));
  if (w.cols % block != 0 || w.cols % quant::unit_elems != 0)
    return bad_ffn(fn, std::string(name) + ": " + std::to_string(w.cols) +
                           " columns are not a multiple of its format's block (" + std::to_string(block) +
                           ") and of 16");
  return status::success();
}
}  // namespace detail

// Device scratch of moe_ffn for any call of up to max_tokens tokens: the larger of the two paths' plans
// (the decode path's 16-bit copies can outweigh the grouped path's regions just above its limit); with
// gemm_every_count, for calls with and without that flag.
template <int = 0>
inline size_t moe_workspace_bytes(const ffn_shape& s, int64_t max_tokens, bool gemm_every_count = false) {
  const size_t grouped = detail::moe_plan(s, max_tokens).total;
  const size_t decode = detail::moe_plan(s, std::min(max_tokens, moe_decode_max_tokens)).total;
  const int64_t wide = moe_decode_max_tokens_every_count;
  const size_t every = gemm_every_count ? detail::moe_plan(s, std::min(max_tokens, wide), true).total : 0;
  return std::max({grouped, decode, every});
}

// The grouped path of an indexed layer stages its selected experts a window at a time: the gate+up
// matrices of a window of experts (gate strides), their GEMM, then likewise the down matrices, so an
// area of B bytes holds B / gate_stride experts in a gate/up window and B / down_stride in a down
// window (all the experts: one pass of each). Bytes of an area for windows of n_window experts, known
// from the strides alone (a memory planner sizes it before any weight is loaded):
inline size_t moe_staging_bytes(int64_t n_window, int64_t gate_stride_bytes, int64_t down_stride_bytes) {
  return size_t(n_window) * size_t(std::max(gate_stride_bytes, down_stride_bytes));
}
// ... for windows of n_window of these experts (all of them by default).
inline size_t moe_staging_bytes(const moe_weights& w, int64_t n_window = -1) {
  return moe_staging_bytes(n_window < 0 ? w.gate_exps.n_mats : std::min<int64_t>(n_window, w.gate_exps.n_mats),
                           w.gate_exps.stride_bytes(), w.down_exps.stride_bytes());
}
// The experts of one window of matrices of `stride` bytes that `staging_bytes` hold, at most n_experts.
inline int moe_staging_window(size_t staging_bytes, int64_t stride, int n_experts) {
  return int(std::min<int64_t>(n_experts, int64_t(staging_bytes / size_t(stride))));
}

// Checks shapes, views and workspace; the message names the bad value.
template <int = 0>
inline status validate_moe(const ffn_layer_args& a, const moe_weights& w) {
  const ffn_shape& s = a.shape;
  const std::string fn = "moe_ffn";
  const auto str = [](int64_t v) { return std::to_string(v); };
  if (s.n_embd < 1 || s.n_embd % quant::unit_elems != 0)
    return detail::bad_ffn(fn, "n_embd = " + str(s.n_embd) + " is not a positive multiple of 16");
  if (s.n_experts < 1 || s.n_experts > ops::router_max_experts)
    return detail::bad_ffn(fn, "n_experts = " + str(s.n_experts) + " is outside 1.." + str(ops::router_max_experts));
  if (s.n_experts_used < 1 || s.n_experts_used > ops::router_max_k || s.n_experts_used > s.n_experts)
    return detail::bad_ffn(fn, "n_experts_used = " + str(s.n_experts_used) + " is outside 1..min(16, n_experts)");
  if (s.expert_ff_dim < 1 || s.expert_ff_dim % quant::unit_elems != 0)
    return detail::bad_ffn(fn, "expert_ff_dim = " + str(s.expert_ff_dim) + " is not a positive multiple of 16");
  if (s.shared_ff_dim < 0 || s.shared_ff_dim % quant::unit_elems != 0)
    return detail::bad_ffn(fn, "shared_ff_dim = " + str(s.shared_ff_dim) + " is not a multiple of 16");
  Q35_TRY(detail::check_view(fn, "router", w.router, s.n_experts, s.n_embd));
  Q35_TRY(detail::check_view(fn, "gate_exps", w.gate_exps, s.expert_ff_dim, s.n_embd, s.n_experts));
  Q35_TRY(detail::check_view(fn, "up_exps", w.up_exps, s.expert_ff_dim, s.n_embd, s.n_experts));
  Q35_TRY(detail::check_view(fn, "down_exps", w.down_exps, s.n_embd, s.expert_ff_dim, s.n_experts));
  if (w.up_exps.type != w.gate_exps.type || w.up_exps.stride_bytes() != w.gate_exps.stride_bytes())
    return detail::bad_ffn(fn, "up_exps differs from gate_exps in type or expert stride");
  Q35_TRY(detail::check_cols(fn, "gate_exps", w.gate_exps));
  Q35_TRY(detail::check_cols(fn, "down_exps", w.down_exps));
  const bool shared = s.shared_ff_dim > 0;
  if (shared) {
    Q35_TRY(detail::check_view(fn, "shexp_gate_inp", w.shexp_gate_inp, 1, s.n_embd));
    Q35_TRY(detail::check_view(fn, "shexp_gate", w.shexp_gate, s.shared_ff_dim, s.n_embd));
    Q35_TRY(detail::check_view(fn, "shexp_up", w.shexp_up, s.shared_ff_dim, s.n_embd));
    Q35_TRY(detail::check_view(fn, "shexp_down", w.shexp_down, s.n_embd, s.shared_ff_dim));
    if (w.shexp_up.type != w.shexp_gate.type) return detail::bad_ffn(fn, "shexp_up differs from shexp_gate in type");
    if (w.shexp_gate_inp.type != w.router.type)
      return detail::bad_ffn(fn, "shexp_gate_inp has ggml type " + str(w.shexp_gate_inp.type) + ", the router " +
                                     str(w.router.type) + " (the router kernel reads both)");
    Q35_TRY(detail::check_cols(fn, "shexp_gate", w.shexp_gate));
    Q35_TRY(detail::check_cols(fn, "shexp_down", w.shexp_down));
  } else if (!w.shexp_gate.empty() || !w.shexp_gate_inp.empty()) {
    return detail::bad_ffn(fn, "shared-expert weights are given but shared_ff_dim = 0");
  }
  Q35_TRY(detail::validate_route(a.route, s.n_experts_used));
  if (!w.maybe_index.empty()) {
    const moe_expert_index& ix = w.maybe_index;
    if (!ix.down || ix.n_virtual < 1)
      return detail::bad_ffn(fn, "maybe_index: down is null or n_virtual = " + str(ix.n_virtual) + " < 1");
    for (const auto& [name, b, e] : {std::tuple{"gate_up", ix.in_place_gu_begin, ix.in_place_gu_end},
                                     std::tuple{"down", ix.in_place_dn_begin, ix.in_place_dn_end}})
      if (b < 0 || b > e || e > ix.n_virtual)
        return detail::bad_ffn(fn, std::string("maybe_index: the in-place range of ") + name + " [" + str(b) + ", " +
                                       str(e) + ") is not within [0, n_virtual = " + str(ix.n_virtual) + "]");
    if (a.n_tokens > moe_decode_limit(a.gemm_every_count)) {
      const size_t need = moe_staging_bytes(w, 1);
      if (!w.maybe_index.maybe_staging || w.maybe_index.staging_bytes < need ||
          reinterpret_cast<uintptr_t>(w.maybe_index.maybe_staging) % 256 != 0)
        return detail::bad_ffn(fn, str(a.n_tokens) +
                                       " tokens take the grouped path, which copies the selected experts of an "
                                       "indexed layer into maybe_index.maybe_staging: " +
                                       str(int64_t(w.maybe_index.staging_bytes)) + " bytes (256-byte aligned) given, " +
                                       str(int64_t(need)) + " needed for one expert (" +
                                       str(int64_t(moe_staging_bytes(w))) + " stage all " + str(s.n_experts) +
                                       " at once)");
      const int64_t up_offset =
          static_cast<const uint8_t*>(w.up_exps.data) - static_cast<const uint8_t*>(w.gate_exps.data);
      const int64_t gate_bytes = w.gate_exps.rows * w.gate_exps.row_bytes();
      if (up_offset < gate_bytes || up_offset + gate_bytes > w.gate_exps.stride_bytes())
        return detail::bad_ffn(fn, "maybe_index: up_exps starts " + str(up_offset) +
                                       " bytes after gate_exps; the grouped path copies an expert's gate stride (" +
                                       str(w.gate_exps.stride_bytes()) + " bytes), which must hold both matrices");
    }
  }
  if (a.n_tokens < 0) return detail::bad_ffn(fn, "n_tokens = " + str(a.n_tokens) + " is negative");
  if (a.n_tokens == 0) return status::success();
  if (!a.x || !a.h) return detail::bad_ffn(fn, "x or h is null");
  if (reinterpret_cast<uintptr_t>(a.x) % 16 != 0) return detail::bad_ffn(fn, "x is not 16-byte aligned");
  if (!a.error_flag)
    return detail::bad_ffn(fn, "error_flag is null (device-side expert ids are checked on the device)");
  const size_t need = moe_workspace_bytes(s, a.n_tokens, a.gemm_every_count);
  if (!a.workspace || a.workspace_bytes < need || reinterpret_cast<uintptr_t>(a.workspace) % 256 != 0)
    return detail::bad_ffn(fn, "workspace of " + str(int64_t(a.workspace_bytes)) + " bytes (256-byte aligned), " +
                                   str(int64_t(need)) + " needed for " + str(a.n_tokens) + " tokens");
  return status::success();
}

namespace detail {
// The scratch regions of one call, as typed pointers.
struct moe_buffers {
  moe_layout l;
  uint8_t* ws;
  int32_t* ids;    // [n][k]
  float* weights;  // [n][k]
  float* gate;     // [n] shared-expert gate
  float* act;      // [n * k][expert_ff]
  float* sh_act;   // [n][shared_ff]
  float* sh_y;     // [n][n_embd]
};
template <int = 0>
inline moe_buffers moe_buffers_of(const ffn_layer_args& a) {
  moe_buffers b;
  b.l = moe_plan(a.shape, a.n_tokens, a.gemm_every_count);
  b.ws = static_cast<uint8_t*>(a.workspace);
  b.ids = reinterpret_cast<int32_t*>(b.ws + b.l.ids);
  b.weights = reinterpret_cast<float*>(b.ws + b.l.weights);
  b.gate = reinterpret_cast<float*>(b.ws + b.l.gate);
  b.act = reinterpret_cast<float*>(b.ws + b.l.act);
  b.sh_act = reinterpret_cast<float*>(b.ws + b.l.sh_act);
  b.sh_y = reinterpret_cast<float*>(b.ws + b.l.sh_y);
  return b;
}
}  // namespace detail

}  // namespace q35::launch
