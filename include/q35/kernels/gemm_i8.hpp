// gemm_i8_kernel: the prompt path Y = X W^T on int8 tensor cores, for the GGUF integer formats
// (Q4_K, Q5_K, Q6_K, Q8_0, Q4_0), with the GEMV integer path's numbers.
//
// Numerics. X is quantized as the GEMV's 16-bit integers (quant/act8x2.hpp: q = 256 hi + lo, one
// scale per 32 elements); W's quants are the GGUF integers (ops/gemm_i8_stage.hpp). Per 32-element
// group (16 for Q6_K) and output, two mma.sync give the exact sums S_hi = sum q_w hi and
// S_lo = sum q_w lo; float(S) = 256 S_hi + S_lo is formed exactly (see below), then
//   acc += scale_g * (d_g S - m_g sum_g)      (K-quant min; other formats m_g = 0)
//   acc += scale_g * (d_a S_a + d_b S_b)      (Q6_K, two groups of 16 per activation group)
// which is the GEMV's term for the group bit for bit; only the order in which groups are summed
// differs (groups in ascending order here; lane-strided items plus a warp reduction there), so
// the two paths agree to fp32 summation error, not to the bit. Every output is computed the same
// way whatever the other tokens of the call are (batch invariance within the GEMM, for one split count:
// launch::gemm_i8_auto_splits depends on the token tiles only through one tile or more).
//
// Exact conversion without I2F (a quarter-rate instruction on sm_80/sm_90): the mma accumulators
// start at M = 0x4b400000 (the bits of 1.5 * 2^23), so each holds the bits of the float M + S for
// |S| < 2^22; |S_hi| <= 32 * 127 * 128 and |S_lo| <= 32 * 127 * 255 are. Then
// S = fma(256, f(D_hi) - M, f(D_lo) - M) rounds the exact integer once, as I2F would.
//
// Tiling. A block holds 64 weight rows (32 output rows of gate and up for swiglu, interleaved in
// 16-row slices so that one lane holds both of an output) x 64 tokens (dense; 32 or 16 for dense calls
// of at most that many, launch::gemm_i8_tile_tokens) or 32 sorted pairs of one expert (the MoE grouped
// GEMM, kernels/gemm_rows.hpp: gathered x rows, scattered y rows), K steps of 128; 4 warps of 32 rows x
// tile / 2 tokens (2 x 4, 2 x 2 or 2 x 1 tiles of m16n8). Weights: each thread loads 64
// elements of one row for the next step into registers while the block computes the current one, then unpacks them to
// int8 in shared memory. Activations: cp.async, double-buffered. Shared rows are 128 bytes; their 16-byte chunks are
// XOR-swizzled by (row mod 8), so the 8 row addresses of every ldmatrix phase fall in 8 distinct chunk positions, i.e.
// all 32 banks (no conflicts), and the cp.async / staging stores write whole chunks. The grid runs the token tiles of
// one row tile next to each other (blockIdx.x), so a weight tile is read from DRAM about once per call and served from
// L2 to its token tiles (the grouped form: the tiles of one expert are adjacent).
#pragma once

#include <cstdint>

#include "q35/arch/cp_async.hpp"
#include "q35/arch/ldmatrix.hpp"
#include "q35/arch/mma.hpp"
#include "q35/arch/rounded_math.hpp"
#include "q35/arch/thread.hpp"
#include "q35/arch/vector_load.hpp"
#include "q35/core/dim3.hpp"
#include "q35/core/numeric.hpp"
#include "q35/core/vec.hpp"
#include "q35/kernels/gemm_rows.hpp"
#include "q35/ops/epilogue.hpp"
#include "q35/ops/gemm_i8_stage.hpp"
#include "q35/quant/act8x2.hpp"
#include "q35/quant/formats.hpp"

