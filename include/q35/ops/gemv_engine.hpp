// ops::gemv_engine: the weight-streaming loop of every decode product (gemv_kernel's plain, residual,
// SwiGLU and expert-indexed instances, and the router's logits). A worker (one lane) takes the work
// items first, first + stride, ... of one weight row straight from global memory into registers and
// accumulates their dot products with up to NTokens activation rows; the caller decides which
// workers share a row (lanes of a warp, warps of a block) and combines their sums with reduce_lanes
// and reduce_warps, which fix the summation order (bit-identical runs, no float atomics).
//
// Items: on the integer path (Act16) one ops::dot16<Format> item (whole blocks, >= 9 independent
// 16-byte loads issued before any is used); on the float path one 16-element unit
// (quant::dequant_row_unit, bit-exact with ggml), Unroll units loaded before any is used.
#pragma once

#include <cstdint>

#include "q35/arch/shuffle.hpp"
#include "q35/arch/thread.hpp"
#include "q35/core/config.hpp"
#include "q35/ops/gemv_dot.hpp"
#include "q35/ops/gemv_dot16.hpp"
#include "q35/quant/act16.hpp"
#include "q35/quant/formats.hpp"

namespace q35::ops {

// What the engine reads for one row: the activations of the float path (x) or of the integer path (x16).
struct gemv_input {
  const float* x;  // float path: [n_tok][cols], row-major, 16-byte aligned (at the row's first column)
  act16_in x16;    // integer path: the same rows quantized
  int64_t cols;
};

// LoadBytes: the integer path's item (ops::dot16<Format, LoadBytes>): 16 for every format; Q6_K also
// 8 or 4, for rows its 16-byte item does not tile.
template <quant::weight_format Format, int NTokens, int NMats, bool Act16, int Unroll = 1, int LoadBytes = 16>
struct gemv_engine {
  static_assert(!Act16 || has_dot16_loads<Format, LoadBytes>, "the integer path needs ops::dot16<Format, LoadBytes>");
  static_assert(Act16 || LoadBytes == 16, "the float path has no item variants");
  static_assert(Unroll >= 1 && (Unroll == 1 || !Act16), "integer items already keep >= 9 loads in flight");
  using acc_t = float[NMats][NTokens];

  // Elements of one work item.
  static constexpr int item_elems = [] {
    if constexpr (Act16) {
      return dot16<Format, LoadBytes>::item_elems;
    } else {
      return quant::unit_elems;
    }
  }();

  // acc[m][t] += W_m[row] . x_t over the items first, first + stride, ... < n_items = cols / item_elems,
  // for t < n_tok. Matrix m's row starts at w_row + m * up_offset bytes.
  static Q35_DEVICE void accumulate(const uint8_t* w_row, int64_t up_offset, const gemv_input& in, int first,
                                    int stride, int n_tok, acc_t& acc) {
    const int n_items = int(in.cols / item_elems);
    if constexpr (Act16) {
      using dot = dot16<Format, LoadBytes>;
      constexpr int item_groups = item_elems / quant::act16_group_elems;
      for (int it = first; it < n_items; it += stride) {
        Q35_UNROLL
        for (int m = 0; m < NMats; ++m)
          dot::template dot<NTokens>(w_row + m * up_offset + int64_t(it) * dot::item_bytes, in.x16,
                                     int64_t(it) * item_groups, n_tok, acc[m]);
      }
    } else {
      using block = typename Format::block;
      for (int it = first; it < n_items; it += stride * Unroll) {
        float w[Unroll][NMats][quant::unit_elems];
        Q35_UNROLL
        for (int u = 0; u < Unroll; ++u) {
          Q35_UNROLL
          for (int m = 0; m < NMats; ++m)
            if (u == 0 || it + u * stride < n_items)
              quant::dequant_row_unit<Format>(reinterpret_cast<const block*>(w_row + m * up_offset), it + u * stride,
                                              w[u][m]);
        }
        Q35_UNROLL
        for (int u = 0; u < Unroll; ++u) {
          const int unit = it + u * stride;
          if (u > 0 && unit >= n_items) break;
          Q35_UNROLL
          for (int m = 0; m < NMats; ++m)
            dot_dequantized<NTokens>(w[u][m], in.x + int64_t(unit) * quant::unit_elems, in.cols, n_tok, acc[m]);
        }
      }
    }
  }

  // Rows of BlocksPerRow blocks bundled 8 / BlocksPerRow to an integer-path item (dot16::dot_rows;
  // Q6_K rows of 512 or 1024 weights, which its 8-block item does not tile): acc[r][t] += W[row r] .
  // x_t over the whole rows, one worker per item (item: the first row's first byte, 16-byte aligned).
  template <int BlocksPerRow>
  static Q35_DEVICE void accumulate_rows(const uint8_t* item, const gemv_input& in, int n_tok,
                                         float (&acc)[8 / BlocksPerRow][NTokens]) {
    static_assert(Act16 && NMats == 1, "row bundles: the integer path, one matrix");
    dot16<Format>::template dot_rows<BlocksPerRow, NTokens>(item, in.x16, 0, n_tok, acc);
  }

  // Every lane of each aligned group of `lanes` (a power of two <= 32) lanes receives the group's
  // total, summed by an xor tree (the same order on every run).
  static Q35_DEVICE void reduce_lanes(int lanes, acc_t& acc) {
    for (int o = lanes >> 1; o > 0; o >>= 1) {
      Q35_UNROLL
      for (int m = 0; m < NMats; ++m) {
        Q35_UNROLL
        for (int t = 0; t < NTokens; ++t) acc[m][t] += arch::shfl_xor(acc[m][t], o);
      }
    }
  }

  // Shared memory of reduce_warps for blocks of Warps warps.
  template <int Warps>
  struct warp_partials {
    float v[Warps][warp_size][NMats][NTokens];
  };

  // Split-K across warps: warps w, w + 1, ..., w + n_slices - 1 (w a multiple of n_slices) hold
  // partial sums of the same rows in the same lanes; slice 0 (w itself) receives
  // acc_0 + acc_1 + ... + acc_{n_slices-1}, in that order. Called by every thread of the block
  // (it has a barrier) with the same n_slices; a no-op for n_slices == 1.
  template <int Warps>
  static Q35_DEVICE void reduce_warps(int n_slices, warp_partials<Warps>& s, acc_t& acc) {
    if (n_slices == 1) return;
    const int warp = arch::warp_id(), lane = arch::lane_id(), slice = warp % n_slices;
    if (slice != 0) {
      Q35_UNROLL
      for (int m = 0; m < NMats; ++m) {
        Q35_UNROLL
        for (int t = 0; t < NTokens; ++t) s.v[warp][lane][m][t] = acc[m][t];
      }
    }
    arch::sync_block();
    if (slice == 0) {
      for (int q = 1; q < n_slices; ++q) {
        Q35_UNROLL
        for (int m = 0; m < NMats; ++m) {
          Q35_UNROLL
          for (int t = 0; t < NTokens; ++t) acc[m][t] += s.v[warp + q][lane][m][t];
        }
      }
    }
  }
};

}  // namespace q35::ops
