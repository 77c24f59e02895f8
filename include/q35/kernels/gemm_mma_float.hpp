// gemm_mma_float_kernel: the batched (prompt) path Y = X W^T for F32, F16 and BF16 weights on tensor
// cores (mma.sync m16n8k16, fp32 accumulators) with fp32-grade results: each fp32 activation (and an
// F32 weight) is split into 16-bit parts whose sum reproduces it, and the part products are summed.
//
// Splits (u = 2^-23 covers the tensor cores' truncating fp32 adds; the sim rounds to nearest):
//   F16  W exact in f16. Per token and 32-column K step, xs = x * s with s = 2^(14 - e), e = the
//        exponent of the step's max |x| clamped to [-100, 127] (exact: a power of two), so |xs| < 2^15
//        (no f16 overflow, W xs products < 2^31). hi = f16(xs), lo = f16(xs - hi) (the difference is
//        exact, Sterbenz). hi keeps 11 bits, xs - hi has <= 13 and lo keeps 11 of them:
//          |xs - hi - lo| <= max(2^-22 |xs|, 2^-25)  ->  |x - (hi + lo) / s| <= 2^-22 |x| + 2^(e - 39).
//        The step's two mma (W hi, W lo) accumulate into a fresh fp32 tile that is added to the total
//        as acc += 2^(e - 14) * tile (exact product up to fp32 underflow, 2^-149).
//   BF16 W exact in bf16. x = x0 + x1 + x2, x_i = bf16(x - x0 - ... - x_(i-1)): every residual is
//        exact in fp32; x has 24 bits, r1 = x - x0 <= 16 and r2 <= 8, so x2 = r2 exactly and the split
//        is exact for |x| >= 2^-110 (else off by <= 2^-134, bf16's subnormal half-ulp). 3 mma.
//        (2 parts would leave |x - x0 - x1| <= 2^-16 |x|, the GEMV's 16-bit activation error.)
//   F32  W and x both split in 3 bf16 parts as above (W while staging into shared memory); the 6
//        products w_i x_j with i + j <= 2 are summed. Since |w_1| <= 2^-8 |w|, |w_2| <= 2^-16 |w| (same
//        for x), the dropped w1 x2 + w2 x1 + w2 x2 are <= 2^-23 (1 + 2^-9) |w x|, plus the subnormal
//        floors 2^-134 (|w| + |x|).
// Accumulation: every mma is d = c + sum of 16 exact products with |err| <= 17 u (|c| + sum |p|)
// (tests/arch/test_mma.cpp; the sim: 17 2^-24 sum |p| + 2^-24 |c|); chained over the K steps this gives the per-output
// bound that tests/kernels/test_gemm_mma_float.cpp evaluates along the kernel's order. Values beyond bf16's largest
// finite (|x| > (2 - 2^-8) 2^127) overflow the hi part; NaN propagates (a NaN or inf part zeroes the later parts, so
// inf stays inf).
//
// Thread mapping: a block of 4 warps owns BN weight rows x 32 tokens (or 32 sorted pairs of one
// expert: the MoE grouped GEMM, kernels/gemm_rows.hpp) (BN = 128 for F16/BF16: warp w
// computes rows 32 w .. +32 x all 32 tokens as 2 x 4 m16n8 tiles; BN = 64 for F32: rows 32 (w % 2),
// tokens 16 (w / 2) .. +16, 2 x 2 tiles; A = W rows, B = X^T). Staging per 32-column K step: thread t
// copies the 16-byte chunks c = t + 128 h of the [BN][32] weight tile (row c / 4,
// columns 8 (c % 4)) and splits the 8 activations of token t / 4, columns 8 (t % 4).
// Pipeline: two shared stages; W of step s + 1 is in flight (cp.async; F32: in registers) and X of
// step s + 1 in registers while step s multiplies; one barrier per step. cols is any multiple of 16
// (validate()): the last step's missing 16 columns are zero-filled. Shared memory (2 stages):
// F16 30976 / 51456 B (one matrix / swiglu), BF16 36096 / 56576 B, F32 46336 / 77056 B.
// Shared rows are padded to 40 elements (80 bytes): the 8 rows of one ldmatrix phase start at
// banks 20 r mod 32 = {0, 20, 8, 28, 16, 4, 24, 12}, each 16-byte row on its own 4 banks.
#pragma once

#include <cstdint>
#include <type_traits>

