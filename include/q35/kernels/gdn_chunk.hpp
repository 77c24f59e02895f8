// gdn_chunk_kernel: the intra-chunk part of the chunked (WY) delta rule, for all chunks at once
// (spec §2.2, chunk C = 64). Per chunk of one sequence and v-head j, with k-head h = j mod n_k and
// G_i = sum_{s <= i} g_s within the chunk:
//   A_ij   = beta_i (k_i . k_j) e^(G_i - G_j) for j < i, else 0;   L = I + A
//   W      = L^-1 (beta v),   U = L^-1 (beta e^G k)                 (forward substitution)
//   Aqk_ij = (q_i . k_j) e^(G_i - G_j) for j <= i, else 0
// and replaces g by G. Rows past the sequence end count as padding (beta = 0, g = 0, q = k = v = 0).
//
// Thread-to-data mapping: block (chunk x, v-head j, sequence i). Each thread computes a 4 x 4 tile
// of A and Aqk (rows and columns strided by 16, so a warp's loads hit distinct banks); in the
// substitution each thread owns whole columns of [beta v | beta e^G k].
#pragma once

#include <algorithm>
#include <cstdint>

#include "q35/arch/math.hpp"
#include "q35/arch/thread.hpp"
#include "q35/core/config.hpp"
#include "q35/core/dim3.hpp"
#include "q35/kernels/gdn_prep.hpp"

namespace q35::kernels {

inline constexpr int gdn_chunk_size = 64;

template <int KDim, int VDim>
struct gdn_chunk_kernel {
  static constexpr int chunk = gdn_chunk_size;
  static constexpr int threads = 256;
  // Row strides in shared memory: k and q rows padded by one float so that a warp reading the same
  // key of 16 consecutive rows hits 16 different banks; v is only read along rows.
  static constexpr int k_stride = KDim + 1;
  static constexpr int v_stride = VDim;

  struct params {
    const int32_t* seq_offsets;  // [n_seqs + 1]
    gdn_chunk_tensors t;
    int n_seqs;
    int n_chunks;  // chunks of the longest sequence
    ops::gdn_heads heads;
  };
  struct shared_storage {
    float beta[chunk];
    float g[chunk];  // cumulative log-decay G
  };
  // k [chunk][k_stride] (becomes U), q [chunk][k_stride] (becomes A [chunk][chunk] once Aqk is
  // done), v [chunk][v_stride] (becomes W): 99 KB at d = 128, so two blocks fit an sm_90 SM
  static size_t dynamic_shared_bytes(const params&) {
    static_assert(k_stride >= chunk, "A reuses q's rows");
    return sizeof(float) * size_t(chunk) * size_t(2 * k_stride + v_stride);
  }
  static dim3 grid(const params& p) { return dim3(unsigned(p.n_chunks), unsigned(p.heads.n_v), unsigned(p.n_seqs)); }

  Q35_DEVICE void operator()(const params& p, shared_storage& s) const {
    const int x = int(arch::block_idx().x), j = int(arch::block_idx().y), seq = int(arch::block_idx().z);
    const int64_t r0 = int64_t(p.seq_offsets[seq]) + int64_t(x) * chunk;
    const int nr = int(std::min<int64_t>(chunk, int64_t(p.seq_offsets[seq + 1]) - r0));
    if (nr <= 0) return;  // the whole block: this sequence has fewer chunks
    const int tid = arch::thread_rank();
    const int n_k = p.heads.n_k, n_v = p.heads.n_v, h = j % n_k;
    float* ks = arch::shared_tail<float>(s);
    float* qs = ks + chunk * k_stride;
    float* vs = qs + chunk * k_stride;
    float* as = qs;  // A overwrites q after the products below

    for (int e = tid; e < chunk * KDim; e += threads) {
      const int i = e / KDim, c = e % KDim;
      const int64_t at = ((r0 + i) * n_k + h) * KDim + c;
      ks[i * k_stride + c] = i < nr ? p.t.k[at] : 0.0f;
      qs[i * k_stride + c] = i < nr ? p.t.q[at] : 0.0f;
    }
    for (int e = tid; e < chunk * VDim; e += threads) {
      const int i = e / VDim, c = e % VDim;
      vs[i * v_stride + c] = i < nr ? p.t.v[((r0 + i) * n_v + j) * VDim + c] : 0.0f;
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
    arch::sync_block();
    if (tid < nr) p.t.g[(r0 + tid) * n_v + j] = s.g[tid];

    // A_ij = beta_i (k_i . k_j) e^(G_i - G_j), j < i;   Aqk_ij = (q_i . k_j) e^(G_i - G_j), j <= i.
    // Thread (ti, tc) computes rows ti + 16 a and columns tc + 16 b (a, b < 4) of both.
    static_assert(threads == 256 && chunk == 64, "the 4 x 4 entry tiles assume 256 threads and 64 rows");
    const int ti = tid / 16, tc = tid % 16;
    float kk[4][4] = {}, qk[4][4] = {};
    for (int d = 0; d < KDim; ++d) {
      float ki[4], qi[4], kc[4];
      Q35_UNROLL
      for (int a = 0; a < 4; ++a) {
        ki[a] = ks[(ti + 16 * a) * k_stride + d];
        qi[a] = qs[(ti + 16 * a) * k_stride + d];
        kc[a] = ks[(tc + 16 * a) * k_stride + d];
      }
      Q35_UNROLL
      for (int a = 0; a < 4; ++a) {
        Q35_UNROLL
        for (int b = 0; b < 4; ++b) {
          kk[a][b] += ki[a] * kc[b];
          qk[a][b] += qi[a] * kc[b];
        }
      }
    }
    arch::sync_block();  // every thread is done reading q
    Q35_UNROLL
    for (int a = 0; a < 4; ++a) {
      const int i = ti + 16 * a;
      Q35_UNROLL
      for (int b = 0; b < 4; ++b) {
        const int c = tc + 16 * b;
        const float decay = c <= i ? arch::fast_exp(s.g[i] - s.g[c]) : 0.0f;
        as[i * chunk + c] = c < i ? s.beta[i] * kk[a][b] * decay : 0.0f;
        if (i < nr) p.t.aqk[((r0 + i) * n_v + j) * chunk + c] = qk[a][b] * decay;
      }
    }
    arch::sync_block();

    // Right-hand sides: beta v and beta e^G k, in place
    for (int e = tid; e < chunk * KDim; e += threads) {
      const int i = e / KDim, c = e % KDim;
      ks[i * k_stride + c] *= s.beta[i] * arch::fast_exp(s.g[i]);
    }
    for (int e = tid; e < chunk * VDim; e += threads) {
      const int i = e / VDim, c = e % VDim;
      vs[i * v_stride + c] *= s.beta[i];
    }
    arch::sync_block();

    // (I + A) X = B by forward substitution, one column per thread: x_i = b_i - sum_{c < i} A_ic x_c
    for (int col = tid; col < VDim + KDim; col += threads) {
      float* xcol = col < VDim ? vs + col : ks + (col - VDim);
      const int stride = col < VDim ? v_stride : k_stride;
      for (int i = 1; i < nr; ++i) {
        float acc = xcol[i * stride];
        for (int c = 0; c < i; ++c) acc -= as[i * chunk + c] * xcol[c * stride];
        xcol[i * stride] = acc;
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
