// gdn_recurrent_kernel: the whole Gated DeltaNet core after the input projections, token by token,
// in one launch: conv1d over the raw inputs + SiLU, L2 norm of q and k, beta, g, the delta rule,
// and the gated RMSNorm with silu(z), writing the input of ssm_out (spec §2.2). It is the decode
// step (one token per sequence) and the sequential prefill (any number of tokens per sequence).
//
// Thread-to-data mapping: block (j, i) runs v-head j of sequence i over all its tokens. Thread t
// owns value column c = t / parts of S_j and keys_per_thread = 32 of its d_k keys (part q = t % parts:
// keys 4 (q + parts m) + e, m < 8, e < 4), held in registers for the whole sequence; the parts of a
// column are adjacent lanes and reduce with warp shuffles.
#pragma once

#include <cmath>
#include <cstdint>

#include "q35/arch/math.hpp"
#include "q35/arch/thread.hpp"
#include "q35/block/reduce.hpp"
#include "q35/core/config.hpp"
#include "q35/core/dim3.hpp"
#include "q35/core/vec.hpp"
#include "q35/kv/recurrent_state.hpp"
#include "q35/ops/gdn.hpp"
#include "q35/warp/reduce.hpp"

namespace q35::kernels {

// Inputs of the GDN core shared by every core kernel: the projections of the layer's tokens, the
// layer's small weights and which rows belong to which sequence and state slot.
struct gdn_core_inputs {
  const float* qkv;            // [n_tokens][conv_dim] raw attn_qkv outputs, conv_dim = 2 n_k d_k + n_v d_v
  const float* z;              // [n_tokens][n_v d_v] attn_gate outputs
  const float* b;              // [n_tokens][n_v] ssm_beta outputs (before the sigmoid)
  const float* alpha;          // [n_tokens][n_v] ssm_alpha outputs
  const float* conv_w;         // [conv_dim][conv_kernel] (GGUF ssm_conv1d, ne = [conv_kernel, conv_dim])
  const float* dt_bias;        // [n_v]
  const float* ssm_a;          // [n_v], -exp(A_log)
  const float* norm;           // [d_v] ssm_norm
  const int32_t* seq_offsets;  // [n_seqs + 1]: sequence i owns rows [seq_offsets[i], seq_offsets[i + 1])
  const int32_t* slots;        // [n_seqs]: state slot of sequence i (distinct within a launch)
  kv::gdn_state_view state;    // this layer's state, all slots
  int n_seqs;
  ops::gdn_heads heads;
  float eps;  // rms_eps of the gated norm
};

template <int KDim, int VDim>
struct gdn_recurrent_kernel {
  static constexpr int keys_per_thread = 32;
  static constexpr int parts = KDim / keys_per_thread;  // threads per value column
  static constexpr int key_vecs = keys_per_thread / 4;  // float4 groups per thread
  static constexpr int threads = VDim * parts;
  static constexpr int window = 2 * KDim + VDim;  // conv channels of one v-head
  static_assert(KDim % keys_per_thread == 0 && (parts & (parts - 1)) == 0 && parts <= warp_size,
                "KDim: 32 times a power of two");
  static_assert(threads % warp_size == 0 && threads <= max_block_threads && threads >= 2 * warp_size,
                "VDim * KDim / 32 threads must make a block of 2..32 warps");

  struct params {
    gdn_core_inputs in;
    float* y;  // [n_tokens][n_v d_v]: rms(o) * norm * silu(z), the input of ssm_out
  };
  struct shared_storage {
    alignas(16) float q[KDim];  // conv + SiLU outputs of the current token (not yet normalised)
    alignas(16) float k[KDim];
    float v[VDim];
    float inv_norm[2];  // [q: 1 / (max(||q||, eps) sqrt(d_k)), k: 1 / max(||k||, eps)]
    typename block::reduce<float, threads>::storage red;
  };

  static dim3 grid(const params& p) { return dim3(unsigned(p.in.heads.n_v), unsigned(p.in.n_seqs)); }

  static Q35_DEVICE int key_of(int part, int m, int e) { return 4 * (part + parts * m) + e; }