#include "q35/arch/cp_async.hpp"
#include "q35/arch/half_bits.hpp"
#include "q35/arch/ldmatrix.hpp"
#include "q35/arch/mma.hpp"
#include "q35/arch/shuffle.hpp"
#include "q35/arch/thread.hpp"
#include "q35/arch/vector_load.hpp"
#include "q35/core/dim3.hpp"
#include "q35/core/numeric.hpp"
#include "q35/core/vec.hpp"
#include "q35/kernels/gemm_rows.hpp"
#include "q35/ops/epilogue.hpp"
#include "q35/ops/float_split.hpp"
#include "q35/quant/formats.hpp"

namespace q35::kernels {

// How each float weight format is split (see the file header).
template <class Format>
struct mma_float_split;
template <>
struct mma_float_split<quant::f16_format> {
  using part = half;
  static constexpr int w_parts = 1, x_parts = 2;
  static constexpr bool scaled = true;  // per token and K step power-of-two scale of x
};
template <>
struct mma_float_split<quant::bf16_format> {
  using part = bf16;
  static constexpr int w_parts = 1, x_parts = 3;
  static constexpr bool scaled = false;
};
template <>
struct mma_float_split<quant::f32_format> {
  using part = bf16;
  static constexpr int w_parts = 3, x_parts = 3;
  static constexpr bool scaled = false;
};

template <class Format>
struct gemm_mma_float_policy {
  static constexpr int threads = 128;
  // weight rows per block: 128 (4 x 1 warps of 32 x 32) halves the staging and split work per mma;
  // F32 keeps 64 (2 x 2 warps of 32 x 16), its swiglu instance needs 221 registers already
  static constexpr int tile_rows = Format::id == quant::type_id::f32 ? 64 : 128;
  static constexpr int tile_tokens = 32;  // tokens per block
  static constexpr int tile_k = 32;       // columns per K step
};

template <class Format, ops::epilogue Epilogue, gemm_rows Rows = gemm_rows::dense,
          class Policy = gemm_mma_float_policy<Format>>
struct gemm_mma_float_kernel {
  using split = mma_float_split<Format>;
  using part = typename split::part;
  using block = typename Format::block;
  static constexpr int n_mats = ops::epilogue_mats<Epilogue>;
  static constexpr int threads = Policy::threads;
  // Without a minimum ptxas (nvcc 13) capped the swiglu and F32 instances at 96-128 registers and
  // spilled 4-48 bytes (so did a minimum of 4, 128 registers, for F16); 3 blocks (168 registers) suffice
  // for one matrix, swiglu's two take 2 (255).
  static constexpr int min_blocks_per_sm = ops::epilogue_mats<Epilogue> == 2 ? 2 : 3;
  static constexpr int bn = Policy::tile_rows, bm = Policy::tile_tokens, bk = Policy::tile_k;
  static constexpr int w_parts = split::w_parts, x_parts = split::x_parts;
  static constexpr int ld = bk + 8;  // shared row stride in elements: 80 bytes, see the header
  static constexpr int warp_rows = 32, warps_r = bn / warp_rows, warps_t = threads / 32 / warps_r;
  static constexpr int warp_tokens = bm / warps_t, n_nt = warp_tokens / 8;  // n8 tiles per warp
  static constexpr int chunks = bk / 8;                       // 16-byte chunks of 16-bit elements per tile row
  static constexpr int w_per_thread = bn * chunks / threads;  // 16-byte weight chunks per thread per step
  static_assert(threads == 128 && warps_r * warps_t * 32 == threads && warp_tokens % 16 == 0, "warp grid");
  static_assert(bk == 32 && bn * chunks == w_per_thread * threads && bm * chunks == threads, "staging mapping");

  struct params {
    const block* w;           // [rows][cols] (w_gate for swiglu), 16-byte aligned
    const block* maybe_w_up;  // swiglu: [rows][cols], else null
    const float* x;           // [n_tokens][cols] row-major, 16-byte aligned (rows as gemm_rows Rows reads them)
    float* y;                 // [n_tokens][rows] row-major (rows as Rows writes them)
    int64_t rows, cols, n_tokens;
    gemm_groups groups;  // grouped Rows only: the MoE grouping (w, maybe_w_up: expert 0)
  };
  struct alignas(16) stage {
    uint16_t w[n_mats][w_parts][bn][ld];  // weight parts, [row][k]
    uint16_t x[x_parts][bm][ld];          // activation parts, [token][k] (scaled by s for F16)
    float inv_scale[bm];                  // F16: 1 / s per token
  };
  struct shared_storage {
    stage st[2];
  };
  // The token tiles of one row tile run next to each other (blockIdx.x), so each weight tile comes
  // from DRAM about once per call and from L2 for its other token tiles.
  static dim3 grid(const params& p) {
    const int64_t tiles = gemm_rows_grouped<Rows> ? p.groups.max_tiles : ceil_div<int64_t>(p.n_tokens, bm);
    return dim3(unsigned(tiles), unsigned(ceil_div<int64_t>(p.rows, bn)));
  }

