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
  // Integer path only (matvec_act16): sum_c P[c] (|x[c]| + delta[c]) and sum_c |w[c]| delta[c].
  bool act16 = false;
  double parts_abs_sum = 0;
  double act_err = 0;
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
//
// The GEMV's integer path (16-bit activations x^ = scale_g q, sums exact in int32, then fp32) adds
// the activation rounding and the rounding of the weights the reference applies but the kernel does
// not (ggml rounds d * q - m once per element; the kernel keeps d * sum q x^ and m * sum x^ apart):
//   |y - sum w x| <= sum |w| delta  +  (depth + 7) u sum P (|x| + delta)
// with delta_g = max_g |x| (0.5 + 2^-9)(1 + 2^-23) / 32767 >= |x - x^| (see quant/act16.hpp), P the
// magnitude of the two terms the kernel keeps apart (|d_sub q| + |m_sub|; |w| for formats without
// mins), <= 6 roundings per group (int -> float, the scale products, the difference, the group
// scale) and `depth` additions of the lane's chain and the shuffle tree.
inline double fp32_dot_bound(const dot_result& r, int64_t depth) {
  if (r.act16) return double(depth + 7) * std::ldexp(1.0, -24) * r.parts_abs_sum + r.act_err;
  return double(depth + 1) * std::ldexp(1.0, -24) * r.abs_sum;
}

// delta for every element of [n / 32] groups of 32 (see fp32_dot_bound).
inline std::vector<double> act16_deltas(const float* x, int64_t n) {
  std::vector<double> d(static_cast<size_t>(n));
  for (int64_t g = 0; g < n; g += 32) {
    double amax = 0;
    for (int64_t i = g; i < g + 32; ++i) amax = std::fmax(amax, std::fabs(double(x[i])));
    const double delta = amax * (0.5 + std::ldexp(1.0, -9)) * (1 + std::ldexp(1.0, -23)) / 32767.0;
    for (int64_t i = g; i < g + 32; ++i) d[size_t(i)] = delta;
  }
  return d;
}

// As matvec, for the integer path: also the terms of its error bound. parts [rows][cols] = P.
inline std::vector<dot_result> matvec_act16(const std::vector<float>& w, const std::vector<float>& parts,
                                            const float* x, int64_t rows, int64_t cols, int n) {
  std::vector<dot_result> y(size_t(rows * n));
  for (int t = 0; t < n; ++t) {
    const float* xt = x + t * cols;
    const std::vector<double> delta = act16_deltas(xt, cols);
    for (int64_t r = 0; r < rows; ++r) {
      double s = 0, a = 0, pa = 0, e = 0;
      const float* wr = w.data() + r * cols;
      const float* pr = parts.data() + r * cols;
      for (int64_t c = 0; c < cols; ++c) {
        const double p = double(wr[c]) * double(xt[c]);
        s += p;
        a += std::fabs(p);
        pa += std::fabs(double(pr[c])) * (std::fabs(double(xt[c])) + delta[size_t(c)]);
        e += std::fabs(double(wr[c])) * delta[size_t(c)];
      }
      y[size_t(t * rows + r)] = {s, a, true, pa, e};
    }
  }
  return y;
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
