// gemm_split_reduce_kernel: the second launch of a split-K int8 GEMM (kernels/gemm_i8.hpp,
// launch/gemm_i8.hpp). It adds each output's partial sums over the splits in split order, so the
// result depends on the split count only, never on the tile or the other tokens of the call.
#pragma once

#include <cstdint>

#include "q35/arch/thread.hpp"
#include "q35/core/config.hpp"
#include "q35/core/dim3.hpp"
#include "q35/core/numeric.hpp"
#include "q35/ops/epilogue.hpp"

namespace q35::kernels {

// The second half of a split-K GEMM: y[t][r] = epilogue of the sums over the splits, in split order, of
// gemm_i8_kernel's partials [splits][n_tokens][n_mats][rows] (swiglu: the gate's and the up row's). One thread per
// output.
template <ops::epilogue Epilogue, int Threads = 256>
struct gemm_split_reduce_kernel {
  static constexpr int threads = Threads;
  static constexpr int n_mats = ops::epilogue_mats<Epilogue>;
  struct params {
    const float* partials;
    float* y;  // [n_tokens][rows]
    int64_t rows, n_tokens;
    int splits;
  };
  struct shared_storage {};
  static dim3 grid(const params& p) { return dim3(unsigned(ceil_div<int64_t>(p.rows * p.n_tokens, threads))); }

  Q35_DEVICE void operator()(const params& p, shared_storage&) const {
    const int64_t i = int64_t(arch::block_idx().x) * threads + arch::thread_rank();
    if (i >= p.rows * p.n_tokens) return;
    const int64_t t = i / p.rows, r = i - t * p.rows, plane = p.n_tokens * n_mats * p.rows;
    const float* q = p.partials + t * n_mats * p.rows + r;
    float a = q[0], b = n_mats == 2 ? q[p.rows] : 0.0f;
    for (int z = 1; z < p.splits; ++z) {
      a += q[z * plane];
      if constexpr (n_mats == 2) b += q[z * plane + p.rows];
    }
    ops::apply_epilogue<Epilogue>(p.y + i, a, b);
  }
};

}  // namespace q35::kernels
