// gdn_chunk_state_kernel: the inter-chunk pass of the chunked delta rule, sequential over the chunks
// of a sequence (spec §2.2). With incoming state S (d_k x d_v) and G_C = G of the chunk's last row:
//   V_new = W - U S
//   O     = (q e^G) S + Aqk V_new
//   S    <- e^(G_C) S + (k e^(G_C - G))^T V_new
// Value columns of S are independent, so blocks split them.
//
// Every product runs on tensor cores at fp32 grade (ops/mma_split.hpp: operands staged as 3 bf16
// planes, 6 mma per 16 columns), written transposed where that puts the reduced index along rows:
//   V_new = W - U S            (A = U [row][key], B = S^T [col][key])
//   O     = q' S + Aqk V_new   (A = q e^G, Aqk [row][.], B = S^T, V_new^T [col][row])
//   S^T  <- e^(G_C) S^T + V_new^T K'   (A = V_new^T, B = K' = k e^(G_C - G) [row][key], transposed load)
//
// Thread-to-data mapping: block (value tile of 32 columns, v-head j, sequence i), 8 warps, for the
// whole sequence. S^T[tile][key] (32 x d_k) stays in fp32 accumulator fragments: warp w owns columns
// 16 (w % 2) .. + 16 and keys (w / 2) d_k / 4 .. + d_k / 4 (d_k / 32 n8 tiles); each chunk re-stages it
// as planes for the products. V_new and O: warp w computes rows 16 (w / 2) .. + 16, columns
// 16 (w % 2) .. + 16 of the tile. The state update is a fresh product per chunk added in fp32
// (S = e^(G_C) S + tile), so the long-lived state sees 2 roundings per chunk, not the mma chain's.
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
#include "q35/kernels/gdn_chunk.hpp"
#include "q35/kv/recurrent_state.hpp"
#include "q35/ops/mma_split.hpp"

namespace q35::kernels {

template <int KDim, int VDim>
struct gdn_chunk_state_kernel {
  static constexpr int chunk = gdn_chunk_size;
  static constexpr int tile = 32;  // value columns per block
  static constexpr int threads = 256;
  static constexpr int s_tiles = KDim / 32;  // n8 tiles of S^T per warp (keys)
  static_assert(VDim % tile == 0 && KDim % 64 == 0 && chunk == 64, "head dims: 64 or 128");
  // The chunk's U, q' and K' rows are staged k_part keys at a time: all 128 at once would make 120 KB,
  // more than an sm_86 / sm_89 GPU gives a block (99 KB). The products take the parts in key order
  // into the same accumulators, so each output is the same mma chain as with whole rows.
  static constexpr int k_part = 64;
  static constexpr int n_parts = KDim / k_part;

  struct params {
    const int32_t* seq_offsets;  // [n_seqs + 1]
    const int32_t* slots;        // [n_seqs]
    kv::gdn_state_view state;
    gdn_chunk_tensors t;
    int n_seqs;
    ops::gdn_heads heads;
  };
  // d = 128: 26 + 27 + 27 + 14 KB = 93 KB (2 blocks per sm_90 SM, 1 per sm_86 / sm_89 SM); d = 64: 81 KB
  struct alignas(16) shared_storage {
    ops::split_matrix<tile, KDim> st;    // S^T [col][key]
    ops::split_matrix<chunk, k_part> m;  // U, then q e^G, then k e^(G_C - G): [row][key - k0] of a part
    ops::split_matrix<chunk, chunk> aq;  // Aqk [row][row']
    ops::split_matrix<tile, chunk> vt;   // V_new^T [col][row]
    float g[chunk];                      // G of the chunk
  };
  static dim3 grid(const params& p) { return dim3(unsigned(VDim / tile), unsigned(p.heads.n_v), unsigned(p.n_seqs)); }

  // m[i][0 .. k_part) <- keys k0 .. k0 + k_part of src row (r0 + i) (a [n_tokens][n_heads][KDim] tensor,
  // head hd) times scale(i), zero past the nr valid rows; 16-byte loads, 8 keys per thread and step.
  // Ends with a barrier (the planes are complete).
  template <class Scale>
  static Q35_DEVICE void load_rows(ops::split_matrix<chunk, k_part>& m, const float* src, int k0, int64_t r0, int nr,
                                   int n_heads, int hd, Scale scale) {
    constexpr int vecs = k_part / 8;
    for (int e = arch::thread_rank(); e < chunk * vecs; e += threads) {
      const int i = e / vecs, c = 8 * (e % vecs);
      m.load8(i, c, src + (i < nr ? ((r0 + i) * n_heads + hd) * KDim + k0 + c : 0), i < nr, i < nr ? scale(i) : 0.0f);
    }
    arch::sync_block();
  }

