// launch::moe_ffn's grouped (prefill) path, for calls of more than moe_decode_max_tokens tokens:
// the routed pairs grouped by expert (launch::moe_group), a grouped tensor-core GEMM per projection
// over each expert's sorted pairs (kernels/gemm_rows.hpp: int8 for the GGUF integer formats, split
// fp16/bf16 for F16/BF16/F32), in staging windows for a layer whose experts sit behind an index, the
// shared expert through launch::matmul, and the combination back to token order.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>

#include "q35/core/dispatch.hpp"
#include "q35/core/status.hpp"
#include "q35/kernels/gemm_i8.hpp"
#include "q35/kernels/gemm_mma_float.hpp"
#include "q35/kernels/gemm_rows.hpp"
#include "q35/kernels/moe_combine.hpp"
#include "q35/kernels/moe_stage.hpp"
#include "q35/launch/ffn.hpp"
#include "q35/launch/launch.hpp"
#include "q35/launch/matmul.hpp"
#include "q35/launch/moe_group.hpp"
#include "q35/launch/moe_plan.hpp"

namespace q35::launch {

// Whether the grouped (prefill) path runs these expert matrices on the int8 tensor-core GEMM (a
// GGUF integer format: its dots then read 16-bit integer activations), else on the split-float one.
inline bool moe_grouped_gemm_i8_path(const quant::weight_view& w) {
  bool yes = false;
  (void)quant::with_format(w.type, [&](auto tag) { yes = gemm_i8_supports<typename decltype(tag)::type>; });
  return yes;
}

namespace detail {
// One projection of the grouped path over the pairs grouped in g: Rows = moe_gate_up,
// y[s] = silu(W_gate[e] x[pair_s / k]) * (W_up[e] x[pair_s / k]) in sorted order; moe_down,
// y[pair_s] = W_down[e] x[s]. x8: x split (the integer formats read it), else x is read.
template <kernels::gemm_rows Rows>
status moe_grouped_projection(const char* name, const quant::weight_view& w, const quant::weight_view& maybe_up,
                              const float* x, const quant::act8x2_view& x8, float* y, int64_t n_x_rows,
                              const kernels::gemm_groups& g, stream_t stream, uintptr_t in_place_bits = 0) {
  constexpr ops::epilogue ep = Rows == kernels::gemm_rows::moe_gate_up ? ops::epilogue::swiglu : ops::epilogue::store;
  return quant::with_format(w.type, [&](auto tag) -> status {
    using F = typename decltype(tag)::type;
    const auto* w0 = static_cast<const uint8_t*>(w.data);
    const auto* up0 = static_cast<const uint8_t*>(maybe_up.data);
    // the weights' loads: 16 bytes (Q4_K, Q5_K, the float formats), else the block's alignment
    constexpr size_t align =
        !gemm_i8_supports<F> || sizeof(typename F::block) % 16 == 0 ? 16 : alignof(typename F::block);
    if ((reinterpret_cast<uintptr_t>(w0) | reinterpret_cast<uintptr_t>(up0) | uintptr_t(g.expert_stride_bytes) |
         in_place_bits) %
            align !=
        0)
      return bad_ffn("moe_ffn", std::string(name) + ": the " + F::name + " experts (or their stride of " +
                                    std::to_string(g.expert_stride_bytes) + " bytes) are not " + std::to_string(align) +
                                    "-byte aligned for the grouped GEMM");
    if constexpr (gemm_i8_supports<F>) {
      using kernel = kernels::gemm_i8_kernel<F, ep, Rows>;
      return launch<kernel>(typename kernel::params{w0, up0, F::row_bytes(w.cols), x8, y, w.rows, w.cols, n_x_rows, g},
                            stream);
    } else {
      static_assert(mma_float_format<F>, "every weight format has a tensor-core GEMM");
      using kernel = kernels::gemm_mma_float_kernel<F, ep, Rows>;
      using block = typename F::block;
      return launch<kernel>(
          typename kernel::params{reinterpret_cast<const block*>(w0), reinterpret_cast<const block*>(up0), x, y, w.rows,
                                  w.cols, n_x_rows, g},
          stream);
    }
  });
}

// The experts of window [begin, begin + n_window) of an indexed layer that the grouped call selected
// (offsets: moe_group's), copied from where its index places them into w.maybe_index.maybe_staging:
// their gate+up matrices (gate_up) or their down matrices; `packed`: the window's view of that
// matrix (expert `begin` first), which the grouped GEMM of the window reads, with expert_at[e] (device,
// [n_experts]) the bytes from packed.data to a selected expert e's matrices. Experts without pairs
// are not copied, nor are those in the index's in-place range (expert_at names their slot).
template <int = 0>
inline status moe_stage_window(const moe_weights& w, const int32_t* offsets, int begin, int n_window, bool gate_up,
                               int64_t* expert_at, int* error_flag, quant::weight_view& packed,
                               quant::weight_view& packed_up, stream_t stream) {
  const moe_expert_index& ix = w.maybe_index;
  auto* dst = static_cast<uint8_t*>(ix.maybe_staging);
  const auto* src_gu = static_cast<const uint8_t*>(w.gate_exps.data);
  const auto* src_dn = static_cast<const uint8_t*>(w.down_exps.data);
  const int64_t gu_stride = w.gate_exps.stride_bytes(), dn_stride = w.down_exps.stride_bytes();
  const uintptr_t bits = reinterpret_cast<uintptr_t>(gate_up ? src_gu : src_dn) | reinterpret_cast<uintptr_t>(dst) |
                         uintptr_t(gate_up ? gu_stride : dn_stride);
  const int unit = bits % 16 == 0 ? 16 : bits % 4 == 0 ? 4 : 1;
  const status st = dispatch<16, 4, 1>(unit, [&](auto u) -> status {
    using kernel = kernels::moe_stage_kernel<decltype(u)::value>;
    return launch<kernel>(
        typename kernel::params{offsets, ix.gate_up, ix.down, src_gu, src_dn, gate_up ? dst : nullptr,
                                gate_up ? nullptr : dst, gu_stride, dn_stride, begin, n_window, ix.n_virtual,
                                gate_up ? ix.in_place_gu_begin : ix.in_place_dn_begin,
                                gate_up ? ix.in_place_gu_end : ix.in_place_dn_end, expert_at, error_flag},
        stream);
  });
  if (!st.ok()) return st;
  const quant::weight_view& m = gate_up ? w.gate_exps : w.down_exps;
  packed = m, packed.data = dst, packed.n_mats = n_window;
  if (gate_up) {
    packed_up = w.up_exps, packed_up.n_mats = n_window;
    packed_up.data = dst + (static_cast<const uint8_t*>(w.up_exps.data) - src_gu);
  }
  return status::success();
}

// The prefill path after routing: group the pairs by expert, run each expert over its pairs as a
// grouped GEMM (gate+up SwiGLU, then down), the shared expert as dense GEMMs, and combine.
template <int = 0>
inline status moe_grouped(const ffn_layer_args& a, const moe_weights& w, const moe_layout& l, stream_t stream) {
  const ffn_shape& s = a.shape;
  auto* ws = static_cast<uint8_t*>(a.workspace);
  const auto* ids = reinterpret_cast<const int32_t*>(ws + l.ids);
  auto* sorted_pairs = reinterpret_cast<int32_t*>(ws + l.sorted_pairs);
  auto* offsets = reinterpret_cast<int32_t*>(ws + l.offsets);
  auto* tile_starts = reinterpret_cast<int32_t*>(ws + l.tile_starts);
  auto* act = reinterpret_cast<float*>(ws + l.act);  // [n_pairs][expert_ff], sorted order
  auto* y = reinterpret_cast<float*>(ws + l.y);      // [n_pairs][n_embd], pair order
  auto* sh_act = reinterpret_cast<float*>(ws + l.sh_act);
  auto* sh_y = reinterpret_cast<float*>(ws + l.sh_y);
  const int32_t n_pairs = int32_t(a.n_tokens * s.n_experts_used);
  const bool shared = s.shared_ff_dim > 0;

  // sorted_pairs, offsets, tile_starts: the pairs grouped by expert
  moe_group_args g;
  g.ids = ids, g.sorted_pairs = sorted_pairs, g.offsets = offsets, g.tile_starts = tile_starts;
  g.n_pairs = n_pairs, g.n_experts = s.n_experts, g.error_flag = a.error_flag;
  g.temp = ws + l.group_temp, g.temp_bytes = l.y - l.group_temp;
  Q35_TRY(moe_group(g, stream));
  // x split once for the integer-format GEMMs that read it (the routed gate/up, the shared gate/up)
  quant::act8x2_view x8;
  const bool sh_i8 = shared && matmul_gemm_i8_path(w.shexp_gate, a.n_tokens);
  if (moe_grouped_gemm_i8_path(w.gate_exps) || sh_i8)
    Q35_TRY(quantize_act8x2(a.x, a.n_tokens, s.n_embd, ws + l.x8, l.act8 - l.x8, x8, stream));
  if (shared) {
    // sh_y = W_sh_down (silu(W_sh_gate x) * (W_sh_up x))
    matmul_args m;
    m.w = w.shexp_gate, m.maybe_w_up = w.shexp_up, m.x = a.x, m.y = sh_act, m.n_tokens = a.n_tokens;
    m.epilogue = ops::epilogue::swiglu, m.maybe_x8 = x8, m.row_invariant = a.row_invariant;
    m.maybe_workspace = ws + l.mm, m.workspace_bytes = l.total - l.mm;
    Q35_TRY(matmul(m, stream));
    matmul_args d;
    d.w = w.shexp_down, d.x = sh_act, d.y = sh_y, d.n_tokens = a.n_tokens;
    d.maybe_workspace = ws + l.mm, d.workspace_bytes = l.total - l.mm, d.row_invariant = a.row_invariant;
    Q35_TRY(matmul(d, stream));
  }
  kernels::gemm_groups groups;
  uintptr_t in_place_bits = 0;  // the in-place experts' addresses (alignment), for the window's projection
  groups.sorted_pairs = sorted_pairs, groups.offsets = offsets, groups.tile_starts = tile_starts;
  groups.k = s.n_experts_used, groups.n_experts = s.n_experts;
  // Each projection runs over windows of experts: all of them at once for packed tensors; for an
  // indexed layer as many as its staging area holds, each window's selected experts copied into it
  // (moe_stage.hpp) before the window's GEMM, which the stream orders before the next window's copy.
  // A tile is one expert's, so the windows compute every output exactly as one pass would.
  // Experts in the index's in-place range (device slots) are not copied: the window's GEMM reads them
  // where they are (expert_at), so their matrices must meet the GEMM's alignment too.
  const bool indexed = !w.maybe_index.empty();
  auto* expert_at = reinterpret_cast<int64_t*>(ws + l.expert_at);
  const auto windows = [&](const quant::weight_view& m, bool gate_up, auto&& gemm) -> status {
    const int n_window =
        indexed ? moe_staging_window(w.maybe_index.staging_bytes, m.stride_bytes(), s.n_experts) : s.n_experts;
    const moe_expert_index& ix = w.maybe_index;
    const bool in_place =
        indexed && (gate_up ? ix.in_place_gu_end > ix.in_place_gu_begin : ix.in_place_dn_end > ix.in_place_dn_begin);
    in_place_bits = in_place ? reinterpret_cast<uintptr_t>(m.data) |
                                   (gate_up ? reinterpret_cast<uintptr_t>(w.up_exps.data) : uintptr_t(0))
                             : 0;
    for (int begin = 0; begin < s.n_experts; begin += n_window) {
      const int n = std::min(n_window, s.n_experts - begin);
      quant::weight_view packed = gate_up ? w.gate_exps : w.down_exps, packed_up = gate_up ? w.up_exps : w.down_exps;
      if (indexed)
        Q35_TRY(moe_stage_window(w, offsets, begin, n, gate_up, expert_at, a.error_flag, packed, packed_up, stream));
      groups.maybe_expert_at = indexed ? expert_at : nullptr;
      groups.expert_begin = begin, groups.expert_end = begin + n;
      groups.max_tiles = int32_t(ceil_div<int64_t>(n_pairs, kernels::moe_group_tile) + n);
      groups.expert_stride_bytes = m.stride_bytes();
      Q35_TRY(gemm(packed, packed_up));
    }
    return status::success();
  };
  // act[i] = silu(W_gate[e] x[pair_i / k]) * (W_up[e] x[pair_i / k]) in sorted order
  Q35_TRY(windows(w.gate_exps, true, [&](const quant::weight_view& gw, const quant::weight_view& uw) {
    return moe_grouped_projection<kernels::gemm_rows::moe_gate_up>("gate_exps", gw, uw, a.x, x8, act, a.n_tokens,
                                                                   groups, stream, in_place_bits);
  }));
  // y[pair_i] = W_down[e] act[i]
  quant::act8x2_view act8;
  if (moe_grouped_gemm_i8_path(w.down_exps))
    Q35_TRY(quantize_act8x2(act, n_pairs, s.expert_ff_dim, ws + l.act8, l.mm - l.act8, act8, stream));
  Q35_TRY(windows(w.down_exps, false, [&](const quant::weight_view& d, const quant::weight_view&) {
    return moe_grouped_projection<kernels::gemm_rows::moe_down>("down_exps", d, {}, act, act8, y, n_pairs, groups,
                                                                stream, in_place_bits);
  }));
  // h += sum_j w_j y_j + gate * sh_y
  kernels::moe_combine_kernel::params c{y,
                                        ids,
                                        reinterpret_cast<const float*>(ws + l.weights),
                                        shared ? sh_y : nullptr,
                                        shared ? reinterpret_cast<const float*>(ws + l.gate) : nullptr,
                                        a.h,
                                        a.n_tokens,
                                        s.n_experts_used,
                                        s.n_experts,
                                        s.n_embd};
  return launch<kernels::moe_combine_kernel>(c, stream);
}
}  // namespace detail

}  // namespace q35::launch
