// attn_append_kernel: for every new token of a batch, split each head's projection into q and gate,
// RMSNorm + partial NEOX RoPE of q (in place) and of k, and write k and v into the token's KV page.
//
// Thread-to-data mapping: block (t, s) is token t of sequence s of the batch (blocks past a sequence's
// token count return); its threads first fill the token's cos/sin table, then each warp takes heads
// w, w + 4, ... of the list [q heads | k heads | v heads], lane l holding dims l*E .. l*E+E-1.
#pragma once

#include <cstdint>

#include "q35/arch/thread.hpp"
#include "q35/arch/vector_load.hpp"
#include "q35/core/config.hpp"
#include "q35/core/dim3.hpp"
#include "q35/core/numeric.hpp"
#include "q35/core/vec.hpp"
#include "q35/ops/rope.hpp"

namespace q35::kernels {

template <class T, int HeadDim>
struct attn_append_kernel {
  static constexpr int threads = 128;
  static constexpr int n_warps = threads / warp_size;
  static constexpr int elems = HeadDim / warp_size;  // E: dims per lane
  static_assert(HeadDim % (4 * warp_size) == 0, "head_dim: a multiple of 128");

  struct params {
    float* qg;                        // [n_tokens][n_heads][2 * HeadDim]: per head [q | gate]; q rewritten
    const float* k;                   // [n_tokens][n_kv_heads][HeadDim] (projection output)
    const float* v;                   // [n_tokens][n_kv_heads][HeadDim]
    const float* q_norm;              // [HeadDim]
    const float* k_norm;              // [HeadDim]
    const int32_t* seq_offsets;       // [n_seqs + 1]: tokens of sequence s are rows seq_offsets[s] ..
    const int32_t* positions;         // [n_tokens]: slot of each token in its sequence
    const int32_t* page_row_offsets;  // [n_seqs + 1] CSR rows of the page table
    const int32_t* page_indices;      // [page_row_offsets[n_seqs]]
    T* k_cache;                       // layer view: [n_pages][n_kv_heads][page_tokens][HeadDim]
    T* v_cache;                       // [n_pages][n_kv_heads][page_tokens][HeadDim]
    int n_heads, n_kv_heads, rope_dim, page_shift;  // page_tokens = 1 << page_shift
    float eps;
    double log2_rope_base;
    int n_seqs, max_seq_tokens;
  };
  struct shared_storage {
    float cs[HeadDim / 2][2];  // {cos, sin} of the token's rotary frequencies
  };
  static dim3 grid(const params& p) { return dim3(unsigned(p.max_seq_tokens), unsigned(p.n_seqs)); }

  Q35_DEVICE void operator()(const params& p, shared_storage& s) const {
    const int seq = int(arch::block_idx().y);
    const int64_t row = int64_t(p.seq_offsets[seq]) + arch::block_idx().x;
    if (row >= p.seq_offsets[seq + 1]) return;  // the whole block
    const int64_t pos = p.positions[row];
    for (int i = arch::thread_rank(); i < p.rope_dim / 2; i += threads)
      ops::rope_cos_sin(pos, i, p.rope_dim, p.log2_rope_base, s.cs[i][0], s.cs[i][1]);
    arch::sync_block();

    const int lane = arch::lane_id();
    const int page = p.page_indices[p.page_row_offsets[seq] + (pos >> p.page_shift)];
    const int64_t slot = pos & ((int64_t(1) << p.page_shift) - 1);
    const int n_jobs = p.n_heads + 2 * p.n_kv_heads;
    for (int job = arch::warp_id(); job < n_jobs; job += n_warps) {
      float x[elems], w[elems];
      const float* src;
      if (job < p.n_heads) {
        src = p.qg + (row * p.n_heads + job) * 2 * HeadDim;
      } else if (job < p.n_heads + p.n_kv_heads) {
        src = p.k + (row * p.n_kv_heads + (job - p.n_heads)) * HeadDim;
      } else {
        src = p.v + (row * p.n_kv_heads + (job - p.n_heads - p.n_kv_heads)) * HeadDim;
      }
      load(src + lane * elems, x);
      if (job < p.n_heads + p.n_kv_heads) {
        load(job < p.n_heads ? p.q_norm + lane * elems : p.k_norm + lane * elems, w);
        ops::head_norm_rope(x, w, lane, HeadDim, p.eps, p.rope_dim, s.cs);
      }
      if (job < p.n_heads) {  // q back in place, ready for attention
        float* dst = p.qg + (row * p.n_heads + job) * 2 * HeadDim + lane * elems;
        Q35_UNROLL
        for (int c = 0; c < elems / 4; ++c) {
          vec16<float> o;
          Q35_UNROLL
          for (int j = 0; j < 4; ++j) o[j] = x[c * 4 + j];
          arch::store_16(dst + c * 4, o);
        }
      } else {
        const bool is_k = job < p.n_heads + p.n_kv_heads;
        const int h = is_k ? job - p.n_heads : job - p.n_heads - p.n_kv_heads;
        T* dst = (is_k ? p.k_cache : p.v_cache) + ((int64_t(page) * p.n_kv_heads + h) << p.page_shift) * HeadDim +
                 slot * HeadDim + lane * elems;
        Q35_UNROLL
        for (int e = 0; e < elems; ++e) dst[e] = from_float<T>(x[e]);
      }
    }
  }

 private:
  // E floats at p (16-byte aligned) into registers.
  static Q35_DEVICE void load(const float* p, float (&x)[elems]) {
    Q35_UNROLL
    for (int c = 0; c < elems / 4; ++c) {
      const vec16<float> v = arch::load_16(p + c * 4);
      Q35_UNROLL
      for (int j = 0; j < 4; ++j) x[c * 4 + j] = v[j];
    }
  }
};

}  // namespace q35::kernels
