// ops::dot_unit / dot_dequantized: one 16-element unit of a weight row dotted with up to NTokens activation rows,
// fp32 accumulation; the inner step of every GEMV kernel (plain, fused, expert-indexed).
#pragma once

#include <cstdint>

#include "q35/arch/vector_load.hpp"
#include "q35/core/config.hpp"
#include "q35/quant/formats.hpp"

namespace q35::ops {

// acc[t] += sum_i w[i] * x[t * x_stride + i] for t < n_tokens: one dequantized 16-element unit
// dotted with up to NTokens activation rows; x (column 16u of token 0) is 16-byte aligned.
template <int NTokens>
Q35_DEVICE void dot_dequantized(const float (&w)[quant::unit_elems], const float* x, int64_t x_stride, int n_tokens,
                                float (&acc)[NTokens]) {
  Q35_UNROLL
  for (int t = 0; t < NTokens; ++t) {
    if (t < n_tokens) {
      const float* xt = x + t * x_stride;
      float s = acc[t];
      Q35_UNROLL
      for (int q = 0; q < quant::unit_elems / 4; ++q) {
        const vec<float, 4> v = arch::load_16(xt + 4 * q);
        // s += w . x over 4 elements
        s += w[4 * q] * v[0] + w[4 * q + 1] * v[1] + w[4 * q + 2] * v[2] + w[4 * q + 3] * v[3];
      }
      acc[t] = s;
    }
  }
}

// acc[t] += sum_i w[16u + i] * x[t * x_stride + i] for t < n_tokens; `row` is the row's first block
// (any memory), x points at column 16u of token 0 and is 16-byte aligned.
template <quant::weight_format Format, int NTokens>
Q35_DEVICE void dot_unit(const typename Format::block* row, int64_t u, const float* x, int64_t x_stride, int n_tokens,
                         float (&acc)[NTokens]) {
  float w[quant::unit_elems];
  quant::dequant_row_unit<Format>(row, u, w);
  dot_dequantized<NTokens>(w, x, x_stride, n_tokens, acc);
}

}  // namespace q35::ops
