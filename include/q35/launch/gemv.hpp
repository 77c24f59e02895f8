// Host API of the GEMV family: validate(args) -> status naming the problem, and
// launch::gemv<Format>(args, stream) choosing the kernel instance for the epilogue, token count,
// mode (plain or expert-indexed) and path: the integer path (16-bit activations, dp2a) when the
// format has one, the row tiles into its work items and the activations are quantized (given by
// their producer, or quantized here into the caller's workspace: one extra small launch); else the
// float path (fp32 activations), which serves every format and shape.
//
// Expert ids are device-resident (the router writes them on the GPU, and reading them back would
// stall the decode step), so they cannot be checked before launch: a block whose id is out of
// [0, n_experts) writes NaN to its pair's rows and sets *maybe_error_flag = 1 (required in expert
// mode); the caller checks the flag when it next synchronizes. Callers that hold the ids on the host
// (prefill routing read back, tests, tools) reject bad ones before launch with validate_expert_ids.
#pragma once

#include <algorithm>
#include <bit>
#include <cstdint>
#include <span>
#include <string>
#include <type_traits>

#include "q35/core/dispatch.hpp"
#include "q35/core/status.hpp"
#include "q35/kernels/gemv.hpp"
#include "q35/launch/launch.hpp"
#include "q35/ops/gemv_dot16.hpp"
#include "q35/ops/gemv_policy.hpp"
#include "q35/quant/act16.hpp"
#include "q35/quant/format_list.hpp"

