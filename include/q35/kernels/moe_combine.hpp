// moe_combine_kernel: the MoE prefill path's combination of the expert outputs back to token order
// (the grouped GEMM itself is the dense GEMMs' tile over each expert's pairs: kernels/gemm_rows.hpp).
#pragma once

#include <cmath>
#include <cstdint>

#include "q35/arch/thread.hpp"
#include "q35/core/dim3.hpp"
#include "q35/core/vec.hpp"
#include "q35/ops/router.hpp"

namespace q35::kernels {

// h[t][c] += sum_{j < k} w[t, j] y[t k + j][c] + g[t] s[t][c], in that order; NaN for a token with
// an invalid expert id (its pair was in no group). Thread mapping: block (t, column tile), one column per thread.
struct moe_combine_kernel {
  static constexpr int threads = 256;
  struct params {
    const float* y;              // [n_tokens * k][n_embd] expert outputs in pair order
    const int32_t* ids;          // [n_tokens][k]
    const float* weights;        // [n_tokens][k]
    const float* maybe_sh_y;     // [n_tokens][n_embd] shared-expert output, or null
    const float* maybe_sh_gate;  // [n_tokens] with maybe_sh_y
    float* h;                    // [n_tokens][n_embd]
    int64_t n_tokens;
    int k, n_experts, n_embd;
  };
  struct shared_storage {};
  static dim3 grid(const params& p) { return dim3(unsigned(p.n_tokens), unsigned(ceil_div(p.n_embd, threads))); }
  Q35_DEVICE void operator()(const params& p, shared_storage&) const {
    const int64_t t = int64_t(arch::block_idx().x);
    const int c = int(arch::block_idx().y) * threads + arch::thread_rank();
    if (c >= p.n_embd) return;
    float total = 0.0f;
    bool bad = false;
    for (int j = 0; j < p.k; ++j) {
      const int64_t pair = t * p.k + j;
      const int32_t e = p.ids[pair];
      if (e == ops::router_empty_slot) continue;  // adaptive top-k: no expert, no output row
      if (e < 0 || e >= p.n_experts) {
        bad = true;
        continue;
      }
      // total += w_j * y_j
      total += p.weights[pair] * p.y[pair * p.n_embd + c];
    }
    // total += g * s
    if (p.maybe_sh_y) total += p.maybe_sh_gate[t] * p.maybe_sh_y[t * p.n_embd + c];
    float* out = p.h + t * p.n_embd + c;
    *out = bad ? NAN : *out + total;
  }
};

}  // namespace q35::kernels
