// attn_paged_kernel: causal GQA attention of new tokens over a paged KV cache, for decode (one token
// per sequence) and prefill (many), with split-KV: fp32 scores, online softmax, fp32 accumulation.
//
// Thread-to-data mapping. Block (tile, seq, z) serves Rows query rows = tokens_per_block tokens x
// heads_per_block q heads of one kv head (z = (kv_head * n_splits + split) * n_chunks + chunk), over the
// keys of its split. The 128 threads form key streams of L lanes (L = min(32, head_dim * sizeof(T) / 16));
// stream i takes key groups i, i + n_streams, ... of U consecutive keys (one page), lane l of a stream
// holding dims l*E .. l*E+E-1 of q, K, V and the output, so the heads of a group share one read of
// K/V. Streams merge through shared memory; with one split the block writes o * sigmoid(gate), else
// it writes its normalised partial o and log-sum-exp for attn_merge_kernel.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "q35/arch/math.hpp"
#include "q35/arch/thread.hpp"
#include "q35/arch/vector_load.hpp"
#include "q35/core/config.hpp"
#include "q35/core/dim3.hpp"
#include "q35/core/vec.hpp"
#include "q35/ops/attention.hpp"

namespace q35::kernels {

// The inputs of the paged attention kernels (attn_paged_kernel, attn_prefill_mma_kernel).
template <class T>
struct attn_params {
  const float* qg;                  // [n_tokens][n_heads][2 * HeadDim]: per head [q (normed, roped) | gate]
  const int32_t* seq_offsets;       // [n_seqs + 1]
  const int32_t* positions;         // [n_tokens]: the token attends to keys 0 .. position
  const int32_t* page_row_offsets;  // [n_seqs + 1]
  const int32_t* page_indices;      // [page_row_offsets[n_seqs]]
  const int32_t* seq_lens;          // [n_seqs]: keys held by each sequence
  const T* k_cache;                 // [n_pages][n_kv_heads][page_tokens][HeadDim]
  const T* v_cache;                 // [n_pages][n_kv_heads][page_tokens][HeadDim]
  float* out;                       // [n_tokens][n_heads][HeadDim]: o * sigmoid(gate) (n_splits == 1)
  float* part_o;                    // [n_splits][n_tokens * n_heads][HeadDim]: normalised partial o (n_splits > 1)
  float* part_lse;                  // [n_splits][n_tokens * n_heads]: log-sum-exp of the scores, -inf if none
                                    // (the partial o of such a row may be left unwritten)
  int64_t n_tokens;
  int n_heads, n_kv_heads, page_shift;              // page_tokens = 1 << page_shift (attn_paged: a multiple of U)
  int heads_per_block, n_chunks, tokens_per_block;  // heads_per_block * tokens_per_block <= the kernel's rows
  // split i: keys [i * k, (i+1) * k) with k = split_keys (a multiple of 4) or, where split_keys is 0, k from
  // the sequence's own length (attn_split_keys)
  int n_splits, split_keys, min_split_keys;
  int n_seqs, max_seq_tokens;
  float scale;  // 1 / sqrt(head_dim)
};

// Keys per split of sequence seq: p.split_keys, or (0) its seq_lens entry cut into at most n_splits whole
// 4-key groups of at least min_split_keys keys. Either way a row's splits depend on its own sequence only.
template <class T>
Q35_DEVICE int attn_split_keys(const attn_params<T>& p, int seq) {
  if (p.split_keys > 0) return p.split_keys;
  const int per = ceil_div(int(p.seq_lens[seq]), p.n_splits);
  return std::max(p.min_split_keys, (per + 3) / 4 * 4);
}

template <class T, int HeadDim, int Rows>
struct attn_paged_kernel {
  static constexpr int threads = 128;
  // Register budgets by rows (64 / 128 / 168 / 255): left to itself ptxas (nvcc 13) trimmed some instances
  // to an occupancy step and spilled 4-8 bytes (Rows 1 on sm_80, f32 Rows 4 on sm_90).
  static constexpr int min_blocks_per_sm = Rows == 1 ? 8 : Rows == 2 ? 4 : Rows == 4 ? 3 : 2;
  static constexpr int lanes = int(HeadDim * sizeof(T) / 16) < warp_size ? int(HeadDim * sizeof(T) / 16) : warp_size;
  static constexpr int elems = HeadDim / lanes;  // E: dims per lane
  static constexpr int n_streams = threads / lanes;
  // Keys per stream step (U): all U rows of K and V are loaded before the math; fewer for 8 rows,
  // whose q and accumulators already hold 16 * E registers.
  static constexpr int keys_per_step = Rows >= 8 ? 2 : 4;
  static_assert(lanes >= 8 && (lanes & (lanes - 1)) == 0, "lanes per key: a power of two 8..32");

