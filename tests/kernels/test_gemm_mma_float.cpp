// The tensor-core float GEMM (kernels/gemm_mma_float.hpp) against float64, with the tolerance its
// header derives: the split's representation error per element plus the fp32 accumulation error
// chained along the kernel's own order (K steps of 32, chunks of 16 columns, the split terms one mma
// each), evaluated per output from the exact partial sums. Every format x epilogue, ragged rows,
// tokens and a 16-column K tail, activations of 1e5 and 1e-6, NaN per token, every sim thread order.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "q35/launch/gemm.hpp"
#include "reference/gemv_reference.hpp"
#include "test_util.hpp"
#include "weights.hpp"

namespace {

using namespace q35;
using ops::epilogue;

// The constants of the derivation per format: rho(w, x) bounds |w| |x - sum_j x_j| (and the dropped
// F32 terms), sigma(w, x) bounds sum over the computed terms |w_i x_j|; e is the F16 step exponent.
template <class F>
struct split_model;
template <>
struct split_model<quant::f16_format> {
  static constexpr int terms = 2;
  static constexpr bool scaled = true;
  // |x - (hi + lo) / s| <= 2^-22 |x| + 2^(e - 39); |hi| + |lo| <= (1 + 2^-9) |x| + 2^(e - 37)
  static double rho(double w, double x, int e) {
    return std::fabs(w) * (std::ldexp(std::fabs(x), -22) + std::ldexp(1.0, e - 39));
  }
  static double sigma(double w, double x, int e) {
    return std::fabs(w) * ((1 + std::ldexp(1.0, -9)) * std::fabs(x) + std::ldexp(1.0, e - 37));
  }
};
template <>
struct split_model<quant::bf16_format> {
  static constexpr int terms = 3;
  static constexpr bool scaled = false;
  // the split is exact but for 2^-134 below |x| = 2^-110; products below 2^-126 may flush (3 terms)
  static double rho(double w, double, int) { return std::fabs(w) * std::ldexp(1.0, -134) + 3 * std::ldexp(1.0, -126); }
  static double sigma(double w, double x, int) {
    return std::fabs(w) * ((1 + std::ldexp(1.0, -6)) * std::fabs(x) + std::ldexp(1.0, -132));
  }
};
template <>
struct split_model<quant::f32_format> {
  static constexpr int terms = 6;
  static constexpr bool scaled = false;
  // dropped w1 x2 + w2 x1 + w2 x2 <= 2^-23 (1 + 2^-9) |w x|; subnormal floors; 6 flushable products
  static double rho(double w, double x, int) {
    return std::ldexp(std::fabs(w * x), -23) * (1 + std::ldexp(1.0, -8)) +
           std::ldexp(std::fabs(w) + std::fabs(x), -132) + 6 * std::ldexp(1.0, -126);
  }
  static double sigma(double w, double x, int) {
    return (1 + std::ldexp(1.0, -5)) * std::fabs(w * x) + std::ldexp(std::fabs(w) + std::fabs(x) + 1, -130);
  }
};

// One mma d = c + sum p errs by at most alpha sum |p| + beta |c|. Sim (arch/mma.hpp): the products are
// summed in float from 0, then c is added, round to nearest: alpha = 17 2^-24, beta = 2^-24. GPU: the
// library's tensor-core model (tests/arch/test_mma.cpp), 17 2^-23 on both.
constexpr double mma_alpha = Q35_BACKEND_SIM ? 17 * 0x1p-24 : 17 * 0x1p-23;
constexpr double mma_beta = Q35_BACKEND_SIM ? 0x1p-24 : 17 * 0x1p-23;
constexpr double add_u = 0x1p-24;  // the F16 path's acc += 2^(e - 14) * step (one fp32 FMA, exact product)

struct dot_bound {
  double value, tol;
};

// The F16 step exponent of the kernel: that of max |x| over the token's 32 columns, clamped.
int step_exponent(const float* x, int64_t n) {
  uint32_t amax = 0;
  for (int64_t c = 0; c < n; ++c) {
    uint32_t b;
    std::memcpy(&b, &x[c], 4);
    amax = std::max(amax, b & 0x7fffffffu);
  }
  return std::clamp(int(amax >> 23) - 127, -100, 127);
}

// Per output [n_tokens][rows]: the float64 dot and its bound, chained as the kernel runs.
template <class F>
std::vector<dot_bound> split_dots(const std::vector<float>& w, const std::vector<float>& x, int64_t rows, int64_t cols,
                                  int64_t n_tokens) {
  using model = split_model<F>;
  std::vector<dot_bound> out(size_t(rows * n_tokens));
  std::vector<int> ex(size_t((cols + 31) / 32));
  for (int64_t t = 0; t < n_tokens; ++t) {
    const float* xt = x.data() + t * cols;
    for (int64_t s = 0; s < cols; s += 32) ex[size_t(s / 32)] = step_exponent(xt + s, std::min<int64_t>(32, cols - s));
    for (int64_t r = 0; r < rows; ++r) {
      const float* wr = w.data() + r * cols;
      // e: accumulated error bound of the computed sum against the exact sum of the computed terms
      // (which is within R of C = sum w x)
      double e = 0, big_c = 0, big_r = 0;
      for (int64_t s = 0; s < cols; s += 32) {
        double et = 0, ct = 0, rt = 0;  // this step: its own accumulator when scaled
        double& ea = model::scaled ? et : e;
        double& ca = model::scaled ? ct : big_c;
        double& ra = model::scaled ? rt : big_r;
        for (int64_t q = s; q < std::min(cols, s + 32); q += 16) {
          double p = 0, cq = 0, rq = 0;
          for (int64_t c = q; c < q + 16; ++c) {
            const int es = ex[size_t(s / 32)];
            p += model::sigma(wr[c], xt[c], es);
            cq += double(wr[c]) * double(xt[c]);
            rq += model::rho(wr[c], xt[c], es);
          }
          // terms mma, each: |c_in| <= |C| + R + e + (this chunk's earlier terms <= p), own products <= p
          for (int k = 0; k < model::terms; ++k) ea += mma_alpha * p + mma_beta * (std::fabs(ca) + ra + ea + p);
          ca += cq, ra += rq;
        }
        if (model::scaled) {
          e += et + add_u * (std::fabs(big_c) + big_r + e + std::fabs(ct) + rt + et) + 0x1p-149;
          big_c += ct, big_r += rt;
        }
      }
      out[size_t(t * rows + r)] = {big_c, e + big_r};
    }
  }
  return out;
}

// The float64 expectation of one output under epilogue e (as ref::expect, with these dot bounds).
ref::expected_output expect(epilogue e, const dot_bound& g, const dot_bound* u, double h0) {
  if (e == epilogue::residual) {
    const double want = h0 + g.value;
    return {want, g.tol + std::ldexp(std::fabs(want), -24)};
  }
  if (e == epilogue::swiglu) {
    const double a = g.value, b = u->value, want = ref::silu(a) * b;
    return {want, 1.1 * g.tol * (std::fabs(b) + u->tol) + std::fabs(ref::silu(a)) * u->tol +
                      16 * std::ldexp(std::fabs(want), -24)};
  }
  return {g.value, g.tol};
}

template <class F>
void check_mma_float(int64_t rows, int64_t cols, int64_t n_tokens, epilogue e, uint64_t seed, std::vector<float> x = {},
                     bool selection = false) {
  CAPTURE(F::name);
  CAPTURE(rows);
  CAPTURE(cols);
  CAPTURE(n_tokens);
  CAPTURE(int(e));
  auto wg = test::random_weights<F>(rows, cols, seed), wu = test::random_weights<F>(rows, cols, seed + 1);
  if (selection) {
    // row r keeps only column (7 r + 3) % cols: each output is one product (+0 elsewhere)
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c)
        if (c != (7 * r + 3) % cols)
          for (auto* w : {&wg, &wu})
            std::memset(w->data() + size_t(r * cols + c) * F::block_bytes, 0, size_t(F::block_bytes));
  }
  if (x.empty()) x = test::random_floats(size_t(n_tokens * cols), seed + 2);
  const auto h0 = test::random_floats(size_t(n_tokens * rows), seed + 3, -4.0f, 4.0f);
  const auto g = split_dots<F>(test::reference_weights<F>(wg, rows * cols), x, rows, cols, n_tokens);
  const auto u = e == epilogue::swiglu
                     ? split_dots<F>(test::reference_weights<F>(wu, rows * cols), x, rows, cols, n_tokens)
                     : std::vector<dot_bound>{};
  auto dwg = test::to_device(wg), dwu = test::to_device(wu);
  auto dx = test::to_device(x);
  test::for_each_order([&] {
    auto dy = e == epilogue::residual ? test::to_device(h0) : test::poisoned<float>(size_t(n_tokens * rows));
    launch::gemm_args<F> a;
    a.w = reinterpret_cast<const typename F::block*>(dwg.data());
    a.maybe_w_up = e == epilogue::swiglu ? reinterpret_cast<const typename F::block*>(dwu.data()) : nullptr;
    a.x = dx.data(), a.y = dy.data();
    a.rows = rows, a.cols = cols, a.n_tokens = n_tokens, a.epilogue = e;
    Q35_REQUIRE_OK(launch::gemm(a));
    const auto y = test::to_host(dy);
    int64_t bad = 0;
    double worst = 0;  // largest |error| / tolerance
    for (size_t i = 0; i < y.size(); ++i) {
      const auto [want, tol] = expect(e, g[i], u.empty() ? nullptr : &u[i], h0[i]);
      const double err = std::fabs(double(y[i]) - want);
      bad += !(err <= tol + 1e-300);
      worst = std::max(worst, err / (tol + 1e-300));
    }
    CAPTURE(worst);
    CHECK(bad == 0);
  });
}

