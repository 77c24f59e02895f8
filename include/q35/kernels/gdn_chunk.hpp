// gdn_chunk_kernel: the intra-chunk part of the chunked (WY) delta rule, for all chunks at once
// (spec §2.2, chunk C = 64). Per chunk of one sequence and v-head j, with k-head h = j mod n_k and
// G_i = sum_{s <= i} g_s within the chunk:
//   A_ij   = beta_i (k_i . k_j) e^(G_i - G_j) for j < i, else 0;   L = I + A
//   T      = L^-1 (blockwise, fp32),   W = T (beta v),   U = T (beta e^G k)
//   Aqk_ij = (q_i . k_j) e^(G_i - G_j) for j <= i, else 0
// and replaces g by G. Rows past the sequence end count as padding (beta = 0, g = 0, q = k = v = 0).
//
// Thread-to-data mapping: block (chunk x, v-head j, sequence i), 8 warps. K K^T and Q K^T run on
// tensor cores at fp32 grade (ops/mma_split.hpp: k and q staged as 3 bf16 planes, 6 mma per 16
// columns): warp w computes rows 16 (w % 4) .. + 16 of K K^T (w < 4) or Q K^T (w >= 4), only the n8
// tiles that reach the diagonal. The triangular inverse T = (I + A)^-1 stays fp32 on CUDA cores, by
// 16 x 16 blocks: the 4 diagonal blocks by substitution (one column per thread), then the blocks
// below by T_ij = -T_ii sum_{j <= k < i} A_ik T_kj, one block diagonal at a time (depth 3 x 2 small
// products instead of 64 dependent steps); W = T (beta v) and U = T (beta e^G k) run on mma
// (warp w: rows 16 (w / 2), half of the columns). The cumulative sum of g stays fp32 too.
#pragma once

#include <algorithm>
#include <cstdint>

#include "q35/arch/math.hpp"
#include "q35/arch/mma.hpp"
#include "q35/arch/thread.hpp"
#include "q35/arch/vector_load.hpp"
#include "q35/core/config.hpp"
#include "q35/core/dim3.hpp"
#include "q35/core/vec.hpp"
#include "q35/kernels/gdn_prep.hpp"
#include "q35/ops/mma_split.hpp"

namespace q35::kernels {

inline constexpr int gdn_chunk_size = 64;

template <int KDim, int VDim>
struct gdn_chunk_kernel {
  static constexpr int chunk = gdn_chunk_size;
  static constexpr int threads = 256;
  static constexpr int blk = 16, n_blk = 64 / blk;  // blocks of the triangular inverse
  static constexpr int rhs_cols = KDim > VDim ? KDim : VDim;
  // K K^T and Q K^T take the key columns in passes of k_part: the k and q planes of all 128 keys at
  // once would be 104 KB, more than an sm_86 / sm_89 GPU gives a block (99 KB). The accumulators carry
  // over, so each output is the same mma chain as in one pass.
  static constexpr int k_part = KDim < 64 ? KDim : 64;
  static_assert(KDim % k_part == 0, "whole passes");
  static_assert(threads == 256 && chunk == 64, "8 warps: 2 products x 4 row tiles of 16");
  static_assert(KDim % 32 == 0 && VDim % 32 == 0, "half a row of W / U per warp: pairs of n8 tiles");

  struct params {
    const int32_t* seq_offsets;  // [n_seqs + 1]
    gdn_chunk_tensors t;
    int n_seqs;
    int n_chunks;  // chunks of the longest sequence
    ops::gdn_heads heads;
  };
  // Phase 1 (K K^T, Q K^T) holds k_part columns of k and q as bf16 planes; phase 2 reuses the space
  // for A and T in fp32, T's planes and one right-hand side's planes (beta v, then beta e^G k; T in
  // fp32 is built in its space first). d = 128: 100,288 B (phase 2's; 2 blocks per sm_90 SM, 1 per
  // sm_86 / sm_89 SM), d = 64: 75,712 B.
  struct alignas(16) shared_storage {
    float beta[chunk];
    float g[chunk];  // cumulative log-decay G
    union {
      struct {
        ops::split_matrix<chunk, k_part> k, q;  // [row][key - k0] of one pass
      } prod;
      struct {
        float a[chunk][chunk + 1];          // A_ij (j < i read only)
        float p[n_blk - 1][blk][blk + 1];   // sum_k A_ik T_kj of one block diagonal
        ops::split_matrix<chunk, chunk> t;  // T planes [row][row']
        union {
          float tf[chunk][chunk + 1];              // T in fp32, until its planes are written
          ops::split_matrix<chunk, rhs_cols> rhs;  // beta v or beta e^G k planes [row][col]
        };
      } solve;
    };
  };
  static dim3 grid(const params& p) { return dim3(unsigned(p.n_chunks), unsigned(p.heads.n_v), unsigned(p.n_seqs)); }

