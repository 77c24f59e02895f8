// gdn_prep_kernel: first step of the chunked Gated DeltaNet prefill: per token, conv1d + SiLU of the
// raw projections, L2 norm of q and k (q also scaled by 1 / sqrt(d_k)), beta and g (spec §2.2 steps
// 1-3). It reads the conv state but does not update it (gdn_output_kernel does, after every reader).
//
// Thread-to-data mapping: block (row, k-head h) handles q and k of k-head h (thread = key channel)
// and v, beta, g of the v-heads of its group, h + m n_k (thread = value channels, strided).
#pragma once

#include <cmath>
#include <cstdint>

#include "q35/arch/thread.hpp"
#include "q35/block/reduce.hpp"
#include "q35/core/config.hpp"
#include "q35/core/dim3.hpp"
#include "q35/kernels/gdn_recurrent.hpp"
#include "q35/ops/gdn.hpp"

namespace q35::kernels {

// The per-token tensors the chunked kernels pass on, in the layer's workspace.
struct gdn_chunk_tensors {
  float* q;     // [n_tokens][n_k][d_k]: l2-normalised q / sqrt(d_k)
  float* k;     // [n_tokens][n_k][d_k]: l2-normalised k
  float* v;     // [n_tokens][n_v][d_v]: conv + SiLU outputs
  float* beta;  // [n_tokens][n_v]: sigmoid(b)
  float* g;     // [n_tokens][n_v]: log-decay; gdn_chunk_kernel replaces it by its in-chunk cumulative sum
  float* w;     // [n_tokens][n_v][d_v]: W = L^-1 (beta v) per chunk
  float* u;     // [n_tokens][n_v][d_k]: U = L^-1 (beta e^G k) per chunk
  float* aqk;   // [n_tokens][n_v][chunk]: (q_i . k_j) e^(G_i - G_j) for j <= i within the chunk, else 0
  float* o;     // [n_tokens][n_v][d_v]: delta-rule outputs before the gated norm
};

// The sequence that row `row` belongs to: the last i with seq_offsets[i] <= row (binary search).
Q35_DEVICE int gdn_seq_of_row(const int32_t* seq_offsets, int n_seqs, int64_t row) {
  int lo = 0, hi = n_seqs - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (seq_offsets[mid] <= row) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  return lo;
}

template <int KDim, int VDim>
struct gdn_prep_kernel {
  static constexpr int threads = KDim;
  static_assert(KDim % warp_size == 0 && KDim <= max_block_threads, "KDim: a multiple of 32");

  struct params {
    gdn_core_inputs in;
    gdn_chunk_tensors out;
    int64_t n_tokens;
  };
  struct shared_storage {
    typename block::reduce<float, threads>::storage red;
  };

  static dim3 grid(const params& p) { return dim3(unsigned(p.n_tokens), unsigned(p.in.heads.n_k)); }

  Q35_DEVICE void operator()(const params& p, shared_storage& s) const {
    const gdn_core_inputs& in = p.in;
    const int64_t row = int64_t(arch::block_idx().x);
    const int h = int(arch::block_idx().y);
    const int tid = arch::thread_rank();
    const int seq = gdn_seq_of_row(in.seq_offsets, in.n_seqs, row);
    const int64_t row0 = in.seq_offsets[seq];
    const int t = int(row - row0);
    const int slot = in.slots[seq];
    const int n_k = in.heads.n_k, n_v = in.heads.n_v;

    // q_i, k_i = silu(conv) of key channel tid of k-head h (v-head h's window holds its q and k)
    const float q =
        ops::make_conv_channel<KDim, VDim>(in.qkv, row0, in.state, slot, in.conv_w, in.heads, h, tid).conv_silu(t);
    const float k = ops::make_conv_channel<KDim, VDim>(in.qkv, row0, in.state, slot, in.conv_w, in.heads, h, KDim + tid)
                        .conv_silu(t);
    // x / max(||x||, eps); q also / sqrt(d_k)
    const float qq = block::reduce<float, threads>::sum(q * q, s.red);
    arch::sync_block();
    const float kk = block::reduce<float, threads>::sum(k * k, s.red);
    const int64_t qk_at = (row * n_k + h) * KDim + tid;
    p.out.q[qk_at] = q / fmaxf(sqrtf(qq), ops::gdn_l2_eps) / sqrtf(float(KDim));
    p.out.k[qk_at] = k / fmaxf(sqrtf(kk), ops::gdn_l2_eps);

    for (int j = h; j < n_v; j += n_k) {
      Q35_UNROLL
      for (int c0 = 0; c0 < VDim; c0 += threads) {
        const int c = c0 + tid;
        if (VDim % threads == 0 || c < VDim) {
          p.out.v[(row * n_v + j) * VDim + c] =
              ops::make_conv_channel<KDim, VDim>(in.qkv, row0, in.state, slot, in.conv_w, in.heads, j, 2 * KDim + c)
                  .conv_silu(t);
        }
      }
    }
    // beta = sigmoid(b), g = ssm_a softplus(alpha + dt_bias) of the group's v-heads, one per thread
    for (int j = h + tid * n_k; j < n_v; j += threads * n_k) {
      p.out.beta[row * n_v + j] = ops::gdn_beta(in.b[row * n_v + j]);
      p.out.g[row * n_v + j] = ops::gdn_log_decay(in.alpha[row * n_v + j], in.dt_bias[j], in.ssm_a[j]);
    }
  }
};

}  // namespace q35::kernels
