// The MoE prefill kernels: a grouped GEMM that runs each expert over its pairs (grouped by
// kernels/moe_group.hpp), and the combination back to token order.
//
// moe_grouped_kernel: block (row tile, work tile) computes 64 weight rows x 32 sorted pairs of one
// expert; the work tiles of expert e are tile_starts[e] .. tile_starts[e + 1] - 1 (a binary search
// finds e). Per 64-column step thread t dequantizes unit t % 4 of row t / 4 of the expert's matrix
// into shared memory and loads 8 gathered activations, then computes 2 pairs x 4 rows; each output
// is one serial fp32 chain over all columns.
#pragma once

#include <cmath>
#include <cstdint>

#include "q35/arch/math.hpp"
#include "q35/arch/thread.hpp"
#include "q35/arch/vector_load.hpp"
#include "q35/core/dim3.hpp"
#include "q35/core/vec.hpp"
#include "q35/kernels/moe_group.hpp"
#include "q35/ops/gemm_tile.hpp"
#include "q35/quant/formats.hpp"

namespace q35::kernels {

enum class moe_grouped_mode {
  gate_up,  // y[i] = silu(W_gate[e] x[pair_i / k]) * (W_up[e] x[pair_i / k]), i in sorted order
  down,     // y[pair_i] = W_down[e] x[i]: x in sorted order, y back in pair order
};

template <quant::weight_format Format, moe_grouped_mode Mode>
struct moe_grouped_kernel {
  using block = typename Format::block;
  static constexpr int n_mats = Mode == moe_grouped_mode::gate_up ? 2 : 1;
  static constexpr int threads = 256;
  // Up to 128 registers: without a minimum ptxas trimmed the float-format gate_up instances to 64
  // and spilled 4 bytes (nvcc 13.0).
  static constexpr int min_blocks_per_sm = 2;
  static constexpr int bn = 64, bm = moe_group_tile, bk = 64;  // rows, pairs, columns per tile
  static constexpr int tn = 4, tm = 2;                         // rows, pairs per thread
  static constexpr int units_per_k = bk / quant::unit_elems;
  static_assert(bn * units_per_k == threads && bm * bk == threads * 8 && (bn / tn) * (bm / tm) == threads);

  struct params {
    const uint8_t* w;         // expert e's [rows][cols] starts at w + e * expert_stride_bytes (gate)
    int64_t up_offset_bytes;  // gate_up: the up rows start this many bytes after the gate rows
    int64_t expert_stride_bytes;
    const float* x;               // gate_up: [n_tokens][cols]; down: [n_pairs][cols] in sorted order
    float* y;                     // gate_up: [n_pairs][rows] in sorted order; down: [n_pairs][rows] in pair order
    const int32_t* sorted_pairs;  // [n_pairs]
    const int32_t* offsets;       // [n_experts + 1]
    const int32_t* tile_starts;   // [n_experts + 1]
    int64_t rows, cols;
    int k, n_experts;
    int32_t max_tiles;  // grid.y: an upper bound of tile_starts[n_experts]
  };
  struct shared_storage {
    float w[n_mats][bn][bk + 1];  // dequantized weight tile, [row][col] (+1: no bank conflicts)
    float x[bm][bk + 1];          // gathered activation tile, [pair][col]
  };
  static dim3 grid(const params& p) { return dim3(unsigned(ceil_div<int64_t>(p.rows, bn)), unsigned(p.max_tiles)); }