  using params = attn_params<T>;
  struct shared_storage {
    float o[n_streams][Rows][HeadDim];  // each stream's unnormalised o
    float m[n_streams][Rows];
    float l[n_streams][Rows];
  };
  static dim3 grid(const params& p) {
    return dim3(unsigned(ceil_div(p.max_seq_tokens, p.tokens_per_block)), unsigned(p.n_seqs),
                unsigned(p.n_kv_heads * p.n_chunks * p.n_splits));
  }

  Q35_DEVICE void operator()(const params& p, shared_storage& s) const {
    constexpr int U = keys_per_step;
    const int seq = int(arch::block_idx().y);
    const int64_t tok0 = p.seq_offsets[seq];
    const int n_tok = int(p.seq_offsets[seq + 1] - tok0);
    const int t_first = int(arch::block_idx().x) * p.tokens_per_block;
    if (t_first >= n_tok) return;  // the whole block
    const int z = int(arch::block_idx().z);
    const int chunk = z % p.n_chunks;  // fastest: the chunks of a group read the same K/V close in time (L2)
    const int split = (z / p.n_chunks) % p.n_splits;
    const int kv_head = z / (p.n_splits * p.n_chunks);
    const int group = p.n_heads / p.n_kv_heads;
    const int h_first = kv_head * group + chunk * p.heads_per_block;
    const int n_h = std::min(p.heads_per_block, group - chunk * p.heads_per_block);
    const int n_t = std::min(p.tokens_per_block, n_tok - t_first);

    const int split_keys = attn_split_keys(p, seq);
    const int kb = split * split_keys;
    const int64_t n_rows = p.n_tokens * p.n_heads;
    // A split that starts past its sequence's end (seq_splits, or a fixed split_keys in a batch of mixed
    // lengths) writes only "no keys" for the merge.
    if (kb >= int(p.seq_lens[seq]) && p.n_splits > 1) {
      for (int r = arch::thread_rank(); r < p.heads_per_block * p.tokens_per_block; r += threads)
        if (r / p.heads_per_block < n_t && r % p.heads_per_block < n_h)
          p.part_lse[split * n_rows + (tok0 + t_first + r / p.heads_per_block) * p.n_heads + h_first +
                     r % p.heads_per_block] = -INFINITY;
      return;
    }

    // Row r = token r / heads_per_block, head r % heads_per_block; it sees keys < lim[r].
    int lim[Rows];
    int kmax = 0;
    Q35_UNROLL
    for (int r = 0; r < Rows; ++r) {
      const int ti = r / p.heads_per_block, hi = r % p.heads_per_block;
      const bool valid = ti < n_t && hi < n_h && r < p.heads_per_block * p.tokens_per_block;
      lim[r] = valid ? p.positions[tok0 + t_first + ti] + 1 : 0;
      kmax = std::max(kmax, lim[r]);
    }
    kmax = std::min(kmax, int(p.seq_lens[seq]));
    const int ke = std::min(kb + split_keys, kmax);

    const int stream = arch::thread_rank() / lanes, sl = arch::thread_rank() % lanes;
    // q scaled by 1 / sqrt(head_dim), the lane's dims of each row
    float q[Rows][elems];
    Q35_UNROLL
    for (int r = 0; r < Rows; ++r) {
      const float* src =
          p.qg +
          ((tok0 + t_first + r / p.heads_per_block) * p.n_heads + h_first + r % p.heads_per_block) * 2 * HeadDim +
          sl * elems;
      Q35_UNROLL
      for (int c = 0; c < elems / 4; ++c) {
        const vec16<float> v = lim[r] > 0 ? arch::load_16(src + c * 4) : vec16<float>{};
        Q35_UNROLL
        for (int j = 0; j < 4; ++j) q[r][c * 4 + j] = lim[r] > 0 ? v[j] * p.scale : 0.0f;
      }
    }

    ops::online_softmax<Rows, elems> st;
    st.init();
    const int64_t page_row = p.page_row_offsets[seq];
    const int64_t head_stride = int64_t(HeadDim) << p.page_shift;  // one head's rows of one page
    // The same trip count for every stream of the block (the lanes of a warp reduce together). The loop
    // runs on the key index itself, so only it and ke stay live across the loop (not the split's start:
    // with seq_splits that comes from a global load and could not be rematerialised).
    for (int kg = kb; kg < ke; kg += n_streams * U) {
      const bool has_group = kg + stream * U < ke;
      const int k0 = has_group ? kg + stream * U : kg;  // an idle stream re-reads the step's first group, masked
      const int page = p.page_indices[page_row + (k0 >> p.page_shift)];
      const int64_t off = (int64_t(page) * p.n_kv_heads + kv_head) * head_stride +
                          int64_t(k0 & ((1 << p.page_shift) - 1)) * HeadDim + sl * elems;
      float kx[U][elems], vx[U][elems];
      Q35_UNROLL
      for (int u = 0; u < U; ++u) {
        ops::load_kv_chunk<T, elems>(p.k_cache + off + u * HeadDim, kx[u]);
        ops::load_kv_chunk<T, elems>(p.v_cache + off + u * HeadDim, vx[u]);
      }
      // s[r][u] = q_r . k_u (scaled), -inf where key k0 + u is outside the split or after the row's token
      float dots[Rows * U];
      Q35_UNROLL
      for (int r = 0; r < Rows; ++r) {
        Q35_UNROLL
        for (int u = 0; u < U; ++u) {
          float d = 0.0f;
          Q35_UNROLL
          for (int e = 0; e < elems; ++e) d += q[r][e] * kx[u][e];
          dots[r * U + u] = d;
        }
      }
      ops::segment_sum_all<lanes>(dots);
      float sc[Rows][U];
      Q35_UNROLL
      for (int u = 0; u < U; ++u) {
        const int key = k0 + u;
        const bool live = has_group && key < ke;
        Q35_UNROLL
        for (int r = 0; r < Rows; ++r) sc[r][u] = live && key < lim[r] ? dots[r * U + u] : -INFINITY;
        if (!live) {  // unwritten slots may hold any bits: keep them out of o
          Q35_UNROLL
          for (int e = 0; e < elems; ++e) vx[u][e] = 0.0f;
        }
      }
      st.template add<U>(sc, vx);
    }

    // Merge the streams: M = max_i m_i, L = sum_i l_i e^(m_i - M), O = sum_i o_i e^(m_i - M).
    Q35_UNROLL
    for (int r = 0; r < Rows; ++r) {
      Q35_UNROLL
      for (int e = 0; e < elems; ++e) s.o[stream][r][sl * elems + e] = st.o[r][e];
      if (sl == 0) {
        s.m[stream][r] = st.m[r];
        s.l[stream][r] = st.l[r];
      }
    }
    arch::sync_block();
    for (int idx = arch::thread_rank(); idx < Rows * HeadDim; idx += threads) {
      const int r = idx / HeadDim, d = idx % HeadDim;
      if (r / p.heads_per_block >= n_t || r % p.heads_per_block >= n_h || r >= p.heads_per_block * p.tokens_per_block)
        continue;  // not a row of this block
      float mx = -INFINITY;
      for (int i = 0; i < n_streams; ++i) mx = fmaxf(mx, s.m[i][r]);
      float l = 0.0f, o = 0.0f;
      for (int i = 0; i < n_streams; ++i) {
        const float w = ops::merge_weight(s.m[i][r], mx);
        l += s.l[i][r] * w;
        o += s.o[i][r][d] * w;
      }
      const int64_t row = (tok0 + t_first + r / p.heads_per_block) * p.n_heads + h_first + r % p.heads_per_block;
      const float on = l > 0.0f ? o / l : 0.0f;
      if (p.n_splits == 1) {
        // out = o * sigmoid(gate)
        p.out[row * HeadDim + d] = on * arch::sigmoid(p.qg[row * 2 * HeadDim + HeadDim + d]);
      } else {
        if (l > 0.0f) p.part_o[(split * n_rows + row) * HeadDim + d] = on;  // the merge skips -inf rows
        if (d == 0) p.part_lse[split * n_rows + row] = l > 0.0f ? mx + logf(l) : -INFINITY;
      }
    }
  }
};

}  // namespace q35::kernels
