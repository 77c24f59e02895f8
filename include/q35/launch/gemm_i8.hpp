// Host API of the int8 tensor-core prompt path (kernels/gemm_i8.hpp, act8x2_quantize.hpp,
// gemm_split_reduce.hpp):
//   quantize_act8x2(x, ...)   fp32 rows -> the split 16-bit activations the GEMM reads (1 launch)
//   gemm_i8<Format>(args)     Y = X W^T (+ epilogue) for a GGUF integer format          (1 launch;
//                             2 with split-K: gemm_split_reduce_kernel adds the splits)
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>

#include "q35/core/dispatch.hpp"
#include "q35/core/status.hpp"
#include "q35/kernels/act8x2_quantize.hpp"
#include "q35/kernels/gemm_i8.hpp"
#include "q35/kernels/gemm_split_reduce.hpp"
#include "q35/launch/launch.hpp"

namespace q35::launch {

// Formats the int8 GEMM takes (the GGUF integer quants).
template <class Format>
inline constexpr bool gemm_i8_supports = ops::has_i8_stage<Format>;

template <quant::weight_format Format>
struct gemm_i8_args {
  const typename Format::block* w = nullptr;           // [rows][cols]
  const typename Format::block* maybe_w_up = nullptr;  // swiglu: the up matrix (w is the gate)
  quant::act8x2_view x;                                // [n_tokens][cols] (quantize_act8x2)
  float* y = nullptr;                                  // [n_tokens][rows]
  int64_t rows = 0, cols = 0, n_tokens = 0;
  ops::epilogue epilogue = ops::epilogue::store;
  // Split-K scratch (gemm_i8_split_bytes; 16-byte aligned) or null. k_splits 0: the splits
  // gemm_i8_auto_splits chooses, when the workspace holds their partials (else one); >= 1: that many
  // (at most the K steps; tests and benchmarks), the workspace then required past one.
  void* maybe_workspace = nullptr;
  size_t workspace_bytes = 0;
  int k_splits = 0;
  // Tokens per block: 16, 32 or 64; 0: gemm_i8_tile_tokens(n_tokens). Tests and benchmarks may force it.
  int tile_tokens = 0;
};

// Token tile of a dense call of n_tokens tokens: the narrowest of 16, 32 and 64 that holds them all (one
// token tile), 64 past that. Each output is computed the same way in every tile (the same groups and
// splits in the same order; only how many tokens share a weight fragment differs), so a token's row
// does not depend on the tile either. Issued instructions per weight (Q4_K, sm_90, the hot loop of a
// 128-column step of the 4 warps, scripts/check_sass.py): 6.4 at 16, 10.2 at 32, 18.5 at 64 (per weight
// and token at a full tile: 0.40, 0.32, 0.29): a call of 9..32 tokens on the 64-token tile would issue
// 2-3x what it needs, and be issue-bound far below the bandwidth it could use.
inline int gemm_i8_tile_tokens(int64_t n_tokens) { return n_tokens <= 16 ? 16 : n_tokens <= 32 ? 32 : 64; }

// Split-K. The dense GEMM's grid is its token tiles x row tiles: a call of one token tile (9..64
// tokens: decode batches, short prompt chunks) on a matrix of few rows gives fewer blocks than SMs
// (9B: its K/V projections 16, the attention output and FFN down projections 64, on 132 SMs), and
// each block holds only its next K step's weights in flight (~4.6 KB of Q4_K; at ~224 registers two
// blocks fit an SM). Such calls split K into up to gemm_i8_max_splits ranges of at least
// gemm_i8_min_split_steps steps of 128 columns, for about two blocks per SM; each split writes fp32
// partial sums (splits x tokens x weight rows x 4 bytes, served from L2) and a second launch adds them
// in split order. The split count depends on the shape and the SM count, not on the tokens, so a
// token's row is the same in every call of 9..64 tokens (and, unsplit, in every call of 65 or more).
inline constexpr int gemm_i8_max_splits = 8;
// Calls of 1..this many tokens (one 64-token tile; the narrower tiles give the same bits) split K the
// same way, so a token's row is bit-identical in all of them: the reach of matmul's gemm_every_count.
inline constexpr int64_t gemm_i8_invariant_tokens = kernels::gemm_i8_policy<>::tile_tokens;
inline constexpr int gemm_i8_min_split_steps = 4;

// Splits of a dense call of `weight_rows` rows of weights (swiglu: gate and up rows) and `cols`
// columns at n_tokens tokens: 1 past one token tile.
inline int gemm_i8_auto_splits(int64_t weight_rows, int64_t cols, int64_t n_tokens) {
  using P = kernels::gemm_i8_policy<>;
  if (n_tokens > P::tile_tokens || weight_rows <= 0 || cols <= 0) return 1;
  const int64_t tiles = ceil_div<int64_t>(weight_rows, P::tile_rows);
  const int64_t want = ceil_div<int64_t>(2 * int64_t(sm_count()), tiles);
  const int64_t most =
      std::min<int64_t>(ceil_div<int64_t>(cols, P::tile_k) / gemm_i8_min_split_steps, gemm_i8_max_splits);
  return int(std::max<int64_t>(std::min(want, most), 1));
}

// Partial sums of a call split `splits` ways (0 when unsplit).
inline size_t gemm_i8_split_bytes(int64_t weight_rows, int64_t n_tokens, int splits) {
  return splits > 1 ? size_t(splits) * size_t(n_tokens) * size_t(weight_rows) * sizeof(float) : 0;
}

// Split-K scratch enough for the automatic splits of any dense call of 1..max_tokens tokens.
inline size_t gemm_i8_split_workspace_bytes(int64_t weight_rows, int64_t cols, int64_t max_tokens) {
  const int64_t n = std::min<int64_t>(max_tokens, kernels::gemm_i8_policy<>::tile_tokens);  // splits do not vary below
  return n > 0 ? gemm_i8_split_bytes(weight_rows, n, gemm_i8_auto_splits(weight_rows, cols, n)) : 0;
}

template <quant::weight_format Format>
requires gemm_i8_supports<Format> status validate(const gemm_i8_args<Format>& a) {
  const std::string what = std::string("gemm_i8 ") + Format::name + ": ";
  auto bad = [&](const std::string& m) { return error(status_code::invalid_argument, what + m); };
  if (a.rows < 0 || a.cols <= 0 || a.n_tokens < 0) return bad("rows and n_tokens must be >= 0, cols > 0");
  if (a.cols % Format::block_elems != 0 || a.cols % 32 != 0)
    return bad("cols = " + std::to_string(a.cols) + " is not a multiple of the block size " +
               std::to_string(Format::block_elems > 32 ? Format::block_elems : 32));
  using kernel = kernels::gemm_i8_kernel<Format, ops::epilogue::store>;
  if (ceil_div<int64_t>(a.rows, kernel::out_rows) > 65535)
    return bad("rows = " + std::to_string(a.rows) + " exceeds the grid limit");
  if (!a.w || a.x.empty() || !a.x.lo || !a.x.groups || !a.y) return bad("null w, x or y");
  if ((a.epilogue == ops::epilogue::swiglu) != (a.maybe_w_up != nullptr))
    return bad(a.maybe_w_up ? "maybe_w_up is given but the epilogue is not swiglu" : "swiglu needs maybe_w_up");
  if ((reinterpret_cast<uintptr_t>(a.x.hi) | reinterpret_cast<uintptr_t>(a.x.lo)) % 16 != 0 ||
      reinterpret_cast<uintptr_t>(a.x.groups) % 8 != 0)
    return bad("the activation planes are not 16-byte aligned (or their groups 8-byte aligned)");
  // Q4_K / Q5_K rows are read in 16-byte loads, the others in 4- and 2-byte loads
  constexpr size_t align = sizeof(typename Format::block) % 16 == 0 ? 16 : alignof(typename Format::block);
  if (reinterpret_cast<uintptr_t>(a.w) % align != 0 || reinterpret_cast<uintptr_t>(a.maybe_w_up) % align != 0)
    return bad("weights are not " + std::to_string(align) + "-byte aligned");
  if (a.k_splits < 0) return bad("k_splits = " + std::to_string(a.k_splits) + " is negative");
  if (a.tile_tokens != 0 && a.tile_tokens != 16 && a.tile_tokens != 32 && a.tile_tokens != 64)
    return bad("tile_tokens = " + std::to_string(a.tile_tokens) + " is not 0 (automatic), 16, 32 or 64");
  if (reinterpret_cast<uintptr_t>(a.maybe_workspace) % 16 != 0) return bad("maybe_workspace is not 16-byte aligned");
  return status::success();
}

namespace detail {

// One dense call on the token tile Bn (split-K as gemm_i8_auto_splits or the caller says).
template <quant::weight_format Format, ops::epilogue Epilogue, int Bn>
status gemm_i8_tile(const gemm_i8_args<Format>& a, stream_t stream) {
  using kernel = kernels::gemm_i8_kernel<Format, Epilogue, kernels::gemm_rows::dense, kernels::gemm_i8_policy<Bn>>;
  const int64_t weight_rows = a.rows * kernel::n_mats, steps = ceil_div<int64_t>(a.cols, kernel::bk);
  int64_t splits = a.k_splits > 0 ? a.k_splits : gemm_i8_auto_splits(weight_rows, a.cols, a.n_tokens);
  const int64_t per_split = ceil_div<int64_t>(steps, std::min(splits, steps));
  splits = ceil_div<int64_t>(steps, per_split);  // none empty
  const size_t need = gemm_i8_split_bytes(weight_rows, a.n_tokens, int(splits));
  if (splits > 1 && (!a.maybe_workspace || a.workspace_bytes < need)) {
    if (a.k_splits > 1)
      return error(status_code::invalid_argument,
                   std::string("gemm_i8 ") + Format::name + ": k_splits = " + std::to_string(a.k_splits) +
                       " needs a workspace of " + std::to_string(need) + " bytes (have " +
                       std::to_string(a.maybe_workspace ? a.workspace_bytes : 0) + ")");
    splits = 1;  // automatic: unsplit without room for the partials
  }
  typename kernel::params p{reinterpret_cast<const uint8_t*>(a.w),
                            reinterpret_cast<const uint8_t*>(a.maybe_w_up),
                            Format::row_bytes(a.cols),
                            a.x,
                            a.y,
                            a.rows,
                            a.cols,
                            a.n_tokens};
  if (splits == 1) return launch<kernel>(p, stream);
  p.steps_per_split = int(per_split), p.partials = static_cast<float*>(a.maybe_workspace);
  Q35_TRY(launch<kernel>(p, stream));
  using reduce = kernels::gemm_split_reduce_kernel<Epilogue>;
  return launch<reduce>(typename reduce::params{p.partials, a.y, a.rows, a.n_tokens, int(splits)}, stream);
}

}  // namespace detail

// Y = X W^T (+ epilogue); asynchronous on `stream`.
template <quant::weight_format Format>
requires gemm_i8_supports<Format> status gemm_i8(const gemm_i8_args<Format>& a, stream_t stream = nullptr) {
  Q35_TRY(validate(a));
  if (a.n_tokens == 0 || a.rows == 0) return status::success();
  const int tile = a.tile_tokens ? a.tile_tokens : gemm_i8_tile_tokens(a.n_tokens);
  return dispatch<0, 1, 2>(int(a.epilogue), [&](auto e) {
    return dispatch<16, 32, 64>(tile, [&](auto bn) {
      constexpr ops::epilogue epilogue = ops::epilogue(decltype(e)::value);
      return detail::gemm_i8_tile<Format, epilogue, decltype(bn)::value>(a, stream);
    });
  });
}

// Quantizes n_rows rows of fp32 x [n_rows][cols] (cols a multiple of 32, 16-byte aligned) into `out`
// (quant::act8x2_bytes(cols, n_rows) bytes, 16-byte aligned) and returns its view. Asynchronous.
template <int = 0>
inline status quantize_act8x2(const float* x, int64_t n_rows, int64_t cols, void* out, size_t out_bytes,
                              quant::act8x2_view& view, stream_t stream = nullptr) {
  auto bad = [](const std::string& m) { return error(status_code::invalid_argument, "quantize_act8x2: " + m); };
  if (n_rows < 0 || cols <= 0 || cols % quant::act16_group_elems != 0)
    return bad("n_rows = " + std::to_string(n_rows) + ", cols = " + std::to_string(cols) +
               ": need n_rows >= 0 and cols a positive multiple of 32");
  if (!x || !out) return bad("null x or out");
  if ((reinterpret_cast<uintptr_t>(x) | reinterpret_cast<uintptr_t>(out)) % 16 != 0)
    return bad("x or out is not 16-byte aligned");
  if (out_bytes < quant::act8x2_bytes(cols, n_rows))
    return bad("out_bytes = " + std::to_string(out_bytes) +
               " is below act8x2_bytes = " + std::to_string(quant::act8x2_bytes(cols, n_rows)));
  view = quant::act8x2_layout(out, cols, n_rows);
  using kernel = kernels::act8x2_quantize_kernel<>;
  return launch<kernel>(kernel::params{x, n_rows, cols, const_cast<int8_t*>(view.hi), const_cast<uint8_t*>(view.lo),
                                       const_cast<quant::act8x2_group*>(view.groups)},
                        stream);
}

}  // namespace q35::launch
