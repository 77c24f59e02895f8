// gdn_chunk_state_kernel: the inter-chunk pass of the chunked delta rule, sequential over the chunks
// of a sequence (spec §2.2). With incoming state S (d_k x d_v) and G_C = G of the chunk's last row:
//   V_new = W - U S
//   O     = (q e^G) S + Aqk V_new
//   S    <- e^(G_C) S + (k e^(G_C - G))^T V_new
// Value columns of S are independent, so blocks split them.
//
// Thread-to-data mapping: block (value tile, v-head j, sequence i) keeps S[:, tile] (d_k x 32) in
// shared memory for the whole sequence; thread t works on column t % 32 of the tile and rows
// t / 32 + 8 r of each product.
#pragma once

#include <algorithm>
#include <cstdint>

#include "q35/arch/math.hpp"
#include "q35/arch/thread.hpp"
#include "q35/core/config.hpp"
#include "q35/core/dim3.hpp"
#include "q35/kernels/gdn_chunk.hpp"
#include "q35/kv/recurrent_state.hpp"

namespace q35::kernels {

template <int KDim, int VDim>
struct gdn_chunk_state_kernel {
  static constexpr int chunk = gdn_chunk_size;
  static constexpr int tile = 32;  // value columns per block
  static constexpr int threads = 256;
  static constexpr int row_groups = threads / tile;  // rows handled at once
  static_assert(VDim % tile == 0 && KDim % row_groups == 0, "head dims: multiples of 32");

  struct params {
    const int32_t* seq_offsets;  // [n_seqs + 1]
    const int32_t* slots;        // [n_seqs]
    kv::gdn_state_view state;
    gdn_chunk_tensors t;
    int n_seqs;
    ops::gdn_heads heads;
  };
  struct shared_storage {
    float g[chunk];  // G of the chunk
  };
  // st [KDim][tile], m [chunk][KDim] (U, then q e^G, then k e^(G_C - G)), vn [chunk][tile], aq [chunk][chunk]
  static size_t dynamic_shared_bytes(const params&) {
    return sizeof(float) * size_t(KDim * tile + chunk * KDim + chunk * tile + chunk * chunk);
  }
  static dim3 grid(const params& p) { return dim3(unsigned(VDim / tile), unsigned(p.heads.n_v), unsigned(p.n_seqs)); }

  Q35_DEVICE void operator()(const params& p, shared_storage& s) const {
    const int vt = int(arch::block_idx().x), j = int(arch::block_idx().y), seq = int(arch::block_idx().z);
    const int64_t begin = p.seq_offsets[seq], end = p.seq_offsets[seq + 1];
    if (end <= begin) return;  // the whole block
    const int tid = arch::thread_rank(), col = tid % tile, rg = tid / tile;
    const int n_k = p.heads.n_k, n_v = p.heads.n_v, h = j % n_k;
    const int c0 = vt * tile;  // first value column of the tile
    float* st = arch::shared_tail<float>(s);
    float* m = st + KDim * tile;
    float* vn = m + chunk * KDim;
    float* aq = vn + chunk * tile;
    // pool: S[key][value c] at c d_k + key
    float* pool = p.state.ssm_head(p.slots[seq], j);

    for (int e = tid; e < KDim * tile; e += threads) {
      const int c = e / KDim, key = e % KDim;  // consecutive threads read consecutive keys of a column
      st[key * tile + c] = pool[int64_t(c0 + c) * KDim + key];
    }

    for (int64_t r0 = begin; r0 < end; r0 += chunk) {
      const int nr = int(std::min<int64_t>(chunk, end - r0));
      arch::sync_block();  // the previous chunk is done with m, vn, aq, g
      for (int e = tid; e < chunk * KDim; e += threads) {
        const int i = e / KDim, key = e % KDim;
        m[e] = i < nr ? p.t.u[((r0 + i) * n_v + j) * KDim + key] : 0.0f;
      }
      for (int e = tid; e < chunk * chunk; e += threads) {
        const int i = e / chunk;
        aq[e] = i < nr ? p.t.aqk[((r0 + i) * n_v + j) * chunk + e % chunk] : 0.0f;
      }
      if (tid < chunk) s.g[tid] = tid < nr ? p.t.g[(r0 + tid) * n_v + j] : 0.0f;
      arch::sync_block();

      // V_new = W - U S
      for (int r = 0; r < chunk / row_groups; ++r) {
        const int i = rg + r * row_groups;
        float acc = 0.0f;
        for (int key = 0; key < KDim; ++key) acc += m[i * KDim + key] * st[key * tile + col];
        vn[i * tile + col] = i < nr ? p.t.w[((r0 + i) * n_v + j) * VDim + c0 + col] - acc : 0.0f;
      }
      arch::sync_block();
      for (int e = tid; e < chunk * KDim; e += threads) {
        const int i = e / KDim, key = e % KDim;
        m[e] = i < nr ? p.t.q[((r0 + i) * n_k + h) * KDim + key] * arch::fast_exp(s.g[i]) : 0.0f;
      }
      arch::sync_block();

      // O = (q e^G) S + Aqk V_new
      for (int r = 0; r < chunk / row_groups; ++r) {
        const int i = rg + r * row_groups;
        float acc = 0.0f;
        for (int key = 0; key < KDim; ++key) acc += m[i * KDim + key] * st[key * tile + col];
        for (int c = 0; c <= i; ++c) acc += aq[i * chunk + c] * vn[c * tile + col];
        if (i < nr) p.t.o[((r0 + i) * n_v + j) * VDim + c0 + col] = acc;
      }
      arch::sync_block();
      const float g_last = s.g[nr - 1];
      for (int e = tid; e < chunk * KDim; e += threads) {
        const int i = e / KDim, key = e % KDim;
        m[e] = i < nr ? p.t.k[((r0 + i) * n_k + h) * KDim + key] * arch::fast_exp(g_last - s.g[i]) : 0.0f;
      }
      arch::sync_block();

      // S <- e^(G_C) S + (k e^(G_C - G))^T V_new
      const float decay = arch::fast_exp(g_last);
      for (int r = 0; r < KDim / row_groups; ++r) {
        const int key = rg + r * row_groups;
        float acc = st[key * tile + col] * decay;
        for (int i = 0; i < nr; ++i) acc += m[i * KDim + key] * vn[i * tile + col];
        st[key * tile + col] = acc;
      }
    }
    arch::sync_block();
    for (int e = tid; e < KDim * tile; e += threads) {
      const int c = e / KDim, key = e % KDim;
      pool[int64_t(c0 + c) * KDim + key] = st[key * tile + c];
    }
  }
};

}  // namespace q35::kernels