  Q35_DEVICE void operator()(const params& p, shared_storage& s) const {
    const int t = arch::thread_rank();
    const int32_t tile = int32_t(arch::block_idx().y);
    if (tile >= p.tile_starts[p.n_experts]) return;  // the whole block: more tiles launched than needed
    // e = the last expert with tile_starts[e] <= tile (empty experts share their successor's start)
    int lo = 0, hi = p.n_experts - 1;
    while (lo < hi) {
      const int mid = (lo + hi + 1) / 2;
      if (p.tile_starts[mid] <= tile)
        lo = mid;
      else
        hi = mid - 1;
    }
    const int e = lo;
    const int32_t i0 = p.offsets[e] + (tile - p.tile_starts[e]) * bm;  // first sorted index of the tile
    const int32_t i_end = p.offsets[e + 1];
    const int64_t row0 = int64_t(arch::block_idx().x) * bn;
    const uint8_t* w_e = p.w + int64_t(e) * p.expert_stride_bytes;
    const int64_t row_bytes = Format::row_bytes(p.cols);
    const int ty = t / (bn / tn), tx = t % (bn / tn);
    float acc[n_mats][tm][tn] = {};

    for (int64_t k0 = 0; k0 < p.cols; k0 += bk) {
      // s.w[m][r][16 j + i] = W_m[e][row0 + r][k0 + 16 j + i], zero outside the matrix
      {
        const int r = t / units_per_k, j = t % units_per_k;
        const int64_t unit = k0 / quant::unit_elems + j;
        const bool inside = row0 + r < p.rows && (unit + 1) * quant::unit_elems <= p.cols;
        Q35_UNROLL
        for (int m = 0; m < n_mats; ++m) {
          const uint8_t* row = w_e + (m == 1 ? p.up_offset_bytes : 0) + (row0 + r) * row_bytes;
          ops::stage_weight_unit<Format>(inside ? reinterpret_cast<const block*>(row) : nullptr, unit, j, s.w[m][r]);
        }
      }
      // s.x[i][c] = x row of sorted pair i0 + i, columns k0 + c; zero outside; 2 x 4 floats per thread
      Q35_UNROLL
      for (int h = 0; h < 2; ++h) {
        const int el = (t + h * threads) * 4, i = el / bk, c = el % bk;
        vec<float, 4> v{};
        if (i0 + i < i_end && k0 + c < p.cols) {
          const int64_t src = Mode == moe_grouped_mode::gate_up ? p.sorted_pairs[i0 + i] / p.k : int64_t(i0 + i);
          v = arch::load_16(p.x + src * p.cols + k0 + c);
        }
        Q35_UNROLL
        for (int q = 0; q < 4; ++q) s.x[i][c + q] = v[q];
      }
      arch::sync_block();
      ops::tile_multiply_accumulate<bk>(s.x, s.w, ty, tx, acc);  // acc += x_tile W_tile^T
      arch::sync_block();                                        // the next step overwrites the tiles
    }

    Q35_UNROLL
    for (int i = 0; i < tm; ++i) {
      const int32_t si = i0 + ty * tm + i;
      if (si >= i_end) continue;
      const int64_t out_row = Mode == moe_grouped_mode::gate_up ? int64_t(si) : int64_t(p.sorted_pairs[si]);
      Q35_UNROLL
      for (int j = 0; j < tn; ++j) {
        const int64_t row = row0 + tx * tn + j;
        if (row >= p.rows) continue;
        // gate_up: y = silu(gate . x) * (up . x); down: y = W x
        p.y[out_row * p.rows + row] =
            Mode == moe_grouped_mode::gate_up ? arch::silu(acc[0][i][j]) * acc[n_mats - 1][i][j] : acc[0][i][j];
      }
    }
  }
};

// h[t][c] += sum_{j < k} w[t, j] y[t k + j][c] + g[t] s[t][c], in that order; NaN for a token with
// an invalid expert id (its pair was in no group). Thread mapping: block (t, column tile), one column per thread.
struct moe_combine_kernel {
  static constexpr int threads = 256;
  struct params {
    const float* y;              // [n_tokens * k][n_embd] expert outputs in pair order
    const int32_t* ids;          // [n_tokens][k]
    const float* weights;        // [n_tokens][k]
    const float* maybe_sh_y;     // [n_tokens][n_embd] shared-expert output, or null
    const float* maybe_sh_gate;  // [n_tokens] with maybe_sh_y
    float* h;                    // [n_tokens][n_embd]
    int64_t n_tokens;
    int k, n_experts, n_embd;
  };
  struct shared_storage {};
  static dim3 grid(const params& p) { return dim3(unsigned(p.n_tokens), unsigned(ceil_div(p.n_embd, threads))); }
  Q35_DEVICE void operator()(const params& p, shared_storage&) const {
    const int64_t t = int64_t(arch::block_idx().x);
    const int c = int(arch::block_idx().y) * threads + arch::thread_rank();
    if (c >= p.n_embd) return;
    float total = 0.0f;
    bool bad = false;
    for (int j = 0; j < p.k; ++j) {
      const int64_t pair = t * p.k + j;
      const int32_t e = p.ids[pair];
      if (e < 0 || e >= p.n_experts) {
        bad = true;
        continue;
      }
      // total += w_j * y_j
      total += p.weights[pair] * p.y[pair * p.n_embd + c];
    }
    // total += g * s
    if (p.maybe_sh_y) total += p.maybe_sh_gate[t] * p.maybe_sh_y[t * p.n_embd + c];
    float* out = p.h + t * p.n_embd + c;
    *out = bad ? NAN : *out + total;
  }
};

}  // namespace q35::kernels
