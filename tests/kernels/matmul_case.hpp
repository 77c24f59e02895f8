// One GEMV/GEMM test case: random weights (gate, and up for swiglu), activations and residual, their
// float64 reference dots, and the device copies the kernels read.
#pragma once

#include <cstdint>
#include <vector>

#include "q35/ops/epilogue.hpp"
#include "reference/gemv_reference.hpp"
#include "test_util.hpp"
#include "weights.hpp"

namespace q35::test {

template <class F>
struct matmul_case {
  std::vector<uint8_t> wg, wu;          // [rows][cols] of F: W (or W_gate), W_up
  std::vector<float> x;                 // [n_tokens][cols]
  std::vector<float> h0;                // [n_tokens][rows]: the residual before a residual-epilogue call
  std::vector<ref::dot_result> rg, ru;  // [n_tokens][rows]: W x and (swiglu) W_up x in float64
  device_buffer<uint8_t> dwg, dwu;
  device_buffer<float> dx;

  matmul_case(int64_t rows, int64_t cols, int64_t n_tokens, ops::epilogue e, uint64_t seed)
      : wg(random_weights<F>(rows, cols, seed)),
        wu(random_weights<F>(rows, cols, seed + 1)),
        x(random_floats(size_t(n_tokens * cols), seed + 2)),
        h0(random_floats(size_t(n_tokens * rows), seed + 3, -4.0f, 4.0f)),
        rg(ref::matvec(reference_weights<F>(wg, rows * cols), x.data(), rows, cols, int(n_tokens))) {
    if (e == ops::epilogue::swiglu)
      ru = ref::matvec(reference_weights<F>(wu, rows * cols), x.data(), rows, cols, int(n_tokens));
    dwg = to_device(wg), dwu = to_device(wu), dx = to_device(x);
  }

  const typename F::block* w() const { return reinterpret_cast<const typename F::block*>(dwg.data()); }
  const typename F::block* w_up() const { return reinterpret_cast<const typename F::block*>(dwu.data()); }

  // The float64 expectation for output i (token-major) under epilogue e.
  ref::expected_output expect(ops::epilogue e, size_t i, int64_t depth) const {
    return ref::expect(e, rg[i], e == ops::epilogue::swiglu ? &ru[i] : nullptr, h0[i], depth);
  }
};

}  // namespace q35::test
