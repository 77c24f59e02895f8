// rmsnorm_kernel: y[r] = x[r] / sqrt(mean(x[r]^2) + eps) * w for each row r (spec §2.0: every RMSNorm
// of the decoder: attn_norm, post_attention_norm, output_norm; the GGUF weights already hold 1 + w).
//
// Thread-to-data mapping: one block per row; thread t handles the 4-element groups t, t + threads, ...
// (16-byte loads when the row allows), the sum of squares goes through one deterministic block
// reduction, then every thread scales its own elements.
#pragma once

#include <cmath>
#include <cstdint>

#include "q35/arch/thread.hpp"
#include "q35/block/reduce.hpp"
#include "q35/core/dim3.hpp"

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
  }
};

}  // namespace q35::kernels