namespace q35::kernels {

// 64 tokens per block for the dense GEMM; the grouped MoE GEMM's tiles are moe_group_tile = 32
// sorted pairs (35B-A3B at 512 tokens: 16 pairs per expert on average, so 64 would idle 3/4 of it).
// Dense calls of at most 16 or 32 tokens (decode batches, short chunks) take tiles of 16 or 32
// (launch::gemm_i8_tile_tokens): the mma and the per-group float work scale with the tile's tokens,
// not with the call's, so a 64-token tile would issue 4x (2x) the instructions per weight.
template <int TileTokens = 64>
struct gemm_i8_policy {
  static constexpr int threads = 128;
  static constexpr int tile_rows = 64;            // weight rows in shared memory (output rows: 64 / matrices)
  static constexpr int tile_tokens = TileTokens;  // tokens per block: 64, 32 or 16
  static constexpr int tile_k = 128;              // columns per K step
};

template <quant::weight_format Format, ops::epilogue Epilogue, gemm_rows Rows = gemm_rows::dense,
          class Policy = gemm_i8_policy<Rows == gemm_rows::dense ? 64 : moe_group_tile>>
requires ops::has_i8_stage<Format>
struct gemm_i8_kernel {
  using stage = ops::i8_stage<Format>;
  static constexpr int n_mats = ops::epilogue_mats<Epilogue>;
  static constexpr int threads = Policy::threads;
  static constexpr int bm = Policy::tile_rows, bn = Policy::tile_tokens, bk = Policy::tile_k;
  static constexpr int out_rows = bm / n_mats;
  static constexpr int k32 = bk / 32;  // activation groups per step
  static constexpr bool k16 = stage::group_elems == 16;
  // Q6_K: two blocks per SM (up to 255 registers), as it had at 180-183 registers before split-K; left to
  // itself ptxas (nvcc 13.0, sm_90) then trimmed its dense store / residual instances to 168 (three
  // blocks) and spilled 4 bytes. The others keep ptxas's own choice (a minimum of 2 made them spill).
  static constexpr int min_blocks_per_sm = k16 ? 2 : 0;
  static_assert(threads == 128 && bm == 64 && (bn == 64 || bn == 32 || bn == 16) && bk == 128,
                "the mapping below is written for these tiles");
  static constexpr int warp_tokens = bn / 2, n_nt = warp_tokens / 8;  // tokens, n8 tiles per warp (4, 2 or 1)
  static constexpr int x_chunks = bn * 8 / threads;                   // plane chunks per thread and step
  static constexpr int x_records = bn * k32;                          // group records per step
  static constexpr int x_groups = ceil_div(x_records, threads);       // ... per thread (bn = 16: threads < 64)
  static constexpr uint32_t magic_bits = 0x4b400000u;                 // 1.5 * 2^23
  static constexpr float magic = 12582912.0f;

  struct params {
    const uint8_t* w;           // [rows][row_bytes] (the gate for swiglu)
    const uint8_t* maybe_w_up;  // swiglu: the up matrix, else null
    int64_t row_bytes;
    quant::act8x2_view x;  // [n_tokens][cols] (rows as gemm_rows Rows reads them)
    float* y;              // [n_tokens][rows] (rows as Rows writes them)
    int64_t rows, cols, n_tokens;
    gemm_groups groups;  // grouped Rows only: the MoE grouping (w, maybe_w_up: expert 0)
    // Split-K (dense Rows only; launch::gemm_i8_auto_splits): with partials set, block z of grid.z runs the K steps
    // [z steps_per_split, (z + 1) steps_per_split) and writes its raw sums to partials [grid.z][n_tokens][n_mats][rows]
    // (swiglu: gate rows, then up rows), and gemm_split_reduce_kernel sums the splits in order and applies the
    // epilogue; null: the block runs every step and applies the epilogue itself.
    int steps_per_split = 0;
    float* partials = nullptr;
  };
  struct shared_storage {
    uint8_t w[bm][bk];                     // int8 quants, swizzled chunks
    float wf[bm][8];                       // per row: (d, m) of 4 groups of 32, or d of 8 groups of 16
    uint8_t xh[2][bn][bk], xl[2][bn][bk];  // activation planes, swizzled chunks
    float xg[2][k32][2 * bn];              // [group][token]: scale, sum (act8x2_group)
  };
  static dim3 grid(const params& p) {
    const int64_t tiles = gemm_rows_grouped<Rows> ? p.groups.max_tiles : ceil_div<int64_t>(p.n_tokens, bn);
    const int64_t splits = p.partials ? ceil_div<int64_t>(ceil_div<int64_t>(p.cols, bk), p.steps_per_split) : 1;
    return dim3(unsigned(tiles), unsigned(ceil_div<int64_t>(p.rows, out_rows)), unsigned(splits));
  }

  // Byte offset of chunk c (0..7) of shared row r.
  static Q35_HOST_DEVICE constexpr int swz(int r, int c) { return ((c ^ (r & 7)) << 4); }

