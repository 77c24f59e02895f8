// The block-tile steps of the fp32 tiled GEMM of kernels/moe_grouped.hpp (the experts over their
// grouped tokens; the dense projections run on tensor cores): stage one 16-element weight
// unit of a row into the shared weight tile, and the per-thread register tile's multiply-accumulate
// over one K step. Each kernel keeps its own indexing (which rows, which activation rows).
#pragma once

#include <cstdint>

#include "q35/core/config.hpp"
#include "q35/quant/formats.hpp"

namespace q35::ops {

// tile_row[16 j + i] = element 16 (unit) + i of the weight row (dequantized bit-exact), or 0 for a
// row or unit outside the matrix (maybe_row null).
template <quant::weight_format Format, int RowLen>
Q35_DEVICE void stage_weight_unit(const typename Format::block* maybe_row, int64_t unit, int j,
                                  float (&tile_row)[RowLen]) {
  static_assert(RowLen >= quant::unit_elems, "a tile row holds whole units");
  float w[quant::unit_elems];
  if (maybe_row) {
    quant::dequant_row_unit<Format>(maybe_row, unit, w);
  } else {
    Q35_UNROLL
    for (int i = 0; i < quant::unit_elems; ++i) w[i] = 0.0f;
  }
  Q35_UNROLL
  for (int i = 0; i < quant::unit_elems; ++i) tile_row[quant::unit_elems * j + i] = w[i];
}

// acc[m][i][j] += sum_{c < BK} x[ty TM + i][c] * w[m][tx TN + j][c]: the thread's TM x TN outputs of
// each of the NMats matrices, c ascending (the fp32 summation order the references bound).
template <int BK, int TM, int TN, int NMats, int BM, int BN, int RowLen>
Q35_DEVICE void tile_multiply_accumulate(const float (&x)[BM][RowLen], const float (&w)[NMats][BN][RowLen], int ty,
                                         int tx, float (&acc)[NMats][TM][TN]) {
  static_assert(BK <= RowLen, "the tiles hold BK columns");
  for (int c = 0; c < BK; ++c) {
    float a[TM];
    Q35_UNROLL
    for (int i = 0; i < TM; ++i) a[i] = x[ty * TM + i][c];
    Q35_UNROLL
    for (int m = 0; m < NMats; ++m) {
      Q35_UNROLL
      for (int j = 0; j < TN; ++j) {
        const float b = w[m][tx * TN + j][c];
        Q35_UNROLL
        for (int i = 0; i < TM; ++i) acc[m][i][j] += a[i] * b;
      }
    }
  }
}

}  // namespace q35::ops