  // Register staging of one K step: the thread's 8 activations and (F32) w_per_thread x 8 weights per matrix.
  struct regs {
    float x[8];
    float w[Format::id == quant::type_id::f32 ? n_mats : 1][w_per_thread][8];
  };

  // Matrix m of the tile's expert (dense: w or maybe_w_up itself).
  static Q35_DEVICE const block* mat(const params& p, const gemm_tile& tile, int m) {
    return reinterpret_cast<const block*>(reinterpret_cast<const uint8_t*>(m == 0 ? p.w : p.maybe_w_up) +
                                          tile.w_offset_bytes);
  }

  // This thread's staging sources at K step 0 (null outside the matrix): x of tile token t / 4 and
  // the weight rows (t + 128 h) / 4, all at column 8 q, q = t % 4; a step adds its k0.
  struct sources {
    const float* x;
    const block* w[n_mats][w_per_thread];
    int col;  // 8 q
  };
  static Q35_DEVICE sources make_sources(const params& p, int64_t row0, const gemm_tile& tile) {
    const int t = arch::thread_rank();
    sources src;
    src.col = 8 * (t % chunks);
    const int i = t / chunks;
    src.x = i < tile.n ? p.x + gemm_x_row<Rows>(p.groups, tile, i) * p.cols + src.col : nullptr;
    Q35_UNROLL
    for (int m = 0; m < n_mats; ++m) {
      Q35_UNROLL
      for (int h = 0; h < w_per_thread; ++h) {
        const int64_t row = row0 + (t + h * threads) / chunks;
        src.w[m][h] = row < p.rows ? mat(p, tile, m) + row * p.cols + src.col : nullptr;
      }
    }
    return src;
  }

  // F16/BF16: cp.async of the [bn][bk] weight bits of step k0 into st (zero outside the matrix).
  static Q35_DEVICE void issue_w(const params& p, const sources& src, int64_t k0, stage& st) {
    const int t = arch::thread_rank();
    const bool k_inside = k0 + src.col < p.cols;
    Q35_UNROLL
    for (int m = 0; m < n_mats; ++m) {
      Q35_UNROLL
      for (int h = 0; h < w_per_thread; ++h) {
        const bool inside = k_inside && src.w[m][h] != nullptr;
        arch::cp_async_zfill<16>(&st.w[m][0][(t + h * threads) / chunks][src.col], inside ? src.w[m][h] + k0 : p.w,
                                 inside ? 16 : 0);
      }
    }
  }

  static Q35_DEVICE void load(const params& p, const sources& src, int64_t k0, regs& g) {
    const bool k_inside = k0 + src.col < p.cols;
    {
      const bool inside = k_inside && src.x != nullptr;
      Q35_UNROLL
      for (int h = 0; h < 2; ++h) {
        vec<float, 4> v{};
        if (inside) v = arch::load_16(src.x + k0 + 4 * h);
        Q35_UNROLL
        for (int e = 0; e < 4; ++e) g.x[4 * h + e] = v[e];
      }
    }
    if constexpr (Format::id == quant::type_id::f32) {
      Q35_UNROLL
      for (int m = 0; m < n_mats; ++m) {
        Q35_UNROLL
        for (int h = 0; h < w_per_thread; ++h) {
          const bool inside = k_inside && src.w[m][h] != nullptr;
          Q35_UNROLL
          for (int j = 0; j < 2; ++j) {
            vec<uint32_t, 4> v{};
            if (inside) v = arch::load_16(reinterpret_cast<const uint32_t*>(src.w[m][h] + k0) + 4 * j);
            Q35_UNROLL
            for (int e = 0; e < 4; ++e) g.w[m][h][4 * j + e] = bits_float(v[e]);
          }
        }
      }
    }
  }