namespace q35::launch {

using kernels::gemv_epilogue;

template <quant::weight_format Format>
struct gemv_args {
  const typename Format::block* w = nullptr;           // [rows][cols] (expert mode: [n_experts][rows][cols])
  const typename Format::block* maybe_w_up = nullptr;  // swiglu: the up matrix, same shape as w (the gate)
  const float* x = nullptr;  // [n_tokens][cols] (expert mode: [n_pairs / x_group_div][cols]), 16-byte aligned
  float* y = nullptr;        // [n_tokens][rows] (expert mode: [n_pairs][rows])
  int64_t rows = 0, cols = 0;
  int n_tokens = 1;  // plain mode: 1..8 tokens share one pass over W
  gemv_epilogue epilogue = gemv_epilogue::store;
  // Expert mode, when maybe_expert_ids is set: pair p computes y[p] = W[ids[p]] x[p / x_group_div].
  const int32_t* maybe_expert_ids = nullptr;  // [n_pairs], device memory
  int n_pairs = 0;
  int32_t n_experts = 0;
  // Bytes from expert e's first row to expert e + 1's, for w and maybe_w_up alike; 0: rows * row bytes
  // (separate, packed tensors). A merged ffn_gate_up_exps [cols, 2 ff, n_experts] has gate rows then up
  // rows per expert: w = base, maybe_w_up = base + ff row bytes, stride = 2 ff row bytes.
  int64_t expert_stride_bytes = 0;
  int x_group_div = 1;
  int* maybe_error_flag = nullptr;  // device int, set to 1 on an out-of-range expert id
  // Integer path: device scratch of at least gemv_workspace_bytes(cols, x rows) bytes (16-byte
  // aligned) into which x is quantized before the product; null: the float path.
  void* maybe_workspace = nullptr;
  size_t workspace_bytes = 0;
  // Or x's rows already quantized by their producer (quant/act16.hpp layout); x may then be null,
  // and the format and shape must have the integer path (gemv_has_int_path).
  quant::act16_view maybe_x16;
  // Warps of a block that share a row (split-K): 1, 2 or 4; 0: chosen from the shape so that small
  // matrices still give every SM work (gemv_warps_per_row). Tests and benchmarks may force it.
  int warps_per_row = 0;
  // Batch invariance: a token's row computed exactly as in a call of any other token count (1..8).
  // Every instance sums a row's items in the same order, so only the path can differ: Q6_K's narrow
  // one-token items (gemv_int_load_bytes) are then not taken and those rows take the float path at
  // every token count. Off: one-token products take the fastest path the shape has.
  bool row_invariant = false;
};

// Device scratch for quantizing `n_x_rows` activation rows of `cols` elements (plain mode: n_tokens;
// expert mode: ceil(n_pairs / x_group_div)).
inline size_t gemv_workspace_bytes(int64_t cols, int64_t n_x_rows) {
  return cols % quant::act16_group_elems == 0 ? quant::act16_bytes(cols, n_x_rows) : 0;
}

// Largest token count one plain GEMV pass serves.
inline constexpr int gemv_max_tokens = 8;

// The load width of the integer-path item W of this format and shape takes, or 0 where it has no
// integer path: an item must tile the row, and the matrices (and expert stride) must be aligned to
// its loads, so that every item is whole aligned loads. 16 (ops::dot16<Format>) for every format;
// Q6_K rows that its 2048-weight item does not tile take 4-block items of 8-byte loads (rows a
// multiple of 1024) or 2-block items of 4-byte loads (512), in one-token plain products (decode):
// instances for 4/8 tokens and expert mode of these would double Q6_K's share of the CUDA build, and
// those products take the float path (as do one-token products that ask for row_invariant).
// Q6_K SwiGLU in expert mode always takes the 8-byte item (rows a multiple of 1024): with 16-byte
// items ptxas (nvcc 13.0) trimmed that instance to 96 registers on sm_90 and spilled in its loop
// (8 bytes of stack, 3 local-memory instructions per item), with either order of its two matrices'
// items or any minimum of blocks per SM; the 8-byte item keeps 83 registers, no local memory, and
// 2.20 issued instructions per weight against the 16-byte item's 2.15 (scripts/check_sass.py, sm_90).
template <quant::weight_format Format>
int gemv_int_load_bytes(const gemv_args<Format>& a) {
  const auto bits = reinterpret_cast<uintptr_t>(a.w) | reinterpret_cast<uintptr_t>(a.maybe_w_up) |
                    uintptr_t(a.maybe_expert_ids ? a.expert_stride_bytes : 0);
  const bool expert_swiglu = a.maybe_expert_ids && a.epilogue == ops::epilogue::swiglu;
  int found = 0;
  auto fits = [&](auto load) {
    constexpr int L = decltype(load)::value;
    if constexpr (ops::has_dot16_loads<Format, L>) {
      const bool plain_decode = !a.maybe_expert_ids && a.n_tokens == 1 && !a.row_invariant;
      const bool takes = L == 16  ? !(expert_swiglu && ops::has_dot16_loads<Format, 8>)
                         : L == 8 ? plain_decode || expert_swiglu
                                  : plain_decode;
      if (found == 0 && takes && a.cols % ops::dot16<Format, L>::item_elems == 0 && bits % L == 0) found = L;
    }
  };
  fits(std::integral_constant<int, 16>{});
  fits(std::integral_constant<int, 8>{});
  fits(std::integral_constant<int, 4>{});
  return found;
}

// Whether W of this format and shape has the integer path (gemv_int_load_bytes).
template <quant::weight_format Format>
bool gemv_has_int_path(const gemv_args<Format>& a) {
  return gemv_int_load_bytes(a) != 0;
}

// Every message is built only on the failing path: a call that passes allocates nothing.
template <quant::weight_format Format>
status validate(const gemv_args<Format>& a) {
  auto bad = [](const std::string& m) {
    return error(status_code::invalid_argument, std::string("gemv ") + Format::name + ": " + m);
  };
  constexpr int64_t min_cols = Format::block_elems > quant::unit_elems ? Format::block_elems : quant::unit_elems;
  if (a.rows < 0 || a.cols <= 0) return bad("rows must be >= 0 and cols > 0");
  if (a.cols % min_cols != 0)
    return bad("cols = " + std::to_string(a.cols) + " is not a multiple of the block size " + std::to_string(min_cols));
  // the kernel offsets a block's rows with 32-bit ints: rows_per_block (<= 64) rows must fit 2^31 bytes
  if (Format::row_bytes(a.cols) > INT32_MAX / 64)
    return bad("a row of " + std::to_string(a.cols) + " columns is over 2^31 / 64 bytes");
  if (!a.w || (!a.x && a.maybe_x16.empty()) || !a.y) return bad("null w, x or y");
  if ((a.epilogue == gemv_epilogue::swiglu) != (a.maybe_w_up != nullptr))
    return bad(a.maybe_w_up ? "maybe_w_up is given but the epilogue is not swiglu" : "swiglu needs maybe_w_up");
  if (reinterpret_cast<uintptr_t>(a.x) % 16 != 0) return bad("x is not 16-byte aligned");
  const int64_t n_x_rows = a.maybe_expert_ids ? (int64_t(a.n_pairs) + (a.x_group_div > 0 ? a.x_group_div : 1) - 1) /
                                                    (a.x_group_div > 0 ? a.x_group_div : 1)
                                              : a.n_tokens;
  if (!a.maybe_x16.empty()) {
    if (!gemv_has_int_path(a))
      return bad("maybe_x16 is given but this format and shape have no integer path (see gemv_has_int_path)");
    if ((reinterpret_cast<uintptr_t>(a.maybe_x16.q) | reinterpret_cast<uintptr_t>(a.maybe_x16.groups)) % 16 != 0)
      return bad("maybe_x16 is not 16-byte aligned");
  } else if (a.maybe_workspace && gemv_has_int_path(a)) {
    if (reinterpret_cast<uintptr_t>(a.maybe_workspace) % 16 != 0) return bad("maybe_workspace is not 16-byte aligned");
    if (a.workspace_bytes < gemv_workspace_bytes(a.cols, n_x_rows))
      return bad("workspace_bytes = " + std::to_string(a.workspace_bytes) +
                 " is below gemv_workspace_bytes = " + std::to_string(gemv_workspace_bytes(a.cols, n_x_rows)));
  }
  if (reinterpret_cast<uintptr_t>(a.w) % alignof(typename Format::block) != 0 ||
      reinterpret_cast<uintptr_t>(a.maybe_w_up) % alignof(typename Format::block) != 0)
    return bad("weights are not aligned to their block struct");
  if (a.warps_per_row != 0 && a.warps_per_row != 1 && a.warps_per_row != 2 && a.warps_per_row != 4)
    return bad("warps_per_row = " + std::to_string(a.warps_per_row) + " is not 0 (automatic), 1, 2 or 4");
  if (!a.maybe_expert_ids) {
    if (a.n_tokens < 1 || a.n_tokens > gemv_max_tokens)
      return bad("n_tokens = " + std::to_string(a.n_tokens) + " is outside 1.." + std::to_string(gemv_max_tokens) +
                 " (use launch::matmul for prompts)");
    return status::success();
  }
  if (a.n_pairs < 1 || a.n_pairs > 65535) return bad("n_pairs = " + std::to_string(a.n_pairs) + " is outside 1..65535");
  if (a.n_experts < 1) return bad("n_experts must be >= 1");
  if (a.x_group_div < 1) return bad("x_group_div must be >= 1");
  if (a.expert_stride_bytes != 0 && (a.expert_stride_bytes < a.rows * Format::row_bytes(a.cols) ||
                                     a.expert_stride_bytes % alignof(typename Format::block) != 0))
    return bad("expert_stride_bytes = " + std::to_string(a.expert_stride_bytes) +
               " is smaller than one expert's rows or not aligned to the block struct");
  if (!a.maybe_error_flag)
    return bad("expert mode needs maybe_error_flag (device-resident ids are checked on the device)");
  return status::success();
}

// The quantized activations of n_rows rows of `cols` inside a buffer laid out by quant::act16_bytes.
inline quant::act16_view act16_layout(const void* buffer, int64_t cols, int64_t n_rows) {
  const auto* b = static_cast<const uint8_t*>(buffer);
  return {reinterpret_cast<const int16_t*>(b),
          reinterpret_cast<const quant::act16_group*>(b + quant::act16_groups_offset(cols, n_rows))};
}

// Quantizes n_rows rows of fp32 activations x [n_rows][cols] (cols a multiple of 32, 16-byte
// aligned) into `out` (quant::act16_bytes(cols, n_rows) bytes, 16-byte aligned). Asynchronous.
template <int = 0>
inline status quantize_act16(const float* x, int64_t n_rows, int64_t cols, void* out, size_t out_bytes,
                             stream_t stream = nullptr) {
  auto bad = [](const std::string& m) { return error(status_code::invalid_argument, "quantize_act16: " + m); };
  if (n_rows < 0 || cols <= 0 || cols % quant::act16_group_elems != 0)
    return bad("n_rows = " + std::to_string(n_rows) + ", cols = " + std::to_string(cols) +
               ": need n_rows >= 0 and cols a positive multiple of 32");
  if (!x || !out) return bad("null x or out");
  if ((reinterpret_cast<uintptr_t>(x) | reinterpret_cast<uintptr_t>(out)) % 16 != 0)
    return bad("x or out is not 16-byte aligned");
  if (out_bytes < quant::act16_bytes(cols, n_rows))
    return bad("out_bytes = " + std::to_string(out_bytes) +
               " is below act16_bytes = " + std::to_string(quant::act16_bytes(cols, n_rows)));
  using kernel = kernels::act16_quantize_kernel<>;
  auto* b = static_cast<uint8_t*>(out);
  const kernel::params p{x, n_rows, cols, reinterpret_cast<int16_t*>(b),
                         reinterpret_cast<quant::act16_group*>(b + quant::act16_groups_offset(cols, n_rows))};
  return launch<kernel>(p, stream);
}

namespace detail {

// log2 of the warps that share a row: the smallest split that gives >= 4 blocks per SM, but no more
// warps per row than its items need (with one warp per row each worker has `trips` items).
template <class Kernel>
int gemv_log2_split(int64_t rows, int64_t cols, int n_groups, int log2_lanes, int forced_warps_per_row) {
  if (forced_warps_per_row > 0)  // a policy with fewer warps per block than asked shares what it has
    return std::min(std::countr_zero(unsigned(forced_warps_per_row)), Kernel::max_log2_split);
  const int64_t trips = (cols / Kernel::item_elems) >> log2_lanes;
  const int64_t target = 4 * int64_t(sm_count());
  int k = 0;
  for (; k < Kernel::max_log2_split && (int64_t(1) << k) < trips; ++k) {
    const int64_t rows_per_block = int64_t(Kernel::n_warps >> k) * (warp_size >> log2_lanes);
    if ((rows + rows_per_block - 1) / rows_per_block * n_groups >= target) break;
  }
  return k;
}

template <quant::weight_format Format, class Policy, int NTokens, gemv_epilogue Epilogue, bool Indexed, bool Act16,
          int LoadBytes = 16>
status run_gemv(const gemv_args<Format>& a, const quant::act16_view& x16, stream_t stream) {
  using kernel = kernels::gemv_kernel<Format, Policy, NTokens, Epilogue, Indexed, Act16, LoadBytes>;
  const int log2_lanes = kernel::log2_lanes_for(a.cols);
  const typename kernel::params p{
      a.w,
      a.maybe_w_up,
      a.x,
      x16,
      a.y,
      a.rows,
      a.cols,
      Indexed ? 1 : a.n_tokens,
      Indexed ? a.n_pairs : 1,
      log2_lanes,
      gemv_log2_split<kernel>(a.rows, a.cols, Indexed ? a.n_pairs : 1, log2_lanes, a.warps_per_row),
      a.maybe_expert_ids,
      a.n_experts,
      a.expert_stride_bytes ? a.expert_stride_bytes : a.rows * Format::row_bytes(a.cols),
      a.x_group_div,
      a.maybe_error_flag};
  return launch<kernel>(p, stream);
}

}  // namespace detail

// Host-side check of expert ids before an expert-mode launch: ok, or an error naming the first pair
// whose id is outside [0, n_experts).
inline status validate_expert_ids(std::span<const int32_t> ids, int32_t n_experts) {
  for (size_t p = 0; p < ids.size(); ++p)
    if (ids[p] < 0 || ids[p] >= n_experts)
      return error(status_code::invalid_argument, "gemv: expert id " + std::to_string(ids[p]) + " of pair " +
                                                      std::to_string(p) + " is outside [0, " +
                                                      std::to_string(n_experts) + ")");
  return status::success();
}

// y = W x (or y += W x, or y = silu(W_gate x) * (W_up x)) for a.n_tokens tokens or, in expert mode,
// for each (token, slot) pair with the expert its id names. Asynchronous on `stream`.
template <quant::weight_format Format, class Policy = ops::gemv_policy<Format>>
status gemv(const gemv_args<Format>& a, stream_t stream = nullptr) {
  Q35_TRY(validate(a));
  if (a.rows == 0) return status::success();
  // The integer path when the activations are (or can be) quantized and the shape tiles.
  quant::act16_view x16 = a.maybe_x16;
  if (x16.empty() && a.maybe_workspace && gemv_has_int_path(a)) {
    const int64_t n_x_rows =
        a.maybe_expert_ids ? (int64_t(a.n_pairs) + a.x_group_div - 1) / a.x_group_div : int64_t(a.n_tokens);
    Q35_TRY(quantize_act16(a.x, n_x_rows, a.cols, a.maybe_workspace, a.workspace_bytes, stream));
    x16 = act16_layout(a.maybe_workspace, a.cols, n_x_rows);
  }
  return dispatch<0, 1>(int(!x16.empty()), [&](auto path) -> status {
    constexpr bool act16 = decltype(path)::value == 1;
    if constexpr (act16 && !ops::has_dot16<Format>) {
      return status::success();  // unreachable: x16 is empty for formats without an integer path
    } else {
      return dispatch<0, 1, 2>(int(a.epilogue), [&](auto e) -> status {
        constexpr gemv_epilogue epilogue = gemv_epilogue(decltype(e)::value);
        // Q6_K's narrower items: one-token plain products, and SwiGLU in expert mode (its only item)
        constexpr bool narrow_items = act16 && ops::has_dot16_loads<Format, 8>;
        constexpr bool expert_narrow = narrow_items && epilogue == gemv_epilogue::swiglu;
        if constexpr (narrow_items) {
          if constexpr (expert_narrow) {
            if (a.maybe_expert_ids) return detail::run_gemv<Format, Policy, 1, epilogue, true, true, 8>(a, x16, stream);
          }
          const int load_bytes = gemv_int_load_bytes(a);
          if (load_bytes != 16 && !a.maybe_expert_ids)
            return dispatch<8, 4>(load_bytes, [&](auto l) -> status {
              return detail::run_gemv<Format, Policy, 1, epilogue, false, true, decltype(l)::value>(a, x16, stream);
            });
        }
        if constexpr (!expert_narrow) {
          if (a.maybe_expert_ids) return detail::run_gemv<Format, Policy, 1, epilogue, true, act16>(a, x16, stream);
        }
        // Token counts run in the smallest instance that holds them: 1, 4 or 8 accumulators per row.
        // (No 2-token instance: ptxas put 8 bytes of the Q4_0/Q8_0 2-token swiglu ones on the stack,
        // nvcc 13.0 sm_90; 2 tokens run in the 4-token instance, which exits its token loop early.)
        const int bucket = a.n_tokens <= 1 ? 1 : a.n_tokens <= 4 ? 4 : 8;
        return dispatch<1, 4, 8>(bucket, [&](auto n) -> status {
          return detail::run_gemv<Format, Policy, decltype(n)::value, epilogue, false, act16>(a, x16, stream);
        });
      });
    }
  });
}

// gemv<F> with its default policy for every supported format, compiled once per program under
// Q35_KERNELS_EXTERN / Q35_KERNELS_INSTANTIATE (see the end of launch/matmul.hpp).
#if defined(Q35_KERNELS_INSTANTIATE) || defined(Q35_KERNELS_EXTERN)
#if defined(Q35_KERNELS_INSTANTIATE)
#define Q35_GEMV_INSTANCE(F) \
  template status gemv<quant::F, ops::gemv_policy<quant::F>>(const gemv_args<quant::F>&, stream_t);
#else
#define Q35_GEMV_INSTANCE(F) \
  extern template status gemv<quant::F, ops::gemv_policy<quant::F>>(const gemv_args<quant::F>&, stream_t);
#endif
Q35_GEMV_INSTANCE(f32_format)
Q35_GEMV_INSTANCE(f16_format)
Q35_GEMV_INSTANCE(bf16_format)
Q35_GEMV_INSTANCE(q8_0_format)
Q35_GEMV_INSTANCE(q4_0_format)
Q35_GEMV_INSTANCE(q4_k_format)
Q35_GEMV_INSTANCE(q5_k_format)
Q35_GEMV_INSTANCE(q6_k_format)
#undef Q35_GEMV_INSTANCE
static_assert(quant::supported_formats::size == 8, "a new format needs its gemv instance above");
#endif

}  // namespace q35::launch
