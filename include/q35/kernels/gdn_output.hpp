// gdn_output_kernel: last step of the chunked prefill. Blocks 0 .. n_tokens - 1 apply the gated
// RMSNorm per token and v-head, y = o / sqrt(mean(o^2) + eps) * ssm_norm * silu(z) (spec §2.2 step 5);
// blocks n_tokens .. n_tokens + n_seqs - 1 move each sequence's conv state to its last
// conv_kernel - 1 raw inputs (after gdn_prep_kernel, the only reader of the old state, finished).
//
// Thread-to-data mapping: a norm block walks the v-heads of its row, thread = value channel; a
// conv-state block walks all channels of all v-heads of its sequence, thread = channel (strided).
#pragma once

#include <cmath>
#include <cstdint>

#include "q35/arch/math.hpp"
#include "q35/arch/thread.hpp"
#include "q35/block/reduce.hpp"
#include "q35/core/config.hpp"
#include "q35/core/dim3.hpp"
#include "q35/kernels/gdn_recurrent.hpp"
#include "q35/ops/gdn.hpp"

namespace q35::kernels {

template <int KDim, int VDim>
struct gdn_output_kernel {
  static constexpr int threads = VDim;
  static_assert(VDim % warp_size == 0 && VDim <= max_block_threads, "VDim: a multiple of 32");

  struct params {
    gdn_core_inputs in;
    const float* o;  // [n_tokens][n_v][d_v]
    float* y;        // [n_tokens][n_v d_v]
    int64_t n_tokens;
  };
  struct shared_storage {
    typename block::reduce<float, threads>::storage red;
  };

  static dim3 grid(const params& p) { return dim3(unsigned(p.n_tokens + p.in.n_seqs)); }

  Q35_DEVICE void operator()(const params& p, shared_storage& s) const {
    const gdn_core_inputs& in = p.in;
    const int64_t b = int64_t(arch::block_idx().x);
    const int tid = arch::thread_rank();
    const int n_v = in.heads.n_v;
    if (b < p.n_tokens) {
      const float norm = in.norm[tid];
      for (int j = 0; j < n_v; ++j) {
        const int64_t at = (b * n_v + j) * VDim + tid;
        const float o = p.o[at];
        const float ss = block::reduce<float, threads>::sum(o * o, s.red);
        p.y[at] = o / sqrtf(ss / float(VDim) + in.eps) * norm * arch::silu(in.z[at]);
        arch::sync_block();  // the reduction storage is reused by the next head
      }
      return;
    }
    const int seq = int(b - p.n_tokens);
    const int64_t row0 = in.seq_offsets[seq];
    const int n = int(in.seq_offsets[seq + 1] - row0);
    if (n <= 0) return;
    constexpr int window = 2 * KDim + VDim;
    for (int e = tid; e < n_v * window; e += threads)
      ops::make_conv_channel<KDim, VDim>(in.qkv, row0, in.state, in.slots[seq], in.conv_w, in.heads, e / window,
                                         e % window)
          .update_state(n);
  }
};

}  // namespace q35::kernels
