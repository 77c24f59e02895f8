// attn_merge_kernel: combines the split-KV partial results of attn_paged_kernel and applies the gate:
//   o = sum_i e^(lse_i - M) o_i / sum_i e^(lse_i - M),  out = o * sigmoid(gate)   (M = max_i lse_i)
// Thread-to-data mapping: one warp per (token, head) row, lane l taking dims l, l + 32, ...
#pragma once

#include <cmath>
#include <cstdint>

#include "q35/arch/math.hpp"
#include "q35/arch/thread.hpp"
#include "q35/core/config.hpp"
#include "q35/core/dim3.hpp"
#include "q35/core/vec.hpp"
#include "q35/ops/attention.hpp"

namespace q35::kernels {

struct attn_merge_kernel {
  static constexpr int threads = 128;
  static constexpr int rows_per_block = threads / warp_size;

  struct params {
    const float* part_o;    // [n_splits][n_rows][head_dim]
    const float* part_lse;  // [n_splits][n_rows]
    const float* qg;        // [n_rows][2 * head_dim]: the gate is the second half of each row
    float* out;             // [n_rows][head_dim]
    int64_t n_rows;         // n_tokens * n_heads
    int head_dim, n_splits;
  };
  struct shared_storage {};
  static dim3 grid(const params& p) { return dim3(unsigned(ceil_div<int64_t>(p.n_rows, rows_per_block))); }

  Q35_DEVICE void operator()(const params& p, shared_storage&) const {
    const int64_t row = int64_t(arch::block_idx().x) * rows_per_block + arch::warp_id();
    if (row >= p.n_rows) return;
    float mx = -INFINITY;
    for (int i = 0; i < p.n_splits; ++i) mx = fmaxf(mx, p.part_lse[i * p.n_rows + row]);
    for (int d = arch::lane_id(); d < p.head_dim; d += warp_size) {
      float w_sum = 0.0f, o = 0.0f;
      for (int i = 0; i < p.n_splits; ++i) {
        const float w = ops::merge_weight(p.part_lse[i * p.n_rows + row], mx);
        w_sum += w;
        o += w * p.part_o[(i * p.n_rows + row) * p.head_dim + d];
      }
      const float on = w_sum > 0.0f ? o / w_sum : 0.0f;
      p.out[row * p.head_dim + d] = on * arch::sigmoid(p.qg[row * 2 * p.head_dim + p.head_dim + d]);
    }
  }
};

}  // namespace q35::kernels
