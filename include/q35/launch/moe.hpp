// launch::moe_ffn: the MoE FFN of one qwen35moe layer,
//   h += sum_{j < k} w_j * down_{e_j}(silu(gate_{e_j} x) * (up_{e_j} x))
//        + sigmoid(w_shexp . x) * down_sh(silu(gate_sh x) * (up_sh x))          (spec §2.3)
// for any token count, with run-time expert counts and weight formats. Decode path: the router
// (ids and weights stay on the device), one launch for the gate+up SwiGLU of every selected expert
// and of the shared expert, one for the weighted down projections added to the residual: 3 kernel
// launches (plus a memset of the router's tile counters) when the shared expert has the routed
// experts' formats, 5 when not (its gate+up and down then run through launch::matmul). Prefill
// path (more than moe_decode_max_tokens tokens): router, grouping by expert (launch::moe_group:
// CUB radix sort on CUDA), a grouped tensor-core GEMM per projection (the dense GEMMs' tiles over
// each expert's sorted pairs, kernels/gemm_rows.hpp: int8 for the GGUF integer formats on the
// GEMV's 16-bit activations, split fp16/bf16 for F16/BF16/F32), the shared expert through
// launch::matmul, and a combination back to token order in a fixed summation order.
#pragma once

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <string>

#include "q35/arch/memory.hpp"
#include "q35/core/dispatch.hpp"
#include "q35/core/status.hpp"
#include "q35/kernels/gemm_i8.hpp"
#include "q35/kernels/gemm_mma_float.hpp"
#include "q35/kernels/gemm_rows.hpp"
#include "q35/kernels/moe.hpp"
#include "q35/kernels/moe_combine.hpp"
#include "q35/kernels/moe_group.hpp"
#include "q35/kernels/moe_index.hpp"
#include "q35/kernels/moe_stage.hpp"
#include "q35/launch/ffn.hpp"
#include "q35/launch/launch.hpp"
#include "q35/launch/matmul.hpp"
#include "q35/launch/router.hpp"

#if Q35_BACKEND_CUDA
#include <cub/device/device_radix_sort.cuh>
#endif

