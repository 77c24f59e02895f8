// gemm_kernel: the batched (prompt) path Y = X W^T for many tokens, W in any supported GGUF format,
// fp32 accumulation, the same epilogues as the GEMV. Each weight tile is read from global memory
// once per tile of tokens: it is dequantized into shared memory (quant::dequant_row_unit, the math
// the GEMV and dequant kernels share), then a register-tiled CUDA-core GEMM consumes it. Tensor
// cores come later.
//
// Thread mapping: a block owns 64 weight rows x 32 tokens; per 64-column K step thread t
// dequantizes unit t % 4 of row t / 4 and loads 8 x values, then computes 2 tokens x 4 rows
// (tokens 2 (t / 16) + i, rows 4 (t % 16) + j).
#pragma once

#include <cstdint>

#include "q35/arch/thread.hpp"
#include "q35/arch/vector_load.hpp"
#include "q35/core/dim3.hpp"
#include "q35/core/vec.hpp"
#include "q35/ops/epilogue.hpp"
#include "q35/ops/gemm_tile.hpp"
#include "q35/quant/formats.hpp"

namespace q35::kernels {

struct gemm_policy {
  static constexpr int threads = 256;
  static constexpr int tile_rows = 64;    // weight rows per block (BN)
  static constexpr int tile_tokens = 32;  // tokens per block (BM)
  static constexpr int tile_k = 64;       // columns per step (BK): 4 units per row
  static constexpr int rows_per_thread = 4, tokens_per_thread = 2;
};

template <quant::weight_format Format, ops::epilogue Epilogue, class Policy = gemm_policy>
struct gemm_kernel {
  using block = typename Format::block;
  static constexpr int n_mats = ops::epilogue_mats<Epilogue>;
  static constexpr int threads = Policy::threads;
  static constexpr int bn = Policy::tile_rows, bm = Policy::tile_tokens, bk = Policy::tile_k;
  static constexpr int tn = Policy::rows_per_thread, tm = Policy::tokens_per_thread;
  static constexpr int units_per_k = bk / quant::unit_elems;
  static_assert(bn * units_per_k == threads, "one weight unit per thread per K step");
  static_assert(bm * bk == threads * 8, "8 activations per thread per K step");
  static_assert((bn / tn) * (bm / tm) == threads, "every thread owns tm x tn outputs");

  struct params {
    const block* w;           // [rows][cols / block_elems] blocks (w_gate for swiglu)
    const block* maybe_w_up;  // swiglu: [rows][cols / block_elems], else null
    const float* x;           // [n_tokens][cols] row-major, 16-byte aligned
    float* y;                 // [n_tokens][rows] row-major
    int64_t rows, cols, n_tokens;
  };
  struct shared_storage {
    float w[n_mats][bn][bk + 1];  // dequantized weight tile, [row][k] (+1: no bank conflicts on k)
    float x[bm][bk + 1];          // activation tile, [token][k]
  };
  static dim3 grid(const params& p) {
    return dim3(unsigned(ceil_div<int64_t>(p.rows, bn)), unsigned(ceil_div<int64_t>(p.n_tokens, bm)));
  }

  Q35_DEVICE void operator()(const params& p, shared_storage& s) const {
    const int t = arch::thread_rank();
    const int64_t row0 = int64_t(arch::block_idx().x) * bn, tok0 = int64_t(arch::block_idx().y) * bm;
    const int64_t blocks_per_row = p.cols / Format::block_elems;
    const int ty = t / (bn / tn), tx = t % (bn / tn);
    float acc[n_mats][tm][tn] = {};

    for (int64_t k0 = 0; k0 < p.cols; k0 += bk) {
      // s.w[m][r][16 j + i] = W_m[row0 + r][k0 + 16 j + i], zero outside the matrix
      {
        const int r = t / units_per_k, j = t % units_per_k;
        const int64_t unit = k0 / quant::unit_elems + j;
        const bool inside = row0 + r < p.rows && (unit + 1) * quant::unit_elems <= p.cols;
        Q35_UNROLL
        for (int m = 0; m < n_mats; ++m)
          ops::stage_weight_unit<Format>(inside ? (m == 0 ? p.w : p.maybe_w_up) + (row0 + r) * blocks_per_row : nullptr,
                                         unit, j, s.w[m][r]);
      }
      // s.x[i][c] = x[tok0 + i][k0 + c], zero outside; 2 x 4 floats per thread
      Q35_UNROLL
      for (int h = 0; h < 2; ++h) {
        const int e = (t + h * threads) * 4, i = e / bk, c = e % bk;
        vec<float, 4> v{};
        if (tok0 + i < p.n_tokens && k0 + c < p.cols) v = arch::load_16(p.x + (tok0 + i) * p.cols + k0 + c);
        Q35_UNROLL
        for (int q = 0; q < 4; ++q) s.x[i][c + q] = v[q];
      }
      arch::sync_block();
      ops::tile_multiply_accumulate<bk>(s.x, s.w, ty, tx, acc);  // acc += x_tile W_tile^T
      arch::sync_block();                                        // the next step overwrites the tiles
    }

    Q35_UNROLL
    for (int i = 0; i < tm; ++i) {
      const int64_t tok = tok0 + ty * tm + i;
      Q35_UNROLL
      for (int j = 0; j < tn; ++j) {
        const int64_t row = row0 + tx * tn + j;
        if (tok < p.n_tokens && row < p.rows)
          ops::apply_epilogue<Epilogue>(p.y + tok * p.rows + row, acc[0][i][j], acc[n_mats - 1][i][j]);
      }
    }
  }
};

}  // namespace q35::kernels