TEST_CASE_TEMPLATE("gemm_mma_float: ragged tiles, every format and epilogue" * test::needs_device(), F,
                   quant::f32_format, quant::f16_format, quant::bf16_format) {
  check_mma_float<F>(70, 96, 33, epilogue::store, 71);      // 2 x 2 tiles, both partial
  check_mma_float<F>(13, 64, 40, epilogue::swiglu, 72);     // one partial row tile, 2 token tiles
  check_mma_float<F>(64, 48, 1, epilogue::residual, 73);    // one token, a 16-column K tail
  check_mma_float<F>(65, 32, 9, epilogue::swiglu, 74);      // one K step, 9 tokens
  check_mma_float<F>(30, 80, 129, epilogue::residual, 75);  // 129 tokens: 5 token tiles, the last 1
  check_mma_float<F>(130, 64, 17, epilogue::store, 76);     // F16/BF16: a second 128-row tile of 2 rows
}

TEST_CASE("gemm_mma_float: Qwen3.5 hidden size 4096 as K, 37 prompt tokens" * test::needs_device()) {
  check_mma_float<quant::bf16_format>(200, 4096, 37, epilogue::store, 81);
  check_mma_float<quant::f16_format>(72, 4096, 37, epilogue::swiglu, 82);
  check_mma_float<quant::f32_format>(66, 1024, 37, epilogue::residual, 83);
}

