// Gated DeltaNet building blocks shared by the recurrent (token-by-token) and chunked kernels:
// channel addressing of the projected qkv row, the causal conv over raw inputs and conv state, the
// conv-state update, and the per-head gates beta and g (spec §2.2).
#pragma once

#include <cstdint>

#include "q35/arch/math.hpp"
#include "q35/core/config.hpp"
#include "q35/kv/recurrent_state.hpp"

namespace q35::ops {

// Run-time head counts of one GDN layer; head dims are the kernels' template parameters.
struct gdn_heads {
  int n_k = 0;  // k-heads (ssm.group_count)
  int n_v = 0;  // v-heads (ssm.time_step_rank), a multiple of n_k
};

// Channel of the projected row qkv = [Q (n_k d_k) | K (n_k d_k) | V (n_v d_v)] that local channel lc
// of v-head j's window [q (d_k) | k (d_k) | v (d_v)] reads; v-head j uses k-head j mod n_k (the
// GGUF's tiled v-head order, spec §2.0).
template <int KDim, int VDim>
Q35_HOST_DEVICE int64_t gdn_channel(gdn_heads h, int j, int lc) {
  const int kh = j % h.n_k;
  if (lc < KDim) return int64_t(kh) * KDim + lc;
  if (lc < 2 * KDim) return int64_t(h.n_k) * KDim + int64_t(kh) * KDim + (lc - KDim);
  return 2 * int64_t(h.n_k) * KDim + int64_t(j) * VDim + (lc - 2 * KDim);
}

// One channel of one sequence as the conv sees it: raw inputs x(s) at sequence-relative time s,
// from the projections for s >= 0 and from the conv state (the last conv_kernel - 1 inputs before
// this call, oldest first) for s < 0.
struct gdn_conv_channel {
  const float* qkv;      // &qkv[row0][channel]: the sequence's first row of this call
  int64_t qkv_stride;    // floats per qkv row (conv_dim)
  float* state;          // &conv_state[row 0][j][lc]
  int64_t state_stride;  // floats per conv-state row (n_v (2 d_k + d_v))
  const float* w;        // [conv_kernel] taps of this channel, tap conv_kernel - 1 on the current input
  int conv_kernel;

  Q35_DEVICE float input(int s) const {
    return s >= 0 ? qkv[s * qkv_stride] : state[(conv_kernel - 1 + s) * state_stride];
  }
  // u_t = silu(sum_k w[k] x(t - (K - 1) + k))
  Q35_DEVICE float conv_silu(int t) const {
    float acc = 0.0f;
    for (int k = 0; k < conv_kernel; ++k) acc += w[k] * input(t - (conv_kernel - 1) + k);
    return arch::silu(acc);
  }
  // After n inputs: state row r = x(n - (K - 1) + r). In place: row r reads row r + n >= r, so
  // ascending r never reads a row it already overwrote. The caller must be the only reader of this
  // channel's state in this launch, or run after all readers.
  Q35_DEVICE void update_state(int n) const {
    for (int r = 0; r + 1 < conv_kernel; ++r) {
      const int s = n - (conv_kernel - 1) + r;
      state[r * state_stride] = s >= 0 ? qkv[s * qkv_stride] : state[(r + n) * state_stride];
    }
  }
};

template <int KDim, int VDim>
Q35_DEVICE gdn_conv_channel make_conv_channel(const float* qkv, int64_t row0, const kv::gdn_state_view& st, int slot,
                                              const float* conv_w, gdn_heads h, int j, int lc) {
  const int64_t conv_dim = 2 * int64_t(h.n_k) * KDim + int64_t(h.n_v) * VDim;
  const int64_t ch = gdn_channel<KDim, VDim>(h, j, lc);
  const int k = st.shape.conv_kernel;
  return {qkv + row0 * conv_dim + ch,         conv_dim,        st.conv(slot) + st.conv_index(0, j, lc),
          int64_t(h.n_v) * (2 * KDim + VDim), conv_w + ch * k, k};
}

// beta = sigmoid(b)
Q35_DEVICE float gdn_beta(float b) { return arch::sigmoid(b); }
// g = ssm_a * softplus(alpha + dt_bias)  (log-decay, <= 0; ssm_a = -exp(A_log))
Q35_DEVICE float gdn_log_decay(float alpha, float dt_bias, float ssm_a) {
  return arch::softplus(alpha + dt_bias) * ssm_a;
}

// L2 norm guard of q and k: x / max(||x||, eps)
inline constexpr float gdn_l2_eps = 1e-6f;

}  // namespace q35::ops