  // Splits 8 floats into N parts and stores part i's 16 bytes at dst[i] (element 0 in the low half).
  template <int N>
  static Q35_DEVICE void store_split(const float (&v)[8], uint16_t* const (&dst)[N]) {
    vec<uint32_t, 4> words[N];
    Q35_UNROLL
    for (int e = 0; e < 8; ++e) {
      uint16_t pb[N];
      ops::split_float<part>(v[e], pb);
      Q35_UNROLL
      for (int i = 0; i < N; ++i) {
        if (e % 2 == 0)
          words[i][e / 2] = pb[i];
        else
          words[i][e / 2] |= uint32_t(pb[i]) << 16;
      }
    }
    Q35_UNROLL
    for (int i = 0; i < N; ++i) arch::store_16(reinterpret_cast<uint32_t*>(dst[i]), words[i]);
  }

  // Splits the staged registers into st (all lanes: the F16 scale is a 4-lane max).
  static Q35_DEVICE void store(const regs& g, stage& st) {
    const int t = arch::thread_rank();
    const int i = t / chunks, q = t % chunks;
    float xs[8];
    Q35_UNROLL
    for (int e = 0; e < 8; ++e) xs[e] = g.x[e];
    if constexpr (split::scaled) {
      // e = exponent of max |x| over the token's 32 columns (lanes 4i..4i+3), clamped to [-100, 127]
      uint32_t amax = 0;
      Q35_UNROLL
      for (int e = 0; e < 8; ++e) amax = ops::abs_bits_max(amax, g.x[e]);
      Q35_UNROLL
      for (int d = 1; d < chunks; d *= 2) {
        const uint32_t o = arch::shfl_xor(amax, d);
        amax = o > amax ? o : amax;
      }
      // xs = x * 2^(14 - e), inv_scale = 2^(e - 14)
      const ops::f16_range fr = ops::f16_range_of(amax);
      Q35_UNROLL
      for (int e = 0; e < 8; ++e) xs[e] = g.x[e] * fr.mul;
      if (q == 0) st.inv_scale[i] = fr.unscale;
    }
    {
      uint16_t* dst[x_parts];
      Q35_UNROLL
      for (int j = 0; j < x_parts; ++j) dst[j] = &st.x[j][i][8 * q];
      store_split<x_parts>(xs, dst);
    }
    if constexpr (Format::id == quant::type_id::f32) {
      Q35_UNROLL
      for (int m = 0; m < n_mats; ++m) {
        Q35_UNROLL
        for (int h = 0; h < w_per_thread; ++h) {
          const int c = t + h * threads, r = c / chunks, qq = c % chunks;
          uint16_t* dst[w_parts];
          Q35_UNROLL
          for (int j = 0; j < w_parts; ++j) dst[j] = &st.w[m][j][r][8 * qq];
          store_split<w_parts>(g.w[m][h], dst);
        }
      }
    }
  }

  static Q35_DEVICE void mma(arch::mma_c_f32_16x8& d, const arch::mma_a_f16_16x16& a, const arch::mma_b_f16_16x8& b) {
    if constexpr (std::is_same_v<part, half>)
      arch::mma_m16n8k16_f16(d, a, b, d);
    else
      arch::mma_m16n8k16_bf16(d, a, b, d);
  }

  // acc[m][mt][nt] += the warp's 32 x warp_tokens tile of W_m X^T over one K step in st.
  static Q35_DEVICE void multiply(const stage& st, arch::mma_c_f32_16x8 (&acc)[n_mats][2][n_nt]) {
    const int lane = arch::lane_id(), warp = arch::warp_id();
    const int wr = warp_rows * (warp % warps_r), wt = warp_tokens * (warp / warps_r);
    const int mi = lane / 8, ri = lane % 8;  // ldmatrix: this lane's matrix and row
    Q35_UNROLL
    for (int kk = 0; kk < bk; kk += 16) {
      // B, per 16 tokens g: tokens wt + 16 g + ri (+8 for matrices 2, 3), k kk (+8 for matrices 1, 3);
      // n-tile 2 g + n = {d[2n], d[2n+1]}
      arch::mma_b_f16_16x8 b[x_parts][n_nt];
      Q35_UNROLL
      for (int j = 0; j < x_parts; ++j) {
        Q35_UNROLL
        for (int g16 = 0; g16 < n_nt / 2; ++g16) {
          uint32_t d[4];
          arch::ldmatrix_x4(d, &st.x[j][wt + 16 * g16 + ri + 8 * (mi / 2)][kk + 8 * (mi % 2)]);
          b[j][2 * g16].r[0] = d[0], b[j][2 * g16].r[1] = d[1];
          b[j][2 * g16 + 1].r[0] = d[2], b[j][2 * g16 + 1].r[1] = d[3];
        }
      }
      Q35_UNROLL
      for (int m = 0; m < n_mats; ++m) {
        Q35_UNROLL
        for (int i = 0; i < w_parts; ++i) {
          // A: rows wr + 16 mt + ri (+8 for matrices 1, 3), k kk (+8 for matrices 2, 3)
          arch::mma_a_f16_16x16 a[2];
          Q35_UNROLL
          for (int mt = 0; mt < 2; ++mt)
            arch::ldmatrix_x4(a[mt].r, &st.w[m][i][wr + 16 * mt + ri + 8 * (mi % 2)][kk + 8 * (mi / 2)]);
          // acc += W_i X_j^T for the parts with i + j < x_parts
          Q35_UNROLL
          for (int j = 0; j + i < x_parts; ++j) {
            Q35_UNROLL
            for (int mt = 0; mt < 2; ++mt) {
              Q35_UNROLL
              for (int nt = 0; nt < n_nt; ++nt) mma(acc[m][mt][nt], a[mt], b[j][nt]);
            }
          }
        }
      }
    }
  }