  Q35_DEVICE void operator()(const params& p, shared_storage& s) const {
    const gdn_core_inputs& in = p.in;
    const int j = int(arch::block_idx().x), seq = int(arch::block_idx().y);
    const int tid = arch::thread_rank();
    const int c = tid / parts, part = tid % parts;
    const int64_t row0 = in.seq_offsets[seq];
    const int n = int(in.seq_offsets[seq + 1] - row0);
    const int slot = in.slots[seq];
    if (n <= 0) return;  // the whole block
    const int n_v = in.heads.n_v;
    const int64_t value_dim = int64_t(n_v) * VDim;

    // S_j column c (this thread's keys), value-major in the pool: S[key][c] at c d_k + key
    float* state = in.state.ssm_head(slot, j) + int64_t(c) * KDim;
    float sr[key_vecs][4];
    Q35_UNROLL
    for (int m = 0; m < key_vecs; ++m) {
      const vec<float, 4> v4 = *reinterpret_cast<const vec<float, 4>*>(state + key_of(part, m, 0));
      Q35_UNROLL
      for (int e = 0; e < 4; ++e) sr[m][e] = v4[e];
    }
    const float dt_bias = in.dt_bias[j], ssm_a = in.ssm_a[j], norm_c = in.norm[c];

    for (int t = 0; t < n; ++t) {
      const int64_t row = row0 + t;
      // q, k, v of this token: conv over the raw inputs, then SiLU
      for (int lc = tid; lc < window; lc += threads) {
        const ops::gdn_conv_channel ch =
            ops::make_conv_channel<KDim, VDim>(in.qkv, row0, in.state, slot, in.conv_w, in.heads, j, lc);
        const float u = ch.conv_silu(t);
        if (lc < KDim) {
          s.q[lc] = u;
        } else if (lc < 2 * KDim) {
          s.k[lc - KDim] = u;
        } else {
          s.v[lc - 2 * KDim] = u;
        }
      }
      arch::sync_block();
      // 1 / max(||x||, eps) for q (times 1 / sqrt(d_k)) and k: warp 0 and warp 1
      const int warp = arch::warp_id(), lane = arch::lane_id();
      if (warp < 2) {
        const float* x = warp == 0 ? s.q : s.k;
        float ss = 0.0f;
        for (int i = lane; i < KDim; i += warp_size) ss += x[i] * x[i];
        ss = warp::reduce_sum(ss);
        const float inv = 1.0f / fmaxf(sqrtf(ss), ops::gdn_l2_eps);
        if (lane == 0) s.inv_norm[warp] = warp == 0 ? inv / sqrtf(float(KDim)) : inv;
      }
      arch::sync_block();
      const float inv_q = s.inv_norm[0], inv_k = s.inv_norm[1];
      // beta = sigmoid(b), decay = exp(g), g = ssm_a softplus(alpha + dt_bias)
      const float beta = ops::gdn_beta(in.b[row * n_v + j]);
      const float decay = arch::fast_exp(ops::gdn_log_decay(in.alpha[row * n_v + j], dt_bias, ssm_a));
      // S <- decay S;  u = S^T k
      float u = 0.0f;
      Q35_UNROLL
      for (int m = 0; m < key_vecs; ++m) {
        const vec<float, 4> k4 = *reinterpret_cast<const vec<float, 4>*>(s.k + key_of(part, m, 0));
        Q35_UNROLL
        for (int e = 0; e < 4; ++e) {
          sr[m][e] *= decay;
          u += sr[m][e] * k4[e];
        }
      }
      u = warp::reduce_sum<parts>(u) * inv_k;
      // delta = beta (v - u);  S <- S + k delta^T;  o = S^T q_scaled
      const float delta = beta * (s.v[c] - u);
      const float dk = delta * inv_k;
      float o = 0.0f;
      Q35_UNROLL
      for (int m = 0; m < key_vecs; ++m) {
        const vec<float, 4> k4 = *reinterpret_cast<const vec<float, 4>*>(s.k + key_of(part, m, 0));
        const vec<float, 4> q4 = *reinterpret_cast<const vec<float, 4>*>(s.q + key_of(part, m, 0));
        Q35_UNROLL
        for (int e = 0; e < 4; ++e) {
          sr[m][e] += k4[e] * dk;
          o += sr[m][e] * q4[e];
        }
      }
      o = warp::reduce_sum<parts>(o) * inv_q;
      // y = o / sqrt(mean(o^2) + eps) * norm * silu(z)
      const float ss = block::reduce<float, threads>::sum(part == 0 ? o * o : 0.0f, s.red);
      if (part == 0) {
        const float zc = in.z[row * value_dim + int64_t(j) * VDim + c];
        p.y[row * value_dim + int64_t(j) * VDim + c] = o / sqrtf(ss / float(VDim) + in.eps) * norm_c * arch::silu(zc);
      }
      // the next token rewrites q, k, v only after every thread passed the reduction's barrier
    }

    Q35_UNROLL
    for (int m = 0; m < key_vecs; ++m) {
      vec<float, 4> v4;
      Q35_UNROLL
      for (int e = 0; e < 4; ++e) v4[e] = sr[m][e];
      *reinterpret_cast<vec<float, 4>*>(state + key_of(part, m, 0)) = v4;
    }
    // conv state <- the last conv_kernel - 1 raw inputs; each thread updates the channels it read
    for (int lc = tid; lc < window; lc += threads)
      ops::make_conv_channel<KDim, VDim>(in.qkv, row0, in.state, slot, in.conv_w, in.heads, j, lc).update_state(n);
  }
};

}  // namespace q35::kernels
