// ops::warp_row_dots: one warp dots up to NRows weight rows of any GGUF format (read straight from
// global memory, one 16-element unit per lane per row and step) with one fp32 activation row each:
// the inner step of the MoE expert kernels, whose rows change expert from block to block. The rows
// of one call are independent, so their loads are in flight together.
#pragma once

#include <cstdint>

#include "q35/arch/thread.hpp"
#include "q35/core/config.hpp"
#include "q35/ops/gemv_dot.hpp"
#include "q35/quant/formats.hpp"
#include "q35/warp/reduce.hpp"

namespace q35::ops {

// dot[m] = sum_c rows[m][c] * x[m][c] for m < n_rows (<= NRows; warp-uniform), c < 16 n_units, in
// fp32: lane l accumulates units l, l + 32, ... in order (16 products per unit), then a warp
// butterfly sums the lanes, so every lane returns the same totals and the order is fixed;
// dot[m] = 0 for m >= n_rows. Rows start at a block boundary; each x[m] is 16-byte aligned.
template <quant::weight_format Format, int NRows>
Q35_DEVICE void warp_row_dots(const typename Format::block* const (&rows)[NRows], const float* const (&x)[NRows],
                              int n_rows, int n_units, float (&dot)[NRows]) {
  float acc[NRows][1] = {};
  for (int u0 = 0; u0 < n_units; u0 += warp_size) {  // warp-uniform trip count
    const int u = u0 + arch::lane_id();
    if (u < n_units) {
      Q35_UNROLL
      for (int m = 0; m < NRows; ++m)
        if (m < n_rows) dot_unit<Format, 1>(rows[m], u, x[m] + int64_t(u) * quant::unit_elems, 0, 1, acc[m]);
    }
  }
  Q35_UNROLL
  for (int m = 0; m < NRows; ++m) dot[m] = warp::reduce_sum(acc[m][0]);
}

// Row r of the matrix that starts at `base` (bytes), rows of row_bytes bytes, as a block pointer.
template <quant::weight_format Format>
Q35_DEVICE const typename Format::block* row_at(const uint8_t* base, int64_t r, int64_t row_bytes) {
  return reinterpret_cast<const typename Format::block*>(base + r * row_bytes);
}

}  // namespace q35::ops