  Q35_DEVICE void operator()(const params& p, shared_storage& s) const {
    const int t = arch::thread_rank(), lane = t & 31, warp = t >> 5;
    const gemm_tile tile = resolve_gemm_tile<Rows, bn>(p.groups, p.n_tokens, int64_t(arch::block_idx().x));
    if (tile.n <= 0) return;  // the whole block
    const int64_t row0 = int64_t(arch::block_idx().y) * out_rows;
    // this block's K steps [first_step, end_step): all of them, or split z's
    const int n_steps = int(ceil_div<int64_t>(p.cols, bk));
    const int first_step = gemm_rows_grouped<Rows> || !p.partials ? 0 : int(arch::block_idx().z) * p.steps_per_split;
    const int end_step =
        p.partials && first_step + p.steps_per_split < n_steps ? first_step + p.steps_per_split : n_steps;

    // this thread's weight staging: shared row sr, elements [64 half, 64 half + 64) of each step
    const int sr = t >> 1, half = t & 1;
    const int slice = sr / 16, mat = n_mats == 2 ? slice % 2 : 0;
    const int64_t wrow = n_mats == 2 ? row0 + (slice / 2) * 16 + sr % 16 : row0 + sr;
    const uint8_t* wbase =
        wrow < p.rows ? (mat == 0 ? p.w : p.maybe_w_up) + tile.w_offset_bytes + wrow * p.row_bytes : nullptr;
    typename stage::raw raw;
    auto load_w = [&](int step) {
      const int64_t e0 = int64_t(step) * bk + 64 * half;
      if (wbase) {
        stage::load(raw, wbase, e0, e0 < p.cols, e0 + 32 < p.cols);
      } else {
        stage::zero(raw);
      }
    };
    auto store_w = [&] {
      uint32_t q[16];
      float f[4];
      stage::unpack(raw, q, f);
      Q35_UNROLL
      for (int c = 0; c < 4; ++c)
        *reinterpret_cast<vec16<uint32_t>*>(&s.w[sr][swz(sr, 4 * half + c)]) =
            vec16<uint32_t>{{q[4 * c], q[4 * c + 1], q[4 * c + 2], q[4 * c + 3]}};
      *reinterpret_cast<vec16<float>*>(&s.wf[sr][4 * half]) = vec16<float>{{f[0], f[1], f[2], f[3]}};
    };
    // the x rows this thread stages (-1 past the tile): plane chunk rows (t + 128 i) / 8, group
    // record rows (t + 128 i) % bn, the same for every step
    int64_t xrow[x_chunks], grow[x_groups];
    Q35_UNROLL
    for (int i = 0; i < x_chunks; ++i) {
      const int r = (t + threads * i) >> 3;
      xrow[i] = r < tile.n ? gemm_x_row<Rows>(p.groups, tile, r) : -1;
    }
    Q35_UNROLL
    for (int i = 0; i < x_groups; ++i) {
      const int r = (t + threads * i) % bn;
      grow[i] = r < tile.n ? gemm_x_row<Rows>(p.groups, tile, r) : -1;
    }
    // only the first x_records copies of a step exist (every thread's, but at bn = 16)
    const bool stages_records = x_records % threads == 0 || t < x_records % threads;
    // activations of one step into buffer b: x_chunks + x_chunks chunks of the planes and x_groups
    // group records per thread
    auto stage_x = [&](int step, int b) {
      const int64_t k0 = int64_t(step) * bk;
      Q35_UNROLL
      for (int i = 0; i < x_chunks; ++i) {
        const int idx = t + threads * i, r = idx >> 3, c = idx & 7;
        const int64_t k = k0 + 16 * c;
        const bool in = xrow[i] >= 0 && k < p.cols;
        const int64_t off = in ? xrow[i] * p.cols + k : 0;
        arch::cp_async_zfill<16>(&s.xh[b][r][swz(r, c)], p.x.hi + off, in ? 16 : 0);
        arch::cp_async_zfill<16>(&s.xl[b][r][swz(r, c)], p.x.lo + off, in ? 16 : 0);
      }
      Q35_UNROLL
      for (int i = 0; i < x_groups; ++i) {
        if (i == x_groups - 1 && !stages_records) break;
        const int idx = t + threads * i, r = idx % bn, g = idx / bn;
        const int64_t gi = k0 / 32 + g;
        const bool in = grow[i] >= 0 && gi < p.cols / 32;
        arch::cp_async_zfill<8>(&s.xg[b][g][2 * r], p.x.groups + (in ? grow[i] * (p.cols / 32) + gi : 0), in ? 8 : 0);
      }
      arch::cp_async_commit();
    };

    // warp tile: shared rows 32 wr + [0, 32), tokens warp_tokens wt + [0, warp_tokens)
    const int wr = warp >> 1, wt = warp & 1, gq = lane >> 2, tq = lane & 3;
    float acc[2][n_nt][4] = {};
    const arch::mma_c_s32_16x8 cmagic{
        {int32_t(magic_bits), int32_t(magic_bits), int32_t(magic_bits), int32_t(magic_bits)}};

    stage_x(first_step, first_step & 1);
    load_w(first_step);
    for (int step = first_step; step < end_step; ++step) {
      store_w();
      if (step + 1 < end_step) {
        stage_x(step + 1, (step + 1) & 1);
        load_w(step + 1);
        arch::cp_async_wait<1>();
      } else {
        arch::cp_async_wait<0>();
      }
      arch::sync_block();
      const int b = step & 1;
      auto group = [&](int kq) {
        arch::mma_a_i8_16x32 a[2];
        Q35_UNROLL
        for (int mi = 0; mi < 2; ++mi) {
          const int r = 32 * wr + 16 * mi + (lane & 7) + 8 * ((lane >> 3) & 1), c = 2 * kq + (lane >> 4);
          arch::ldmatrix_x4(a[mi].r, &s.w[r][swz(r, c)]);
        }
        // [n-tile pair][b0, b1 of tile 2 np, b0, b1 of 2 np + 1]; one n-tile (bn = 16): b0, b1 of tile 0
        uint32_t bh[(n_nt + 1) / 2][4], bl[(n_nt + 1) / 2][4];
        if constexpr (n_nt == 1) {
          const int r = warp_tokens * wt + (lane & 7), c = 2 * kq + ((lane >> 3) & 1);  // lanes 16..31: unused
          uint32_t h2[2], l2[2];
          arch::ldmatrix_x2(h2, &s.xh[b][r][swz(r, c)]);
          arch::ldmatrix_x2(l2, &s.xl[b][r][swz(r, c)]);
          bh[0][0] = h2[0], bh[0][1] = h2[1], bl[0][0] = l2[0], bl[0][1] = l2[1];
        } else {
          Q35_UNROLL
          for (int np = 0; np < n_nt / 2; ++np) {
            const int r = warp_tokens * wt + 16 * np + (lane & 7) + 8 * (lane >> 4), c = 2 * kq + ((lane >> 3) & 1);
            arch::ldmatrix_x4(bh[np], &s.xh[b][r][swz(r, c)]);
            arch::ldmatrix_x4(bl[np], &s.xl[b][r][swz(r, c)]);
          }
        }
        // the weight factors of this lane's rows 32 wr + 16 mi + gq + 8 h, the activation records
        // of its tokens warp_tokens wt + 8 ni + 2 tq + {0, 1}
        vec<float, 2> wfac[2][2];
        Q35_UNROLL
        for (int mi = 0; mi < 2; ++mi) {
          Q35_UNROLL
          for (int h = 0; h < 2; ++h)
            wfac[mi][h] = *reinterpret_cast<const vec<float, 2>*>(&s.wf[32 * wr + 16 * mi + gq + 8 * h][2 * kq]);
        }
        Q35_UNROLL
        for (int ni = 0; ni < n_nt; ++ni) {
          const vec16<float> xr =
              *reinterpret_cast<const vec16<float>*>(&s.xg[b][kq][2 * (warp_tokens * wt + 8 * ni + 2 * tq)]);
          Q35_UNROLL
          for (int mi = 0; mi < 2; ++mi) {
            if constexpr (!k16) {
              arch::mma_b_i8_32x8 fh{{bh[ni / 2][2 * (ni % 2)], bh[ni / 2][2 * (ni % 2) + 1]}};
              arch::mma_b_i8_32x8 fl{{bl[ni / 2][2 * (ni % 2)], bl[ni / 2][2 * (ni % 2) + 1]}};
              arch::mma_c_s32_16x8 dh, dl;
              constexpr auto at = stage::q_signed ? arch::int8_type::s8 : arch::int8_type::u8;
              arch::mma_m16n8k32_i8<at, arch::int8_type::s8>(dh, a[mi], fh, cmagic);
              arch::mma_m16n8k32_i8<at, arch::int8_type::u8>(dl, a[mi], fl, cmagic);
              Q35_UNROLL
              for (int e = 0; e < 4; ++e) {
                const float sum =
                    arch::fma_rn(256.0f, bits_float(uint32_t(dh.r[e])) - magic, bits_float(uint32_t(dl.r[e])) - magic);
                const vec<float, 2>& wf = wfac[mi][e >> 1];
                const float scale = xr[2 * (e & 1)], xsum = xr[2 * (e & 1) + 1];
                if constexpr (stage::has_min) {
                  acc[mi][ni][e] += scale * (wf[0] * sum - wf[1] * xsum);
                } else {
                  acc[mi][ni][e] += scale * (wf[0] * sum);
                }
              }
            } else {
              // Q6_K: two k16 halves with their own factors wf[0] (elements 0..15), wf[1] (16..31)
              float part[2][4];
              Q35_UNROLL
              for (int kh = 0; kh < 2; ++kh) {
                const arch::mma_a_i8_16x16 ah{{a[mi].r[2 * kh], a[mi].r[2 * kh + 1]}};
                const arch::mma_b_i8_16x8 fh{{bh[ni / 2][2 * (ni % 2) + kh]}};
                const arch::mma_b_i8_16x8 fl{{bl[ni / 2][2 * (ni % 2) + kh]}};
                arch::mma_c_s32_16x8 dh, dl;
                arch::mma_m16n8k16_i8<arch::int8_type::s8, arch::int8_type::s8>(dh, ah, fh, cmagic);
                arch::mma_m16n8k16_i8<arch::int8_type::s8, arch::int8_type::u8>(dl, ah, fl, cmagic);
                Q35_UNROLL
                for (int e = 0; e < 4; ++e)
                  part[kh][e] = arch::fma_rn(256.0f, bits_float(uint32_t(dh.r[e])) - magic,
                                             bits_float(uint32_t(dl.r[e])) - magic);
              }
              Q35_UNROLL
              for (int e = 0; e < 4; ++e) {
                const vec<float, 2>& wf = wfac[mi][e >> 1];
                acc[mi][ni][e] += xr[2 * (e & 1)] * (wf[0] * part[0][e] + wf[1] * part[1][e]);
              }
            }
          }
        }
      };
      // Q6_K's four k16 mma per tile hold twice the accumulators in flight: a rolled group loop
      // keeps it below 255 registers (unrolled, ptxas spilled 112-132 bytes)
      if constexpr (k16) {
        Q35_NO_UNROLL
        for (int kq = 0; kq < k32; ++kq) group(kq);
      } else {
        Q35_UNROLL
        for (int kq = 0; kq < k32; ++kq) group(kq);
      }
      arch::sync_block();  // the next step overwrites the weight tile and this activation buffer
    }

    // epilogue: lane element e of tile (mi, ni) is shared row 32 wr + 16 mi + gq + 8 (e >> 1), tile
    // token warp_tokens wt + 8 ni + 2 tq + (e & 1); for swiglu mi = 0 is the gate and mi = 1 the up
    // row of one output. A split writes its raw sums (the reduce kernel applies the epilogue).
    // (block_idx().z read again here rather than kept in a register across the loop)
    float* const part = !gemm_rows_grouped<Rows> && p.partials
                            ? p.partials + int64_t(arch::block_idx().z) * p.n_tokens * n_mats * p.rows
                            : nullptr;
    const auto emit = [&](float* y, float* pr, int64_t row, float a, float b) {
      if (pr) {
        pr[row] = a;
        if constexpr (n_mats == 2) pr[p.rows + row] = b;
      } else {
        ops::apply_epilogue<Epilogue>(y + row, a, b);
      }
    };
    Q35_UNROLL
    for (int ni = 0; ni < n_nt; ++ni) {
      Q35_UNROLL
      for (int c = 0; c < 2; ++c) {
        const int i = warp_tokens * wt + 8 * ni + 2 * tq + c;
        if (i >= tile.n) continue;
        const int64_t yrow = gemm_y_row<Rows>(p.groups, tile, i);
        float* y = p.y + yrow * p.rows;
        float* pr = part ? part + yrow * n_mats * p.rows : nullptr;
        Q35_UNROLL
        for (int h = 0; h < 2; ++h) {
          const int e = 2 * h + c;
          if constexpr (n_mats == 2) {
            const int64_t row = row0 + 16 * wr + gq + 8 * h;
            if (row < p.rows) emit(y, pr, row, acc[0][ni][e], acc[1][ni][e]);
          } else {
            Q35_UNROLL
            for (int mi = 0; mi < 2; ++mi) {
              const int64_t row = row0 + 32 * wr + 16 * mi + gq + 8 * h;
              if (row < p.rows) emit(y, pr, row, acc[mi][ni][e], 0.0f);
            }
          }
        }
      }
    }
  }
};

}  // namespace q35::kernels
