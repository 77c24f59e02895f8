// rmsnorm_kernel: y[r] = x[r] / sqrt(mean(x[r]^2) + eps) * w for each row r (spec §2.0: every RMSNorm
// of the decoder: attn_norm, post_attention_norm, output_norm; the GGUF weights already hold 1 + w).
//
// Optionally it also writes y quantized for the GEMV engine's integer path (quant/act16.hpp), the
// same bits launch::quantize_act16 would produce from y, so the projections that read y need no
// quantization launch of their own.
//
// Thread-to-data mapping: one block per row; thread t handles elements t, t + threads, ..., the sum
// of squares goes through one deterministic block reduction, then every thread scales its own
// elements; for the 16-bit copy, after a barrier, thread t reads back and quantizes the 32-element
// groups t, t + threads, ... of y (correct in place, y == x, too).
#pragma once

#include <cmath>
#include <cstdint>

#include "q35/arch/thread.hpp"
#include "q35/arch/vector_load.hpp"
#include "q35/block/reduce.hpp"
#include "q35/core/dim3.hpp"
#include "q35/core/numeric.hpp"
#include "q35/core/vec.hpp"
#include "q35/quant/act16.hpp"

namespace q35::kernels {

template <int Threads = 256>
struct rmsnorm_kernel {
  struct params {
    const float* x;  // [rows][x_stride], row-major
    const float* w;  // [n] (null: no weight, y = x / rms)
    float* y;        // [rows][y_stride]
    int64_t rows;
    int n;  // elements per row
    int64_t x_stride, y_stride;
    float eps;
    int16_t* maybe_q;                  // [rows][n] 16-bit copy of y (n a multiple of 32), or null
    quant::act16_group* maybe_groups;  // [rows][n / 32] its group records (with maybe_q)
  };
  struct shared_storage {
    typename block::reduce<float, Threads>::storage red;
  };
  static constexpr int threads = Threads;
  static dim3 grid(const params& p) { return dim3(unsigned(p.rows)); }

  Q35_DEVICE void operator()(const params& p, shared_storage& s) const {
    const int64_t r = int64_t(arch::block_idx().x);
    const float* x = p.x + r * p.x_stride;
    float* y = p.y + r * p.y_stride;
    const int t = arch::thread_rank();
    // ss = sum_i x_i^2 (each thread a strided share, then the block)
    float ss = 0.0f;
    for (int i = t; i < p.n; i += Threads) ss += x[i] * x[i];
    ss = block::reduce<float, Threads>::sum(ss, s.red);
    // scale = 1 / sqrt(ss / n + eps)
    const float scale = 1.0f / sqrtf(ss / float(p.n) + p.eps);
    for (int i = t; i < p.n; i += Threads) y[i] = p.w ? x[i] * scale * p.w[i] : x[i] * scale;
    if (!p.maybe_q) return;  // uniform over the block: the barrier below is reached by all or none
    // A group's 32 elements were written by 32 different threads: read them back from y once every
    // thread's stores are in (re-computing them from x would read an in-place x = y that other threads
    // have already scaled).
    arch::sync_block();
    constexpr int ge = quant::act16_group_elems;
    for (int g = t; g < p.n / ge; g += Threads) {
      float v[ge];
      Q35_UNROLL
      for (int i = 0; i < ge; ++i) v[i] = y[g * ge + i];
      uint32_t q[ge / 2];
      quant::act16_group rec;
      quant::quantize_group(v, q, rec);
      auto* out = reinterpret_cast<uint32_t*>(p.maybe_q + r * p.n + g * ge);
      Q35_UNROLL
      for (int k = 0; k < ge / 8; ++k)
        arch::store_16(out + 4 * k, vec16<uint32_t>{{q[4 * k], q[4 * k + 1], q[4 * k + 2], q[4 * k + 3]}});
      p.maybe_groups[r * (p.n / ge) + g] = rec;
    }
  }
};

}  // namespace q35::kernels
