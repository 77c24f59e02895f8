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

  // act16: the references carry the bound of the GEMV's integer path (16-bit activations).
  matmul_case(int64_t rows, int64_t cols, int64_t n_tokens, ops::epilogue e, uint64_t seed, bool act16 = false)
      : wg(random_weights<F>(rows, cols, seed)),
        wu(random_weights<F>(rows, cols, seed + 1)),
        x(random_floats(size_t(n_tokens * cols), seed + 2)),
        h0(random_floats(size_t(n_tokens * rows), seed + 3, -4.0f, 4.0f)) {
    auto dots = [&](const std::vector<uint8_t>& w) {
      const auto ref_w = reference_weights<F>(w, rows * cols);
      return act16 ? ref::matvec_act16(ref_w, weight_parts<F>(w, rows * cols), x.data(), rows, cols, int(n_tokens))
                   : ref::matvec(ref_w, x.data(), rows, cols, int(n_tokens));
    };
    rg = dots(wg);
    if (e == ops::epilogue::swiglu) ru = dots(wu);
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
