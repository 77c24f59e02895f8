// gdn_chunk_kernel: the intra-chunk part of the chunked (WY) delta rule, for all chunks at once
// (spec §2.2, chunk C = 64). Per chunk of one sequence and v-head j, with k-head h = j mod n_k and
// G_i = sum_{s <= i} g_s within the chunk:
//   A_ij   = beta_i (k_i . k_j) e^(G_i - G_j) for j < i, else 0;   L = I + A
//   W      = L^-1 (beta v),   U = L^-1 (beta e^G k)                 (forward substitution)
//   Aqk_ij = (q_i . k_j) e^(G_i - G_j) for j <= i, else 0
// and replaces g by G. Rows past the sequence end count as padding (beta = 0, g = 0, q = k = v = 0).
//
// Thread-to-data mapping: block (chunk x, v-head j, sequence i), 8 warps. K K^T and Q K^T run on
// tensor cores at fp32 grade (ops/mma_split.hpp: k and q staged as 3 bf16 planes, 6 mma per 16
// columns): warp w computes rows 16 (w % 4) .. + 16 of K K^T (w < 4) or Q K^T (w >= 4), only the n8
// tiles that reach the diagonal. The forward substitution stays fp32 on CUDA cores (each thread owns
// whole columns of [beta v | beta e^G k]), as does the cumulative sum of g.
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
  // fp32 rows of the substitution: k padded by one float so that threads reading one key of
  // consecutive rows hit different banks; v is only read along rows
  static constexpr int k_stride = KDim + 1;
  static constexpr int v_stride = VDim;
  static_assert(threads == 256 && chunk == 64, "8 warps: 2 products x 4 row tiles of 16");

  struct params {
    const int32_t* seq_offsets;  // [n_seqs + 1]
    gdn_chunk_tensors t;
    int n_seqs;
    int n_chunks;  // chunks of the longest sequence
    ops::gdn_heads heads;
  };
  // Phase 1 (products) holds k and q as bf16 planes; phase 2 (substitution) reuses the space for A,
  // beta v and beta e^G k in fp32. d = 128: 104 KB (2 blocks per sm_90 SM), d = 64: 55 KB.
  struct alignas(16) shared_storage {
    float beta[chunk];
    float g[chunk];  // cumulative log-decay G
    union {
      struct {
        ops::split_matrix<chunk, KDim> k, q;  // [row][key]
      } prod;
      struct {
        float a[chunk][chunk];     // A_ij (j < i read only)
        float v[chunk][v_stride];  // beta v, becomes W
        float k[chunk][k_stride];  // beta e^G k, becomes U
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

    // k and q rows as bf16 planes (8 keys per thread and step, 16-byte loads); padding rows are 0
    constexpr int vecs = KDim / 8;
    for (int e = tid; e < chunk * vecs; e += threads) {
      const int i = e / vecs, c = 8 * (e % vecs);
      const int64_t at = ((r0 + i) * n_k + h) * KDim + c;
      float kv[8] = {}, qv[8] = {};
      if (i < nr) {
        Q35_UNROLL
        for (int hh = 0; hh < 2; ++hh) {
          const vec<float, 4> k4 = arch::load_16(p.t.k + at + 4 * hh), q4 = arch::load_16(p.t.q + at + 4 * hh);
          Q35_UNROLL
          for (int q = 0; q < 4; ++q) kv[4 * hh + q] = k4[q], qv[4 * hh + q] = q4[q];
        }
      }
      s.prod.k.set8(i, c, kv);
      s.prod.q.set8(i, c, qv);
    }
    if (tid < chunk) {
      s.beta[tid] = tid < nr ? p.t.beta[(r0 + tid) * n_v + j] : 0.0f;
      s.g[tid] = tid < nr ? p.t.g[(r0 + tid) * n_v + j] : 0.0f;
    }
    arch::sync_block();
    // G_i = sum_{s <= i} g_s (one thread: 64 additions)
    if (tid == 0) {
      float acc = 0.0f;
      for (int i = 0; i < chunk; ++i) s.g[i] = acc += s.g[i];
    }

    // A_ij = beta_i (k_i . k_j) e^(G_i - G_j), j < i;   Aqk_ij = (q_i . k_j) e^(G_i - G_j), j <= i.
    // Warp w: product w / 4, rows 16 mr .. + 16 (mr = w % 4), n8 tiles 0 .. 2 mr + 1 (the rest of the
    // row tile is above the diagonal).
    const int warp = arch::warp_id(), mr = warp % 4;
    const bool qk = warp >= 4;
    arch::mma_c_f32_16x8 acc[chunk / 8] = {};
    ops::mma_split_product<false, chunk / 8, KDim>(acc, qk ? s.prod.q : s.prod.k, 16 * mr, s.prod.k, 0, 0, mr + 1);
    arch::sync_block();  // every warp is done with the planes, and G is complete
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

    // Right-hand sides: beta v and beta e^G k
    for (int e = tid; e < chunk * KDim; e += threads) {
      const int i = e / KDim, c = e % KDim;
      s.solve.k[i][c] = i < nr ? p.t.k[((r0 + i) * n_k + h) * KDim + c] * (s.beta[i] * arch::fast_exp(s.g[i])) : 0.0f;
    }
    for (int e = tid; e < chunk * VDim; e += threads) {
      const int i = e / VDim, c = e % VDim;
      s.solve.v[i][c] = i < nr ? p.t.v[((r0 + i) * n_v + j) * VDim + c] * s.beta[i] : 0.0f;
    }
    arch::sync_block();

    // (I + A) X = B by forward substitution, one column per thread: x_i = b_i - sum_{c < i} A_ic x_c
    for (int col = tid; col < VDim + KDim; col += threads) {
      float* xcol = col < VDim ? &s.solve.v[0][col] : &s.solve.k[0][col - VDim];
      const int stride = col < VDim ? v_stride : k_stride;
      for (int i = 1; i < nr; ++i) {
        float acc_i = xcol[i * stride];
        for (int c = 0; c < i; ++c) acc_i -= s.solve.a[i][c] * xcol[c * stride];
        xcol[i * stride] = acc_i;
      }
      for (int i = 0; i < nr; ++i) {
        if (col < VDim) {
          p.t.w[((r0 + i) * n_v + j) * VDim + col] = xcol[i * stride];
        } else {
          p.t.u[((r0 + i) * n_v + j) * KDim + (col - VDim)] = xcol[i * stride];
        }
      }
    }
  }
};

}  // namespace q35::kernels
