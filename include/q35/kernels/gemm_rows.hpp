// Which activation rows a tensor-core GEMM block multiplies and where its outputs go: the dense
// prompt GEMM (token tile i = tokens [i T, i T + T)) or the MoE grouped GEMM over the pairs that
// kernels/moe_group.hpp grouped by expert (work tile i of expert e = sorted pairs
// offsets[e] + (i - tile_starts[e]) T .. , at most T of them, all of expert e, weights at
// w + e * expert_stride_bytes; a call over a window of experts [b, end) runs only their tiles, tile i
// being tile tile_starts[b] + i of the whole grouping and expert e's weights at
// w + (e - b) * expert_stride_bytes, or at w + maybe_expert_at[e] when the call says where each expert
// is: a staged window of an indexed layer, whose experts in device slots are read in place). The kernels (gemm_i8.hpp,
// gemm_mma_float.hpp) resolve their block's tile once and then read x rows and write y rows through it, so the dense
// and grouped forms run the same tile code.
#pragma once

#include <cstdint>

#include "q35/core/config.hpp"
#include "q35/kernels/moe_group.hpp"

namespace q35::kernels {

enum class gemm_rows {
  dense,        // tile token i: x row first + i -> y row first + i
  moe_gate_up,  // sorted pair s = first + i: x row sorted_pairs[s] / k (its token) -> y row s (sorted order)
  moe_down,     // sorted pair s = first + i: x row s (sorted order) -> y row sorted_pairs[s] (pair order)
};

// The grouping a grouped GEMM runs over (launch::moe_group's outputs, device memory).
struct gemm_groups {
  const int32_t* sorted_pairs = nullptr;  // [n_pairs]
  const int32_t* offsets = nullptr;       // [n_experts + 1]
  const int32_t* tile_starts = nullptr;   // [n_experts + 1], tiles of moe_group_tile pairs
  int64_t expert_stride_bytes = 0;        // expert e's matrices start e * this after expert 0's
  int k = 1;                              // pairs per token (moe_gate_up: token = pair / k)
  int n_experts = 0;
  // The window of experts this call runs, [expert_begin, expert_end) (expert_end -1: n_experts); w is
  // expert_begin's matrices (a staging area holding the window, launch::moe_ffn).
  int expert_begin = 0, expert_end = -1;
  // [n_experts] or null: expert e's matrices start maybe_expert_at[e] bytes after w (may be negative;
  // read only for the window's experts with pairs) instead of (e - expert_begin) * expert_stride_bytes
  const int64_t* maybe_expert_at = nullptr;
  int32_t max_tiles = 0;  // the grid's tile count: an upper bound of the window's tiles
};

// One block's tile of tokens (or sorted pairs).
struct gemm_tile {
  int64_t first = 0;           // first token, or first sorted index of the expert's tile
  int n = 0;                   // tokens in the tile (0: the block has nothing to do)
  int64_t w_offset_bytes = 0;  // where the tile's weights start after the matrices' base
};

template <gemm_rows Rows>
inline constexpr bool gemm_rows_grouped = Rows != gemm_rows::dense;

// Tile `tile` of TileTokens tokens: dense over n_tokens, grouped over g (TileTokens must then be
// moe_group_tile, the size launch::moe_group counted the tiles in).
template <gemm_rows Rows, int TileTokens>
Q35_DEVICE gemm_tile resolve_gemm_tile(const gemm_groups& g, int64_t n_tokens, int64_t tile) {
  gemm_tile r;
  if constexpr (Rows == gemm_rows::dense) {
    r.first = tile * TileTokens;
    const int64_t left = n_tokens - r.first;
    r.n = int(left < TileTokens ? left : TileTokens);
  } else {
    static_assert(TileTokens == moe_group_tile, "grouped tiles are counted in moe_group_tile pairs");
    const int begin = g.expert_begin, end = g.expert_end < 0 ? g.n_experts : g.expert_end;
    tile += g.tile_starts[begin];
    if (tile >= g.tile_starts[end]) return r;  // more tiles launched than needed
    // e = the last expert with tile_starts[e] <= tile (empty experts share their successor's start)
    int lo = begin, hi = end - 1;
    while (lo < hi) {
      const int mid = (lo + hi + 1) / 2;
      if (g.tile_starts[mid] <= tile)
        lo = mid;
      else
        hi = mid - 1;
    }
    r.first = g.offsets[lo] + (tile - g.tile_starts[lo]) * TileTokens;
    const int64_t left = g.offsets[lo + 1] - r.first;
    r.n = int(left < TileTokens ? left : TileTokens);
    r.w_offset_bytes = g.maybe_expert_at ? g.maybe_expert_at[lo] : int64_t(lo - begin) * g.expert_stride_bytes;
  }
  return r;
}

// The x row of tile token i (< t.n).
template <gemm_rows Rows>
Q35_DEVICE int64_t gemm_x_row(const gemm_groups& g, const gemm_tile& t, int i) {
  if constexpr (Rows == gemm_rows::moe_gate_up) return g.sorted_pairs[t.first + i] / g.k;
  return t.first + i;
}

// The y row of tile token i (< t.n).
template <gemm_rows Rows>
Q35_DEVICE int64_t gemm_y_row(const gemm_groups& g, const gemm_tile& t, int i) {
  if constexpr (Rows == gemm_rows::moe_down) return g.sorted_pairs[t.first + i];
  return t.first + i;
}

}  // namespace q35::kernels
