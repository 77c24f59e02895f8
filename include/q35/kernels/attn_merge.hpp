// attn_merge_kernel: combines the split-KV partial results of attn_paged_kernel and applies the gate:
//   o = sum_i e^(lse_i - M) o_i / sum_i e^(lse_i - M),  out = o * sigmoid(gate)   (M = max_i lse_i)
// Thread-to-data mapping: one warp per (token, head) row, lane l taking dims l, l + 32, ... (head_dim <= 256).
#pragma once

#include <cmath>
#include <cstdint>

#include "q35/arch/math.hpp"
#include "q35/arch/thread.hpp"
#include "q35/core/config.hpp"
#include "q35/core/dim3.hpp"
#include "q35/core/vec.hpp"
#include "q35/ops/attention.hpp"
#include "q35/warp/reduce.hpp"

namespace q35::kernels {

struct attn_merge_kernel {
  static constexpr int threads = 128;
  static constexpr int rows_per_block = threads / warp_size;
  static constexpr int max_dims_per_lane = 8;  // head_dim <= 256

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
    for (int i = arch::lane_id(); i < p.n_splits; i += warp_size) mx = fmaxf(mx, p.part_lse[i * p.n_rows + row]);
    mx = warp::reduce_max(mx);
    // Splits in order; one with no keys (lse -inf: past its sequence's end) is skipped, its partial o
    // unread (it may be unwritten).
    float o[max_dims_per_lane] = {};
    float w_sum = 0.0f;
    for (int i = 0; i < p.n_splits; ++i) {
      const float lse = p.part_lse[i * p.n_rows + row];
      if (lse == -INFINITY) continue;
      const float w = ops::merge_weight(lse, mx);
      w_sum += w;
      const float* src = p.part_o + (i * p.n_rows + row) * p.head_dim;
      Q35_UNROLL
      for (int j = 0; j < max_dims_per_lane; ++j) {
        const int d = arch::lane_id() + j * warp_size;
        if (d < p.head_dim) o[j] += w * src[d];
      }
    }
    Q35_UNROLL
    for (int j = 0; j < max_dims_per_lane; ++j) {
      const int d = arch::lane_id() + j * warp_size;
      if (d >= p.head_dim) break;
      const float on = w_sum > 0.0f ? o[j] / w_sum : 0.0f;
      p.out[row * p.head_dim + d] = on * arch::sigmoid(p.qg[row * 2 * p.head_dim + p.head_dim + d]);
    }
  }
};

}  // namespace q35::kernels
