// ops::warp_dot_tokens: one warp computes w . x_t for one weight row and up to Tokens activation
// rows: the router GEMV step (router logits and the shared-expert gate logit).
#pragma once

#include <cstdint>

#include "q35/arch/thread.hpp"
#include "q35/arch/vector_load.hpp"
#include "q35/core/config.hpp"
#include "q35/ops/dense_row.hpp"
#include "q35/ops/quant_row.hpp"
#include "q35/warp/reduce.hpp"

namespace q35::ops {

// dot[t] = sum_c w[c] * x[t * n_embd + c] over this warp's slice of the columns, for t < n_tokens
// (<= Tokens); dot[t] for t >= n_tokens is 0. n_slices warps cover a row together (split-k): lane l
// of the warp with slice s reads the columns [(s * 32 + l) * V + i * n_slices * 32 * V, +V), with
// V = Row::elems_per_load. Every lane receives the same totals (butterfly reduction). Each load is
// 16 bytes and the warp's loads of one step are contiguous; Unroll steps are loaded before any is used, so each lane
// keeps Unroll weight loads in flight (at batch 1 the GEMV is latency-bound without them). n_embd must be a multiple of
// V (and of 4, for x), and w and x 16-byte aligned.
template <int Tokens, int Unroll, class WeightT, class Row = weight_row<WeightT>>
Q35_DEVICE void warp_dot_tokens(const WeightT* w,  // [n_embd]
                                const float* x,    // [n_tokens, n_embd], row-major
                                int n_embd, int n_tokens, int slice, int n_slices, float (&dot)[Tokens]) {
  constexpr int v = Row::elems_per_load;
  static_assert(v % 4 == 0, "a weight load must cover whole 16-byte loads of x");
  const int64_t step = int64_t(warp_size) * v * n_slices;
  const int lane = arch::lane_id();
  float acc[Tokens];
  Q35_UNROLL
  for (int t = 0; t < Tokens; ++t) acc[t] = 0.0f;

  for (int64_t c0 = (int64_t(slice) * warp_size + lane) * v; c0 < n_embd; c0 += step * Unroll) {
    float wv[Unroll][v];
    Q35_UNROLL
    for (int u = 0; u < Unroll; ++u)
      if (c0 + u * step < n_embd) Row::load(w, c0 + u * step, wv[u]);
    Q35_UNROLL
    for (int u = 0; u < Unroll; ++u) {
      const int64_t c = c0 + u * step;
      if (c >= n_embd) break;
      Q35_UNROLL
      for (int t = 0; t < Tokens; ++t) {
        if (t >= n_tokens) break;  // the same for every lane of the warp
        const float* xt = x + int64_t(t) * n_embd + c;
        Q35_UNROLL
        for (int q = 0; q < v / 4; ++q) {
          const vec16<float> xv = arch::load_16(xt + 4 * q);
          // acc_t += w[c + i] * x_t[c + i]
          Q35_UNROLL
          for (int i = 0; i < 4; ++i) acc[t] += wv[u][4 * q + i] * xv[i];
        }
      }
    }
  }
  Q35_UNROLL
  for (int t = 0; t < Tokens; ++t) dot[t] = warp::reduce_sum(acc[t]);
}

}  // namespace q35::ops
