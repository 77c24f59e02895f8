// Float64 host references for the GEMV/GEMM family, with the error bound each comparison uses.
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

#include "q35/ops/epilogue.hpp"

namespace q35::ref {

// The exact-ish result of one output: sum_c w[c] x[c] in float64, and sum_c |w[c] x[c]| for the bound.
struct dot_result {
  double value;
  double abs_sum;
};

// y[t][r] = sum_c w[r][c] * x[t][c] over float64; w [rows][cols] (already dequantized), x [n][cols].
inline std::vector<dot_result> matvec(const std::vector<float>& w, const float* x, int64_t rows, int64_t cols, int n) {
  std::vector<dot_result> y(size_t(rows * n));
  for (int t = 0; t < n; ++t)
    for (int64_t r = 0; r < rows; ++r) {
      double s = 0, a = 0;
      const float* wr = w.data() + r * cols;
      const float* xt = x + t * cols;
      for (int64_t c = 0; c < cols; ++c) {
        const double p = double(wr[c]) * double(xt[c]);
        s += p;
        a += std::fabs(p);
      }
      y[size_t(t * rows + r)] = {s, a};
    }
  return y;
}

// Worst-case error of an fp32 dot product whose terms are summed in chains of at most `depth`
// additions (each lane's running sum, then the warp tree): |err| <= (depth + 1) * u * sum|w x|
// (Higham, recursive summation with a rounded product per term), u = 2^-24.
inline double fp32_dot_bound(const dot_result& r, int64_t depth) {
  return double(depth + 1) * std::ldexp(1.0, -24) * r.abs_sum;
}

// silu(a) = a / (1 + e^-a) in float64.
inline double silu(double a) { return a / (1.0 + std::exp(-a)); }

// What one output of an epilogue should be in float64, and how far the fp32 kernel may be from it.
struct expected_output {
  double value;
  double tol;
};

// g: the dot of W (or W_gate); u: the dot of W_up (swiglu only); h0: the residual before the call
// (residual only); depth: the fp32 accumulation chain length (see fp32_dot_bound).
inline expected_output expect(ops::epilogue e, const dot_result& g, const dot_result* u, double h0, int64_t depth) {
  const double eg = fp32_dot_bound(g, depth);
  if (e == ops::epilogue::residual) {
    // h + W x: the dot's error plus one rounding of the sum
    const double want = h0 + g.value;
    return {want, eg + std::ldexp(std::fabs(want), -24)};
  }
  if (e == ops::epilogue::swiglu) {
    // silu(a) * b: |silu'| <= 1.1 carries a's error, |silu(a)| scales b's; plus the float rounding
    // of silu (fast exp, a few ulp) and of the product
    const double a = g.value, b = u->value, eu = fp32_dot_bound(*u, depth);
    const double want = silu(a) * b;
    return {want, 1.1 * eg * (std::fabs(b) + eu) + std::fabs(silu(a)) * eu + 16 * std::ldexp(std::fabs(want), -24)};
  }
  return {g.value, eg};
}

}  // namespace q35::ref