  Q35_DEVICE void operator()(const params& p, shared_storage& s) const {
    const int lane = arch::lane_id(), warp = arch::warp_id();
    const gemm_tile tt = resolve_gemm_tile<Rows, bm>(p.groups, p.n_tokens, int64_t(arch::block_idx().x));
    if (tt.n <= 0) return;  // the whole block
    const int64_t row0 = int64_t(arch::block_idx().y) * bn;
    const int64_t n_steps = ceil_div<int64_t>(p.cols, bk);
    constexpr bool async_w = Format::id != quant::type_id::f32;
    arch::mma_c_f32_16x8 acc[n_mats][2][n_nt] = {};
    regs g;
    const sources src = make_sources(p, row0, tt);

    if constexpr (async_w) {
      issue_w(p, src, 0, s.st[0]);
      arch::cp_async_commit();
    }
    load(p, src, 0, g);
    store(g, s.st[0]);
    for (int64_t step = 0; step < n_steps; ++step) {
      stage& cur = s.st[step % 2];
      stage& next = s.st[(step + 1) % 2];
      const bool more = step + 1 < n_steps;
      if constexpr (async_w) arch::cp_async_wait<0>();
      arch::sync_block();  // cur is complete, and every warp is done with next (step - 1)
      if (more) {
        if constexpr (async_w) {
          issue_w(p, src, (step + 1) * bk, next);
          arch::cp_async_commit();
        }
        load(p, src, (step + 1) * bk, g);
      }
      if constexpr (split::scaled) {
        // acc += 2^(e - 14) * (W hi + W lo) for this step, per token column
        arch::mma_c_f32_16x8 tile[n_mats][2][n_nt] = {};
        multiply(cur, tile);
        Q35_UNROLL
        for (int nt = 0; nt < n_nt; ++nt) {
          Q35_UNROLL
          for (int c = 0; c < 2; ++c) {
            const float inv = cur.inv_scale[warp_tokens * (warp / warps_r) + 8 * nt + 2 * (lane % 4) + c];
            Q35_UNROLL
            for (int m = 0; m < n_mats; ++m) {
              Q35_UNROLL
              for (int mt = 0; mt < 2; ++mt) {
                Q35_UNROLL
                for (int h = 0; h < 2; ++h) acc[m][mt][nt].r[2 * h + c] += inv * tile[m][mt][nt].r[2 * h + c];
              }
            }
          }
        }
      } else {
        multiply(cur, acc);
      }
      if (more) store(g, next);
    }

    Q35_UNROLL
    for (int nt = 0; nt < n_nt; ++nt) {
      Q35_UNROLL
      for (int c = 0; c < 2; ++c) {
        // elements 2 h + c of the lane's tiles: tile token 8 nt + 2 (lane % 4) + c of the warp's
        const int i = warp_tokens * (warp / warps_r) + 8 * nt + arch::mma_c_f32_16x8::coord(lane, c).col;
        if (i >= tt.n) continue;
        float* y = p.y + gemm_y_row<Rows>(p.groups, tt, i) * p.rows;
        Q35_UNROLL
        for (int mt = 0; mt < 2; ++mt) {
          Q35_UNROLL
          for (int h = 0; h < 2; ++h) {
            const int e = 2 * h + c;
            const int64_t row =
                row0 + warp_rows * (warp % warps_r) + 16 * mt + arch::mma_c_f32_16x8::coord(lane, e).row;
            if (row < p.rows) ops::apply_epilogue<Epilogue>(y + row, acc[0][mt][nt].r[e], acc[n_mats - 1][mt][nt].r[e]);
          }
        }
      }
    }
  }
};

}  // namespace q35::kernels