  Q35_DEVICE void operator()(const params& p, shared_storage& s) const {
    const int x = int(arch::block_idx().x), j = int(arch::block_idx().y), seq = int(arch::block_idx().z);
    const int64_t r0 = int64_t(p.seq_offsets[seq]) + int64_t(x) * chunk;
    const int nr = int(std::min<int64_t>(chunk, int64_t(p.seq_offsets[seq + 1]) - r0));
    if (nr <= 0) return;  // the whole block: this sequence has fewer chunks
    const int tid = arch::thread_rank();
    const int n_k = p.heads.n_k, n_v = p.heads.n_v, h = j % n_k;

    if (tid < chunk) {
      s.beta[tid] = tid < nr ? p.t.beta[(r0 + tid) * n_v + j] : 0.0f;
      s.g[tid] = tid < nr ? p.t.g[(r0 + tid) * n_v + j] : 0.0f;
    }
    // A_ij = beta_i (k_i . k_j) e^(G_i - G_j), j < i;   Aqk_ij = (q_i . k_j) e^(G_i - G_j), j <= i.
    // Warp w: product w / 4, rows 16 mr .. + 16 (mr = w % 4), n8 tiles 0 .. 2 mr + 1 (the rest of the
    // row tile is above the diagonal).
    const int warp = arch::warp_id(), mr = warp % 4;
    const bool qk = warp >= 4;
    arch::mma_c_f32_16x8 acc[chunk / 8] = {};
    for (int k0 = 0; k0 < KDim; k0 += k_part) {
      // keys k0 .. k0 + k_part of the k and q rows as bf16 planes (8 keys per thread and step,
      // 16-byte loads); padding rows are 0
      constexpr int vecs = k_part / 8;
      for (int e = tid; e < chunk * vecs; e += threads) {
        const int i = e / vecs, c = 8 * (e % vecs);
        const int64_t at = ((r0 + i) * n_k + h) * KDim + k0 + c;
        s.prod.k.load8(i, c, p.t.k + (i < nr ? at : 0), i < nr);
        s.prod.q.load8(i, c, p.t.q + (i < nr ? at : 0), i < nr);
      }
      arch::sync_block();  // the planes are complete (the first time: beta and g too)
      // G_i = sum_{s <= i} g_s (one thread: 64 additions)
      if (k0 == 0 && tid == 0) {
        float a = 0.0f;
        for (int i = 0; i < chunk; ++i) s.g[i] = a += s.g[i];
      }
      ops::mma_split_product<false, chunk / 8, k_part>(acc, qk ? s.prod.q : s.prod.k, 16 * mr, s.prod.k, 0, 0, mr + 1);
      arch::sync_block();  // every warp is done with the planes (after the last pass: and G is complete)
    }
    if (tid < nr) p.t.g[(r0 + tid) * n_v + j] = s.g[tid];
    Q35_UNROLL
    for (int n = 0; n < chunk / 8; ++n) {
      Q35_UNROLL
      for (int i = 0; i < 4; ++i) {
        const arch::mma_coord at = ops::mma_acc_at(16 * mr, 8 * n, i);
        const int r = at.row, c = at.col;
        const float decay = c <= r ? arch::fast_exp(s.g[r] - s.g[c]) : 0.0f;
        if (!qk) {
          if (n <= 2 * mr + 1) s.solve.a[r][c] = c < r ? s.beta[r] * acc[n].r[i] * decay : 0.0f;
        } else if (r < nr) {
          p.t.aqk[((r0 + r) * n_v + j) * chunk + c] = acc[n].r[i] * decay;  // 0 above the diagonal
        }
      }
    }

    arch::sync_block();  // A complete
    invert(s);
    // W = T (beta v), U = T (beta e^G k): one right-hand side at a time through the same planes
    rhs_times_t<VDim>(
        s, tid, nr, [&](int i, int c) { return p.t.v[((r0 + i) * n_v + j) * VDim + c] * s.beta[i]; },
        [&](int i, int c, float val) { p.t.w[((r0 + i) * n_v + j) * VDim + c] = val; });
    rhs_times_t<KDim>(
        s, tid, nr,
        [&](int i, int c) { return p.t.k[((r0 + i) * n_k + h) * KDim + c] * (s.beta[i] * arch::fast_exp(s.g[i])); },
        [&](int i, int c, float val) { p.t.u[((r0 + i) * n_v + j) * KDim + c] = val; });
  }