namespace q35::launch {

// ---- launch::moe_group: (token, slot) pairs grouped by expert id on the device ------------------
// The pair list sorted stably by expert, each expert's offsets, and its first tile of the grouped
// GEMM. CUDA: CUB's DeviceRadixSort::SortPairs between two small q35 kernels, with caller-owned
// temporary storage; sim (or on request): one q35 kernel doing the same stable counting sort.
enum class moe_group_backend {
  automatic,  // CUB on the CUDA backend, the q35 kernel on sim
  q35,        // the q35 counting-sort kernel on either backend
};

struct moe_group_args {
  const int32_t* ids = nullptr;     // [n_pairs] expert ids, device
  int32_t* sorted_pairs = nullptr;  // [n_pairs]: pairs of expert 0, then 1, ...; ascending within an expert
  int32_t* offsets = nullptr;       // [n_experts + 1]
  int32_t* tile_starts = nullptr;   // [n_experts + 1] (tiles of kernels::moe_group_tile pairs)
  int32_t n_pairs = 0;
  int n_experts = 0;
  int* error_flag = nullptr;  // device int, set to 1 on an id outside [0, n_experts); such pairs join no group
  void* temp = nullptr;       // device scratch of moe_group_temp_bytes(n_pairs, n_experts) bytes
  size_t temp_bytes = 0;
  moe_group_backend backend = moe_group_backend::automatic;
};

namespace detail {
// Bits of the radix sort's keys: ids 0 .. n_experts (n_experts marks an invalid id).
inline int moe_key_bits(int n_experts) {
  int b = 1;
  while ((1 << b) <= n_experts) ++b;
  return b;
}
inline size_t align_256(size_t n) { return (n + 255) / 256 * 256; }
}  // namespace detail

// Device scratch of moe_group: keys, values and sorted keys [n_pairs] each, plus CUB's temporary storage.
template <int = 0>
inline size_t moe_group_temp_bytes(int32_t n_pairs, int n_experts) {
  size_t cub_bytes = 0;
#if Q35_BACKEND_CUDA
  cub::DeviceRadixSort::SortPairs(nullptr, cub_bytes, static_cast<const int32_t*>(nullptr),
                                  static_cast<int32_t*>(nullptr), static_cast<const int32_t*>(nullptr),
                                  static_cast<int32_t*>(nullptr), int(n_pairs), 0, detail::moe_key_bits(n_experts));
#else
  (void)n_experts;
#endif
  return 3 * detail::align_256(size_t(n_pairs) * sizeof(int32_t)) + detail::align_256(cub_bytes);
}

template <int = 0>
inline status moe_group(const moe_group_args& a, stream_t stream = nullptr) {
  auto bad = [](const std::string& m) { return error(status_code::invalid_argument, "launch::moe_group: " + m); };
  if (a.n_pairs < 0) return bad("n_pairs = " + std::to_string(a.n_pairs) + " is negative");
  if (a.n_experts < 1) return bad("n_experts = " + std::to_string(a.n_experts) + " must be >= 1");
  if (!a.ids || !a.sorted_pairs || !a.offsets || !a.tile_starts || !a.error_flag) return bad("a pointer is null");
  const size_t need = moe_group_temp_bytes(a.n_pairs, a.n_experts);
  if (!a.temp || a.temp_bytes < need)
    return bad("temp of " + std::to_string(a.temp_bytes) + " bytes, " + std::to_string(need) + " needed");
  const size_t pair_bytes = detail::align_256(size_t(a.n_pairs) * sizeof(int32_t));
  auto* base = static_cast<uint8_t*>(a.temp);
  kernels::moe_group_params p{a.ids,
                              reinterpret_cast<int32_t*>(base),
                              reinterpret_cast<int32_t*>(base + pair_bytes),
                              reinterpret_cast<int32_t*>(base + 2 * pair_bytes),
                              a.sorted_pairs,
                              a.offsets,
                              a.tile_starts,
                              a.n_pairs,
                              a.n_experts,
                              a.error_flag};
#if Q35_BACKEND_CUDA
  if (a.backend == moe_group_backend::automatic) {
    Q35_TRY(launch<kernels::moe_keys_kernel>(p, stream));
    size_t cub_bytes = need - 3 * pair_bytes;
    Q35_TRY(q35::detail::cuda_status(
        cub::DeviceRadixSort::SortPairs(base + 3 * pair_bytes, cub_bytes, p.keys,
                                        reinterpret_cast<int32_t*>(base + 2 * pair_bytes), p.values, a.sorted_pairs,
                                        int(a.n_pairs), 0, detail::moe_key_bits(a.n_experts), stream),
        "cub::DeviceRadixSort::SortPairs"));
    return launch<kernels::moe_offsets_kernel>(p, stream);
  }
#endif
  return launch<kernels::moe_group_kernel>(p, stream);
}

// ---- launch::moe_ffn -------------------------------------------------------------------------

// Token counts up to which moe_ffn runs the decode kernels; above, the grouped (prefill) path.
inline constexpr int64_t moe_decode_max_tokens = 8;

namespace detail {
// Byte offsets of moe_ffn's scratch regions for n tokens (each 256-byte aligned); the grouped
// path's regions (sorted pairs .. y) only above moe_decode_max_tokens.
struct moe_layout {
  size_t counters, logits, ids, weights, k_used, gate, act, sh_act, sh_y;
  size_t x16, act16, sh_act16;  // decode only: x, act and sh_act quantized for the GEMV engine's integer path
  size_t index_gu, index_dn;    // decode only: the pairs' matrix indexes (moe_weights::maybe_index)
  size_t sorted_pairs, offsets, tile_starts, group_temp, y;
  size_t x8, act8;  // grouped only: x and act split for the int8 tensor-core GEMM (quant/act8x2.hpp)
  size_t mm;        // grouped only: the shared expert's matmul scratch (its activations for the tensor-core GEMM)
  size_t total;
};
template <int = 0>
inline moe_layout moe_plan(const ffn_shape& s, int64_t n) {
  moe_layout l{};
  size_t at = 0;
  auto take = [&](size_t bytes) {
    const size_t here = at;
    at += ws_align(bytes);
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
  const bool decode = n <= moe_decode_max_tokens;
  const auto a16 = [&](int64_t cols, int64_t rows) {
    return decode && cols % quant::act16_group_elems == 0 ? quant::act16_bytes(cols, rows) : 0;
  };
  l.x16 = take(a16(s.n_embd, n));                                        // [n][n_embd]
  l.act16 = take(a16(s.expert_ff_dim, n * int64_t(k)));                  // [n * k][expert_ff]
  l.sh_act16 = take(s.shared_ff_dim > 0 ? a16(s.shared_ff_dim, n) : 0);  // [n][shared_ff]
  l.index_gu = take(decode ? t * k * sizeof(int32_t) : 0);               // [n][k]
  l.index_dn = take(decode ? t * k * sizeof(int32_t) : 0);               // [n][k]
  const size_t e1 = size_t(s.n_experts + 1), pairs = n > moe_decode_max_tokens ? t * k : 0;
  l.sorted_pairs = take(pairs * sizeof(int32_t));          // [n * k]
  l.offsets = take(pairs ? e1 * sizeof(int32_t) : 0);      // [E + 1]
  l.tile_starts = take(pairs ? e1 * sizeof(int32_t) : 0);  // [E + 1]
  l.group_temp = take(pairs ? moe_group_temp_bytes(int32_t(pairs), s.n_experts) : 0);
  l.y = take(pairs * size_t(s.n_embd) * sizeof(float));  // [n * k][n_embd] expert outputs, pair order
  const auto a8 = [&](int64_t cols, int64_t rows) {
    return pairs && cols % quant::act16_group_elems == 0 ? quant::act8x2_bytes(cols, rows) : 0;
  };
  l.x8 = take(a8(s.n_embd, n));                        // [n][n_embd]
  l.act8 = take(a8(s.expert_ff_dim, n * int64_t(k)));  // [n * k][expert_ff], sorted order
  l.mm = take(pairs && s.shared_ff_dim > 0
                  ? std::max(matmul_workspace_bytes(s.n_embd, n), matmul_workspace_bytes(s.shared_ff_dim, n))
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

// Device scratch of moe_ffn for up to max_tokens tokens: the larger of the two paths' plans (the
// decode path's 16-bit copies can outweigh the grouped path's regions just above its limit).
template <int = 0>
inline size_t moe_workspace_bytes(const ffn_shape& s, int64_t max_tokens) {
  const size_t grouped = detail::moe_plan(s, max_tokens).total;
  const size_t decode = detail::moe_plan(s, std::min(max_tokens, moe_decode_max_tokens)).total;
  return std::max(grouped, decode);
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
    if (!w.maybe_index.down || w.maybe_index.n_virtual < 1)
      return detail::bad_ffn(fn, "maybe_index: down is null or n_virtual = " + str(w.maybe_index.n_virtual) + " < 1");
    if (a.n_tokens > moe_decode_max_tokens) {
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
  const size_t need = moe_workspace_bytes(s, a.n_tokens);
  if (!a.workspace || a.workspace_bytes < need || reinterpret_cast<uintptr_t>(a.workspace) % 256 != 0)
    return detail::bad_ffn(fn, "workspace of " + str(int64_t(a.workspace_bytes)) + " bytes (256-byte aligned), " +
                                   str(int64_t(need)) + " needed for " + str(a.n_tokens) + " tokens");
  return status::success();
}

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
                              const kernels::gemm_groups& g, stream_t stream) {
  constexpr ops::epilogue ep = Rows == kernels::gemm_rows::moe_gate_up ? ops::epilogue::swiglu : ops::epilogue::store;
  return quant::with_format(w.type, [&](auto tag) -> status {
    using F = typename decltype(tag)::type;
    const auto* w0 = static_cast<const uint8_t*>(w.data);
    const auto* up0 = static_cast<const uint8_t*>(maybe_up.data);
    // the weights' loads: 16 bytes (Q4_K, Q5_K, the float formats), else the block's alignment
    constexpr size_t align =
        !gemm_i8_supports<F> || sizeof(typename F::block) % 16 == 0 ? 16 : alignof(typename F::block);
    if ((reinterpret_cast<uintptr_t>(w0) | reinterpret_cast<uintptr_t>(up0) | uintptr_t(g.expert_stride_bytes)) %
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
// matrix (expert `begin` first), which the grouped GEMM of the window reads. Experts without pairs
// are not copied.
template <int = 0>
inline status moe_stage_window(const moe_weights& w, const int32_t* offsets, int begin, int n_window, bool gate_up,
                               int* error_flag, quant::weight_view& packed, quant::weight_view& packed_up,
                               stream_t stream) {
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
    return launch<kernel>(typename kernel::params{offsets, ix.gate_up, ix.down, src_gu, src_dn, gate_up ? dst : nullptr,
                                                  gate_up ? nullptr : dst, gu_stride, dn_stride, begin, n_window,
                                                  ix.n_virtual, error_flag},
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
  groups.sorted_pairs = sorted_pairs, groups.offsets = offsets, groups.tile_starts = tile_starts;
  groups.k = s.n_experts_used, groups.n_experts = s.n_experts;
  // Each projection runs over windows of experts: all of them at once for packed tensors; for an
  // indexed layer as many as its staging area holds, each window's selected experts copied into it
  // (moe_stage.hpp) before the window's GEMM, which the stream orders before the next window's copy.
  // A tile is one expert's, so the windows compute every output exactly as one pass would.
  const bool indexed = !w.maybe_index.empty();
  const auto windows = [&](const quant::weight_view& m, bool gate_up, auto&& gemm) -> status {
    const int n_window =
        indexed ? moe_staging_window(w.maybe_index.staging_bytes, m.stride_bytes(), s.n_experts) : s.n_experts;
    for (int begin = 0; begin < s.n_experts; begin += n_window) {
      const int n = std::min(n_window, s.n_experts - begin);
      quant::weight_view packed = gate_up ? w.gate_exps : w.down_exps, packed_up = gate_up ? w.up_exps : w.down_exps;
      if (indexed) Q35_TRY(moe_stage_window(w, offsets, begin, n, gate_up, a.error_flag, packed, packed_up, stream));
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
                                                                   groups, stream);
  }));
  // y[pair_i] = W_down[e] act[i]
  quant::act8x2_view act8;
  if (moe_grouped_gemm_i8_path(w.down_exps))
    Q35_TRY(quantize_act8x2(act, n_pairs, s.expert_ff_dim, ws + l.act8, l.mm - l.act8, act8, stream));
  Q35_TRY(windows(w.down_exps, false, [&](const quant::weight_view& d, const quant::weight_view&) {
    return moe_grouped_projection<kernels::gemm_rows::moe_down>("down_exps", d, {}, act, act8, y, n_pairs, groups,
                                                                stream);
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
  b.l = moe_plan(a.shape, a.n_tokens);
  b.ws = static_cast<uint8_t*>(a.workspace);
  b.ids = reinterpret_cast<int32_t*>(b.ws + b.l.ids);
  b.weights = reinterpret_cast<float*>(b.ws + b.l.weights);
  b.gate = reinterpret_cast<float*>(b.ws + b.l.gate);
  b.act = reinterpret_cast<float*>(b.ws + b.l.act);
  b.sh_act = reinterpret_cast<float*>(b.ws + b.l.sh_act);
  b.sh_y = reinterpret_cast<float*>(b.ws + b.l.sh_y);
  return b;
}

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
  return router(r, stream);
}

// Decode with experts through an index: each pair's expert id -> its gate/up and down matrix indexes.
template <int = 0>
inline status moe_apply_index(const ffn_layer_args& a, const moe_weights& w, stream_t stream) {
  const moe_buffers b = moe_buffers_of(a);
  const kernels::moe_index_kernel::params p{b.ids,
                                            w.maybe_index.gate_up,
                                            w.maybe_index.down,
                                            reinterpret_cast<int32_t*>(b.ws + b.l.index_gu),
                                            reinterpret_cast<int32_t*>(b.ws + b.l.index_dn),
                                            int32_t(a.n_tokens * a.shape.n_experts_used),
                                            a.shape.n_experts,
                                            w.maybe_index.n_virtual};
  return launch<kernels::moe_index_kernel>(p, stream);
}

// Whether the decode kernels compute the shared expert's gate+up (down) themselves: only in the
// routed experts' format (one instance per format, not per pair of formats).
inline bool moe_fused_gate_up(const moe_weights& w, const ffn_shape& s) {
  return s.shared_ff_dim > 0 && w.shexp_gate.type == w.gate_exps.type;
}
inline bool moe_fused_down(const moe_weights& w, const ffn_shape& s) {
  return s.shared_ff_dim > 0 && w.shexp_down.type == w.down_exps.type;
}

// Whether the decode kernels read 16-bit activations for matrices of Format with rows of `cols`
// (the GEMV engine's integer path: dot16 items that tile the row, 16-byte aligned rows and strides).
template <class Format>
bool moe_int_path(int64_t cols, std::initializer_list<uintptr_t> addresses_and_strides) {
  if constexpr (ops::has_dot16<Format>) {
    uintptr_t bits = 0;
    for (uintptr_t v : addresses_and_strides) bits |= v;
    return cols % ops::dot16<Format>::item_elems == 0 && bits % 16 == 0;
  } else {
    (void)cols, (void)addresses_and_strides;
    return false;
  }
}
inline uintptr_t moe_addr(const void* p) { return reinterpret_cast<uintptr_t>(p); }

// Q6_K down rows of 512 or 1024 weights: the decode down kernel bundles 4 or 2 of them into one
// 8-block item (moe_down_kernel's BlocksPerRow); 0 where that does not apply.
inline int moe_q6k_bundle_blocks(const moe_weights& w, const ffn_shape& s) {
  if (w.down_exps.type != uint32_t(quant::type_id::q6_k)) return 0;
  const int ff = s.expert_ff_dim;
  if ((ff != 512 && ff != 1024) || s.n_embd % (2048 / ff) != 0) return 0;
  if (moe_fused_down(w, s) && s.shared_ff_dim != ff) return 0;
  return ff / 256;
}

// Whether moe_decode_down takes the integer path (then moe_decode_gate_up writes act16 and sh_act16).
template <int = 0>
inline bool moe_down_int_path(const moe_weights& w, const ffn_shape& s) {
  bool yes = false;
  (void)quant::with_format(w.down_exps.type, [&](auto tag) {
    using F = typename decltype(tag)::type;
    const uintptr_t stride = uintptr_t(w.down_exps.stride_bytes());
    if (moe_q6k_bundle_blocks(w, s) > 0) {  // items of whole row bundles: 16-byte aligned matrices suffice
      yes = moe_int_path<F>(
          2048, {moe_addr(w.down_exps.data), stride, moe_fused_down(w, s) ? moe_addr(w.shexp_down.data) : 0});
    } else {
      yes = moe_int_path<F>(s.expert_ff_dim, {moe_addr(w.down_exps.data), stride});
      if (moe_fused_down(w, s)) yes = yes && moe_int_path<F>(s.shared_ff_dim, {moe_addr(w.shexp_down.data)});
    }
    // a fused shared down reads sh_act16, which only the fused gate/up kernel writes
    if (moe_fused_down(w, s)) yes = yes && moe_fused_gate_up(w, s);
  });
  return yes;
}

// Lanes per row of the decode kernels: the largest power of two <= 32 dividing the row's items.
template <class Format, bool Act16>
int moe_log2_lanes(int64_t cols) {
  const int64_t items = cols / ops::gemv_engine<Format, 1, 1, Act16>::item_elems;
  int k = 0;
  while (k < 5 && items % (int64_t(2) << k) == 0) ++k;
  return k;
}

// Which dots of the decode kernels read 16-bit activations (the GEMV engine's integer path): the
// routed (and fused shared) gate/up on x, and the routed (and fused shared) down on act.
struct moe_decode_paths {
  bool gate_up_act16 = false, down_act16 = false;
};
template <int = 0>
inline moe_decode_paths moe_decode_paths_of(const moe_weights& w, const ffn_shape& s) {
  moe_decode_paths r;
  r.down_act16 = moe_down_int_path(w, s);
  const bool fused = moe_fused_gate_up(w, s);
  (void)quant::with_format(w.gate_exps.type, [&](auto tag) {
    using F = typename decltype(tag)::type;
    r.gate_up_act16 = moe_int_path<F>(
        s.n_embd, {moe_addr(w.gate_exps.data), moe_addr(w.up_exps.data), uintptr_t(w.gate_exps.stride_bytes()),
                   fused ? moe_addr(w.shexp_gate.data) : 0, fused ? moe_addr(w.shexp_up.data) : 0});
  });
  return r;
}

// Launches moe_gate_up_kernel<F, Act16> (see moe_decode_gate_up).
template <class F, bool Act16>
status run_moe_gate_up(const ffn_layer_args& a, const moe_weights& w, const moe_buffers& b,
                       const quant::act16_view& x16, bool down16, stream_t stream) {
  const ffn_shape& s = a.shape;
  using kernel = kernels::moe_gate_up_kernel<F, Act16>;
  typename kernel::params p{};
  p.x = a.x, p.x16 = x16;
  p.gate = static_cast<const uint8_t*>(w.gate_exps.data);
  p.up_offset_bytes = static_cast<const uint8_t*>(w.up_exps.data) - p.gate;
  p.expert_stride_bytes = w.gate_exps.stride_bytes();
  p.ids = w.maybe_index.empty() ? b.ids : reinterpret_cast<const int32_t*>(b.ws + b.l.index_gu), p.act = b.act;
  if (moe_fused_gate_up(w, s)) {
    p.maybe_sh_gate = static_cast<const uint8_t*>(w.shexp_gate.data);
    p.sh_up_offset_bytes = static_cast<const uint8_t*>(w.shexp_up.data) - p.maybe_sh_gate;
    p.maybe_sh_act = b.sh_act;
  }
  if (down16) {
    const quant::act16_view v = act16_layout(b.ws + b.l.act16, s.expert_ff_dim, a.n_tokens * s.n_experts_used);
    p.maybe_act_q = const_cast<int16_t*>(v.q), p.maybe_act_groups = const_cast<quant::act16_group*>(v.groups);
    if (moe_fused_down(w, s)) {  // (then the gate/up is fused too: moe_down_int_path)
      const quant::act16_view sv = act16_layout(b.ws + b.l.sh_act16, s.shared_ff_dim, a.n_tokens);
      p.maybe_sh_act_q = const_cast<int16_t*>(sv.q), p.maybe_sh_act_groups = const_cast<quant::act16_group*>(sv.groups);
    }
  }
  p.n_tokens = a.n_tokens, p.k = s.n_experts_used, p.n_embd = s.n_embd;
  p.n_experts = w.maybe_index.empty() ? s.n_experts : w.maybe_index.n_virtual;  // the ids' range
  p.expert_ff = s.expert_ff_dim, p.shared_ff = s.shared_ff_dim, p.error_flag = a.error_flag;
  p.log2_lanes = moe_log2_lanes<F, Act16>(s.n_embd);
  return launch<kernel>(p, stream);
}

// Decode step 2: act[p] = silu(gate_e x) * (up_e x) for every pair, and the shared expert's
// (through launch::matmul when it has another format; its down projection then too); with the
// 16-bit copies of act and sh_act when the down projection reads them.
template <int = 0>
inline status moe_decode_gate_up(const ffn_layer_args& a, const moe_weights& w, stream_t stream) {
  const ffn_shape& s = a.shape;
  const moe_buffers b = moe_buffers_of(a);
  quant::act16_view x16 = a.maybe_x16;
  if (s.shared_ff_dim > 0 && !moe_fused_gate_up(w, s)) {
    matmul_args m;
    m.w = w.shexp_gate, m.maybe_w_up = w.shexp_up, m.x = a.x, m.y = b.sh_act, m.n_tokens = a.n_tokens;
    m.epilogue = ops::epilogue::swiglu, m.maybe_x16 = x16, m.row_invariant = a.row_invariant;
    Q35_TRY(matmul(m, stream));
  }
  const moe_decode_paths paths = moe_decode_paths_of(w, s);
  if (paths.gate_up_act16 && x16.empty()) {  // x quantized once here unless its producer did it
    Q35_TRY(
        quantize_act16(a.x, a.n_tokens, s.n_embd, b.ws + b.l.x16, quant::act16_bytes(s.n_embd, a.n_tokens), stream));
    x16 = act16_layout(b.ws + b.l.x16, s.n_embd, a.n_tokens);
  }
  Q35_TRY(quant::with_format(w.gate_exps.type, [&](auto tag) -> status {
    using F = typename decltype(tag)::type;
    if constexpr (ops::has_dot16<F>) {
      if (paths.gate_up_act16) return run_moe_gate_up<F, true>(a, w, b, x16, paths.down_act16, stream);
    }
    return run_moe_gate_up<F, false>(a, w, b, {}, paths.down_act16, stream);
  }));
  if (s.shared_ff_dim > 0 && !moe_fused_down(w, s)) {
    matmul_args m;
    m.w = w.shexp_down, m.x = b.sh_act, m.y = b.sh_y, m.n_tokens = a.n_tokens, m.row_invariant = a.row_invariant;
    Q35_TRY(matmul(m, stream));
  }
  return status::success();
}

// Launches moe_down_kernel<F, Act16, Policy, BlocksPerRow> (see moe_decode_down).
template <class F, bool Act16, class Policy = kernels::moe_policy_decode, int BlocksPerRow = 0>
status run_moe_down(const ffn_layer_args& a, const moe_weights& w, const moe_buffers& b, stream_t stream) {
  const ffn_shape& s = a.shape;
  using kernel = kernels::moe_down_kernel<F, Act16, Policy, BlocksPerRow>;
  typename kernel::params p{};
  p.act = b.act;
  if (Act16) p.act16 = act16_layout(b.ws + b.l.act16, s.expert_ff_dim, a.n_tokens * s.n_experts_used);
  p.down = static_cast<const uint8_t*>(w.down_exps.data);
  p.expert_stride_bytes = w.down_exps.stride_bytes();
  p.ids = w.maybe_index.empty() ? b.ids : reinterpret_cast<const int32_t*>(b.ws + b.l.index_dn);
  p.weights = b.weights;
  if (moe_fused_down(w, s)) {
    p.maybe_sh_act = b.sh_act;
    if (Act16) p.sh_act16 = act16_layout(b.ws + b.l.sh_act16, s.shared_ff_dim, a.n_tokens);
    p.maybe_sh_down = static_cast<const uint8_t*>(w.shexp_down.data);
  } else if (s.shared_ff_dim > 0) {
    p.maybe_sh_y = b.sh_y;
  }
  p.maybe_sh_gate = s.shared_ff_dim > 0 ? b.gate : nullptr;
  p.h = a.h;
  p.n_tokens = a.n_tokens, p.k = s.n_experts_used, p.n_embd = s.n_embd;
  p.n_experts = w.maybe_index.empty() ? s.n_experts : w.maybe_index.n_virtual;  // the ids' range
  p.expert_ff = s.expert_ff_dim, p.shared_ff = s.shared_ff_dim, p.error_flag = a.error_flag;
  p.log2_lanes = moe_log2_lanes<F, Act16>(s.expert_ff_dim);
  return launch<kernel>(p, stream);
}

// Decode step 3: h += sum_j w_j down_{e_j} act_j + gate * down_sh sh_act.
template <int = 0>
inline status moe_decode_down(const ffn_layer_args& a, const moe_weights& w, stream_t stream) {
  const moe_buffers b = moe_buffers_of(a);
  const bool int_path = moe_down_int_path(w, a.shape);
  return quant::with_format(w.down_exps.type, [&](auto tag) -> status {
    using F = typename decltype(tag)::type;
    if constexpr (F::id == quant::type_id::q6_k) {
      // rows of 512 / 1024: 4 / 2 rows per item, a (job, bundle) per thread of 64-thread blocks
      const int bundle = int_path ? moe_q6k_bundle_blocks(w, a.shape) : 0;
      if (bundle == 2) return run_moe_down<F, true, kernels::moe_policy<64>, 2>(a, w, b, stream);
      if (bundle == 4) return run_moe_down<F, true, kernels::moe_policy<64>, 4>(a, w, b, stream);
    }
    if constexpr (ops::has_dot16<F>) {
      if (int_path) return run_moe_down<F, true>(a, w, b, stream);
    }
    return run_moe_down<F, false>(a, w, b, stream);
  });
}
}  // namespace detail

// h += MoE(x) for a.n_tokens tokens. Asynchronous on `stream`; the workspace needs no preparation
// (the router's counters are cleared here) and may be shared with other ops between calls.
template <int = 0>
inline status moe_ffn(const ffn_layer_args& a, const moe_weights& w, stream_t stream = nullptr) {
  Q35_TRY(validate_moe(a, w));
  if (a.n_tokens == 0) return status::success();
  Q35_TRY(detail::moe_route(a, w, stream));
  if (a.n_tokens > moe_decode_max_tokens)
    return detail::moe_grouped(a, w, detail::moe_plan(a.shape, a.n_tokens), stream);
  if (!w.maybe_index.empty()) Q35_TRY(detail::moe_apply_index(a, w, stream));
  Q35_TRY(detail::moe_decode_gate_up(a, w, stream));
  return detail::moe_decode_down(a, w, stream);
}

}  // namespace q35::launch