  Q35_DEVICE void operator()(const params& p, shared_storage& s) const {
    const int vt = int(arch::block_idx().x), j = int(arch::block_idx().y), seq = int(arch::block_idx().z);
    const int64_t begin = p.seq_offsets[seq], end = p.seq_offsets[seq + 1];
    if (end <= begin) return;  // the whole block
    const int tid = arch::thread_rank(), warp = arch::warp_id();
    const int n_k = p.heads.n_k, n_v = p.heads.n_v, h = j % n_k;
    const int c0 = vt * tile;  // first value column of the tile
    // pool: S[key][value c] at c d_k + key, i.e. S^T row-major
    float* pool = p.state.ssm_head(p.slots[seq], j);
    // the warp's S^T tiles: columns sc0 + .., keys sk0 + 8 n + ..
    const int sc0 = 16 * (warp % 2), sk0 = (warp / 2) * (KDim / 4);
    // the warp's V_new / O tile: rows 16 (w / 2), columns 16 (w % 2) (2 n8 tiles)
    const int or0 = 16 * (warp / 2), oc0 = 16 * (warp % 2);

    arch::mma_c_f32_16x8 sacc[s_tiles];
    Q35_UNROLL
    for (int n = 0; n < s_tiles; ++n) {
      Q35_UNROLL
      for (int i = 0; i < 4; ++i) {
        const arch::mma_coord at = ops::mma_acc_at(sc0, sk0 + 8 * n, i);  // (col, key)
        sacc[n].r[i] = pool[int64_t(c0 + at.row) * KDim + at.col];
      }
    }

    for (int64_t r0 = begin; r0 < end; r0 += chunk) {
      const int nr = int(std::min<int64_t>(chunk, end - r0));
      arch::sync_block();  // the previous chunk is done with every plane and g
      // S^T planes from the fragments
      Q35_UNROLL
      for (int n = 0; n < s_tiles; ++n) {
        Q35_UNROLL
        for (int i = 0; i < 4; ++i) {
          const arch::mma_coord at = ops::mma_acc_at(sc0, sk0 + 8 * n, i);
          s.st.set(at.row, at.col, sacc[n].r[i]);
        }
      }
      for (int e = tid; e < chunk * chunk / 8; e += threads) {
        const int i = e / (chunk / 8), c = 8 * (e % (chunk / 8));
        s.aq.load8(i, c, p.t.aqk + (i < nr ? ((r0 + i) * n_v + j) * chunk + c : 0), i < nr);
      }
      if (tid < chunk) s.g[tid] = tid < nr ? p.t.g[(r0 + tid) * n_v + j] : 0.0f;
      // (load_rows' barrier completes S^T, Aqk and g too)

      // V_new = W - U S (padding rows 0), kept as V_new^T planes
      arch::mma_c_f32_16x8 acc[2] = {};
      for (int k0 = 0; k0 < KDim; k0 += k_part) {
        load_rows(s.m, p.t.u, k0, r0, nr, n_v, j, [](int) { return 1.0f; });
        ops::mma_split_product<false, 2, k_part>(acc, s.m, or0, s.st, oc0, k0, 1, k0);
        arch::sync_block();  // U's part read
      }
      Q35_UNROLL
      for (int n = 0; n < 2; ++n) {
        Q35_UNROLL
        for (int i = 0; i < 4; ++i) {
          const arch::mma_coord at = ops::mma_acc_at(or0, oc0 + 8 * n, i);  // (row, col)
          const float w = at.row < nr ? p.t.w[((r0 + at.row) * n_v + j) * VDim + c0 + at.col] : 0.0f;
          s.vt.set(at.col, at.row, at.row < nr ? w - acc[n].r[i] : 0.0f);
        }
      }
      // (the next load_rows' barrier completes V_new^T)

      // O = (q e^G) S + Aqk V_new  (Aqk is 0 above the diagonal and on padding rows)
      Q35_UNROLL
      for (int n = 0; n < 2; ++n) acc[n] = {};
      for (int k0 = 0; k0 < KDim; k0 += k_part) {
        load_rows(s.m, p.t.q, k0, r0, nr, n_k, h, [&](int i) { return arch::fast_exp(s.g[i]); });
        ops::mma_split_product<false, 2, k_part>(acc, s.m, or0, s.st, oc0, k0, 1, k0);
        arch::sync_block();  // q's part read
      }
      ops::mma_split_product<false, 2, chunk>(acc, s.aq, or0, s.vt, oc0, 0);
      Q35_UNROLL
      for (int n = 0; n < 2; ++n) {
        Q35_UNROLL
        for (int i = 0; i < 4; ++i) {
          const arch::mma_coord at = ops::mma_acc_at(or0, oc0 + 8 * n, i);
          if (at.row < nr) p.t.o[((r0 + at.row) * n_v + j) * VDim + c0 + at.col] = acc[n].r[i];
        }
      }
      const float g_last = s.g[nr - 1];

      // S^T <- e^(G_C) S^T + V_new^T K': a warp's keys lie in one part, so its product runs whole in
      // that part's pass
      arch::mma_c_f32_16x8 upd[s_tiles] = {};
      for (int k0 = 0; k0 < KDim; k0 += k_part) {
        load_rows(s.m, p.t.k, k0, r0, nr, n_k, h, [&](int i) { return arch::fast_exp(g_last - s.g[i]); });
        if (sk0 >= k0 && sk0 < k0 + k_part)
          ops::mma_split_product<true, s_tiles, chunk>(upd, s.vt, sc0, s.m, sk0 - k0, 0);
        arch::sync_block();  // K''s part read
      }
      const float decay = arch::fast_exp(g_last);
      Q35_UNROLL
      for (int n = 0; n < s_tiles; ++n) {
        Q35_UNROLL
        for (int i = 0; i < 4; ++i) sacc[n].r[i] = sacc[n].r[i] * decay + upd[n].r[i];
      }
    }
    Q35_UNROLL
    for (int n = 0; n < s_tiles; ++n) {
      Q35_UNROLL
      for (int i = 0; i < 4; ++i) {
        const arch::mma_coord at = ops::mma_acc_at(sc0, sk0 + 8 * n, i);
        pool[int64_t(c0 + at.row) * KDim + at.col] = sacc[n].r[i];
      }
    }
  }
};

}  // namespace q35::kernels
