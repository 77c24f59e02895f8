// gdn_chunk_state_kernel: the inter-chunk pass of the chunked delta rule, sequential over the chunks
// of a sequence (spec §2.2). With incoming state S (d_k x d_v) and G_C = G of the chunk's last row:
//   V_new = W - U S
//   O     = (q e^G) S + Aqk V_new
//   S    <- e^(G_C) S + (k e^(G_C - G))^T V_new
// Value columns of S are independent, so blocks split them.
//
// Thread-to-data mapping: block (value tile, v-head j, sequence i) keeps S[:, tile] (d_k x 32) in
// shared memory for the whole sequence; thread t works on column t % 32 of the tile: rows
// t / 32 + 8 r of V_new and O, keys (t / 32) d_k / 8 + e of the S update, accumulated in registers
// from 16-byte shared loads.
#pragma once

#include <algorithm>
#include <cstdint>

#include "q35/arch/math.hpp"
#include "q35/arch/thread.hpp"
#include "q35/arch/vector_load.hpp"
#include "q35/core/config.hpp"
#include "q35/core/dim3.hpp"
#include "q35/core/vec.hpp"
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

  static constexpr int rows_per_thread = chunk / row_groups;  // rows rg + row_groups r of V_new and O
  static constexpr int keys_per_thread = KDim / row_groups;   // keys rg kpt .. rg kpt + kpt - 1 of S
  static_assert(keys_per_thread % 4 == 0 && chunk % 4 == 0, "16-byte shared loads");

  // m[i][0 .. KDim) <- src row (r0 + i) (a [n_tokens][n_heads][KDim] tensor, head hd) times
  // scale(i), zero past the nr valid rows; 16-byte loads.
  template <class Scale>
  static Q35_DEVICE void load_rows(float* m, const float* src, int64_t r0, int nr, int n_heads, int hd, Scale scale) {
    constexpr int vecs = KDim / 4;
    for (int e = arch::thread_rank(); e < chunk * vecs; e += threads) {
      const int i = e / vecs, k4 = e % vecs;
      vec<float, 4> v{};
      if (i < nr) {
        v = arch::load_16(src + ((r0 + i) * n_heads + hd) * KDim + 4 * k4);
        const float f = scale(i);
        Q35_UNROLL
        for (int q = 0; q < 4; ++q) v[q] *= f;
      }
      *reinterpret_cast<vec<float, 4>*>(m + i * KDim + 4 * k4) = v;
    }
  }

  // acc[r] = sum_key m[rg + row_groups r][key] st[key][col]
  static Q35_DEVICE void rows_times_state(const float* m, const float* st, int rg, int col,
                                          float (&acc)[rows_per_thread]) {
    Q35_UNROLL
    for (int r = 0; r < rows_per_thread; ++r) acc[r] = 0.0f;
    for (int key = 0; key < KDim; key += 4) {
      float sv[4];
      Q35_UNROLL
      for (int q = 0; q < 4; ++q) sv[q] = st[(key + q) * tile + col];
      Q35_UNROLL
      for (int r = 0; r < rows_per_thread; ++r) {
        const vec<float, 4> m4 = *reinterpret_cast<const vec<float, 4>*>(m + (rg + row_groups * r) * KDim + key);
        Q35_UNROLL
        for (int q = 0; q < 4; ++q) acc[r] += m4[q] * sv[q];
      }
    }
  }

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
      load_rows(m, p.t.u, r0, nr, n_v, j, [](int) { return 1.0f; });
      for (int e = tid; e < chunk * chunk; e += threads) {
        const int i = e / chunk;
        aq[e] = i < nr ? p.t.aqk[((r0 + i) * n_v + j) * chunk + e % chunk] : 0.0f;
      }
      if (tid < chunk) s.g[tid] = tid < nr ? p.t.g[(r0 + tid) * n_v + j] : 0.0f;
      arch::sync_block();

      // V_new = W - U S
      float acc[rows_per_thread];
      rows_times_state(m, st, rg, col, acc);
      Q35_UNROLL
      for (int r = 0; r < rows_per_thread; ++r) {
        const int i = rg + row_groups * r;
        vn[i * tile + col] = i < nr ? p.t.w[((r0 + i) * n_v + j) * VDim + c0 + col] - acc[r] : 0.0f;
      }
      arch::sync_block();
      load_rows(m, p.t.q, r0, nr, n_k, h, [&](int i) { return arch::fast_exp(s.g[i]); });
      arch::sync_block();

      // O = (q e^G) S + Aqk V_new  (Aqk is 0 above the diagonal and on padding rows)
      rows_times_state(m, st, rg, col, acc);
      for (int c = 0; c < chunk; c += 4) {
        float v[4];
        Q35_UNROLL
        for (int q = 0; q < 4; ++q) v[q] = vn[(c + q) * tile + col];
        Q35_UNROLL
        for (int r = 0; r < rows_per_thread; ++r) {
          const vec<float, 4> a4 = *reinterpret_cast<const vec<float, 4>*>(aq + (rg + row_groups * r) * chunk + c);
          Q35_UNROLL
          for (int q = 0; q < 4; ++q) acc[r] += a4[q] * v[q];
        }
      }
      Q35_UNROLL
      for (int r = 0; r < rows_per_thread; ++r) {
        const int i = rg + row_groups * r;
        if (i < nr) p.t.o[((r0 + i) * n_v + j) * VDim + c0 + col] = acc[r];
      }
      arch::sync_block();
      const float g_last = s.g[nr - 1];
      load_rows(m, p.t.k, r0, nr, n_k, h, [&](int i) { return arch::fast_exp(g_last - s.g[i]); });
      arch::sync_block();

      // S <- e^(G_C) S + (k e^(G_C - G))^T V_new
      const float decay = arch::fast_exp(g_last);
      const int k0 = rg * keys_per_thread;
      float sk[keys_per_thread];
      Q35_UNROLL
      for (int e = 0; e < keys_per_thread; ++e) sk[e] = st[(k0 + e) * tile + col] * decay;
      for (int i = 0; i < nr; ++i) {
        const float v = vn[i * tile + col];
        Q35_UNROLL
        for (int e = 0; e < keys_per_thread; e += 4) {
          const vec<float, 4> m4 = *reinterpret_cast<const vec<float, 4>*>(m + i * KDim + k0 + e);
          Q35_UNROLL
          for (int q = 0; q < 4; ++q) sk[e + q] += m4[q] * v;
        }
      }
      Q35_UNROLL
      for (int e = 0; e < keys_per_thread; ++e) st[(k0 + e) * tile + col] = sk[e];
    }
    arch::sync_block();
    for (int e = tid; e < KDim * tile; e += threads) {
      const int c = e / KDim, key = e % KDim;
      pool[int64_t(c0 + c) * KDim + key] = st[key * tile + c];
    }
  }
};

}  // namespace q35::kernels