// One product per output: the accumulation bound shrinks to a few ulp of it, so a split that keeps
// only 16 bits of x (BF16 without x2) or drops the F32 second-order terms (2^-16 errors) fails here.
TEST_CASE_TEMPLATE("gemm_mma_float: selection weights, one product per output" * test::needs_device(), F,
                   quant::f32_format, quant::f16_format, quant::bf16_format) {
  check_mma_float<F>(70, 96, 33, epilogue::store, 61, {}, true);
  check_mma_float<F>(24, 64, 40, epilogue::swiglu, 62, {}, true);
}

// Activations of 1e5 (beyond f16's 65504) and 1e-6 (near f16's subnormals), per token, per K step
// and mixed within a step: the F16 scale keeps every step's parts in range.
TEST_CASE_TEMPLATE("gemm_mma_float: activations of 1e5 and 1e-6" * test::needs_device(), F, quant::f32_format,
                   quant::f16_format, quant::bf16_format) {
  const int64_t rows = 40, cols = 128, n_tokens = 12;
  auto x = test::random_floats(size_t(n_tokens * cols), 91);
  for (int64_t t = 0; t < n_tokens; ++t)
    for (int64_t c = 0; c < cols; ++c) {
      const int64_t kind = t % 4;
      const bool big = kind == 0 || (kind == 2 && c % 2 == 0) || (kind == 3 && (c / 32) % 2 == 0);
      x[size_t(t * cols + c)] *= big ? 1e5f : 1e-6f;
    }
  check_mma_float<F>(rows, cols, n_tokens, epilogue::store, 92, x);
  check_mma_float<F>(rows, cols, n_tokens, epilogue::residual, 93, x);
}