  // T = (I + A)^-1 from s.solve.a (A strictly lower triangular) into s.solve.t's planes (and
  // s.solve.tf in fp32), by 16 x 16 blocks. Ends with a barrier.
  static Q35_DEVICE void invert(shared_storage& s) {
    const int tid = arch::thread_rank();
    auto& tf = s.solve.tf;
    // zero the blocks above the diagonal; diagonal blocks by substitution, one column per thread:
    // x_r = [r == c] - sum_{c <= m < r} A_rm x_m within the block
    for (int e = tid; e < chunk * chunk; e += threads) {
      const int r = e / chunk, c = e % chunk;
      if (c / blk > r / blk) tf[r][c] = 0.0f;
    }
    if (tid < chunk) {
      const int b0 = blk * (tid / blk), c = tid % blk;
      for (int r = 0; r < blk; ++r) {
        float x = r == c ? 1.0f : 0.0f;
        for (int m = c; m < r; ++m) x -= s.solve.a[b0 + r][b0 + m] * tf[b0 + m][b0 + c];
        tf[b0 + r][b0 + c] = r < c ? 0.0f : x;
      }
    }
    // block diagonal l: T_ij = -T_ii P_ij, P_ij = sum_{j <= k < i} A_ik T_kj, j = i - l
    for (int l = 1; l < n_blk; ++l) {
      arch::sync_block();  // the blocks of diagonal l - 1 are complete
      const int n_ent = (n_blk - l) * blk * blk;
      for (int e = tid; e < n_ent; e += threads) {
        const int q = e / (blk * blk), r = e / blk % blk, c = e % blk, bi = q + l, bj = q;
        float acc = 0.0f;
        for (int m = blk * bj; m < blk * bi; ++m) acc += s.solve.a[blk * bi + r][m] * tf[m][blk * bj + c];
        s.solve.p[q][r][c] = acc;
      }
      arch::sync_block();
      for (int e = tid; e < n_ent; e += threads) {
        const int q = e / (blk * blk), r = e / blk % blk, c = e % blk, bi = q + l, bj = q;
        float acc = 0.0f;
        for (int m = 0; m <= r; ++m) acc += tf[blk * bi + r][blk * bi + m] * s.solve.p[q][m][c];
        tf[blk * bi + r][blk * bj + c] = -acc;
      }
    }
    arch::sync_block();
    for (int e = tid; e < chunk * chunk; e += threads) s.solve.t.set(e / chunk, e % chunk, tf[e / chunk][e % chunk]);
    arch::sync_block();  // T's planes complete, tf no longer read (its space becomes rhs)
  }

  // X = T B for one right-hand side B [chunk][Cols] (b(i, c) for the nr valid rows, 0 past them):
  // B's planes, then warp w computes rows 16 (w / 2) .. + 16, columns (w % 2) Cols / 2 .. + Cols / 2,
  // and store(i, c, x) for the valid rows. Ends with a barrier (the planes may be rewritten).
  template <int Cols, class B, class Store>
  static Q35_DEVICE void rhs_times_t(shared_storage& s, int tid, int nr, B b, Store store) {
    constexpr int vecs = Cols / 8;
    for (int e = tid; e < chunk * vecs; e += threads) {
      const int i = e / vecs, c = 8 * (e % vecs);
      float v[8];
      Q35_UNROLL
      for (int q = 0; q < 8; ++q) v[q] = i < nr ? b(i, c + q) : 0.0f;
      s.solve.rhs.set8(i, c, v);
    }
    arch::sync_block();
    const int warp = arch::warp_id(), m0 = 16 * (warp / 2), c0 = (warp % 2) * (Cols / 2);
    arch::mma_c_f32_16x8 acc[Cols / 16] = {};
    ops::mma_split_product<true, Cols / 16, chunk>(acc, s.solve.t, m0, s.solve.rhs, c0, 0);
    Q35_UNROLL
    for (int n = 0; n < Cols / 16; ++n) {
      Q35_UNROLL
      for (int i = 0; i < 4; ++i) {
        const arch::mma_coord at = ops::mma_acc_at(m0, c0 + 8 * n, i);
        if (at.row < nr) store(at.row, at.col, acc[n].r[i]);
      }
    }
    arch::sync_block();
  }
};

}  // namespace q35::kernels