// A NaN activation of token 33 makes that token's outputs NaN while the other tokens of its 32-token
// tile (and the other tile) stay finite.
TEST_CASE_TEMPLATE("gemm_mma_float: a NaN activation makes its token's row NaN" * test::needs_device(), F,
                   quant::f32_format, quant::f16_format, quant::bf16_format) {
  const int64_t rows = 70, cols = 96, n_tokens = 35, nan_token = 33;
  auto x = test::random_floats(size_t(n_tokens * cols), 94);
  x[size_t(nan_token * cols + 70)] = NAN;
  auto dw = test::to_device(test::random_weights<F>(rows, cols, 95));
  auto dx = test::to_device(x);
  test::for_each_order([&] {
    auto dy = test::poisoned<float>(size_t(n_tokens * rows));
    launch::gemm_args<F> a;
    a.w = reinterpret_cast<const typename F::block*>(dw.data()), a.x = dx.data(), a.y = dy.data();
    a.rows = rows, a.cols = cols, a.n_tokens = n_tokens, a.epilogue = epilogue::store;
    Q35_REQUIRE_OK(launch::gemm(a));
    const auto y = test::to_host(dy);
    int64_t bad = 0;
    for (int64_t t = 0; t < n_tokens; ++t)
      for (int64_t r = 0; r < rows; ++r) {
        const float v = y[size_t(t * rows + r)];
        bad += t == nan_token ? !std::isnan(v) : !std::isfinite(v);
      }
    CHECK(bad == 0);
  });
}

TEST_CASE("gemm_mma_float: validation and an empty batch" * test::needs_device()) {
  auto w = test::to_device(std::vector<uint16_t>(4 * 64 + 8, 0));
  auto x = test::to_device(std::vector<float>(64, 1.0f));
  auto y = test::poisoned<float>(4);
  launch::gemm_args<quant::bf16_format> a;
  a.w = reinterpret_cast<const quant::block_bf16*>(w.data()), a.x = x.data(), a.y = y.data();
  a.rows = 4, a.cols = 64, a.n_tokens = 0;
  Q35_REQUIRE_OK(launch::gemm(a));
  for (float v : test::to_host(y)) CHECK(std::isnan(v));  // untouched
  a.n_tokens = 1;
  a.w = reinterpret_cast<const quant::block_bf16*>(w.data() + 1);  // 2-byte aligned only
  const status s = launch::gemm(a);
  CHECK(s.message().find("not 16-byte aligned") != std::string::npos);
  a.w = reinterpret_cast<const quant::block_bf16*>(w.data()), a.cols = 40;
  CHECK(launch::gemm(a).message().find("cols = 40") != std::string::npos);
}

}  // namespace
