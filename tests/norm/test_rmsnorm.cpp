// launch::rmsnorm against a float64 reference: odd widths, strides, in place, no weight, large values.
//
// Tolerance: the kernel sums n squares in fp32 in chains of at most n/threads + 5 + log2(warps)
// additions, then divides, takes one sqrt and two products per element: relative error of the scale
// <= (depth + 8) * 2^-24 (sum, division, sqrt: a few ulp), of each output <= that + 2 ulp.
#include <cmath>
#include <cstdint>
#include <vector>

#include "q35/launch/norm.hpp"
#include "test_util.hpp"

namespace {

using namespace q35;

void check_rmsnorm(int64_t rows, int n, int64_t stride, bool weight, bool in_place, float scale, uint64_t seed) {
  CAPTURE(rows);
  CAPTURE(n);
  CAPTURE(stride);
  const auto x = test::random_floats(size_t(rows * stride), seed, -scale, scale);
  const auto w = test::random_floats(size_t(n), seed + 1, 0.5f, 1.5f);
  auto dx = test::to_device(x);
  auto dw = test::to_device(w);
  test::for_each_order([&] {
    auto dy = in_place ? test::to_device(x) : test::poisoned<float>(size_t(rows * stride));
    launch::rmsnorm_args a;
    a.x = in_place ? dy.data() : dx.data();
    a.maybe_w = weight ? dw.data() : nullptr;
    a.y = dy.data();
    a.rows = rows, a.n = n, a.x_stride = stride, a.y_stride = stride, a.eps = 1e-6f;
    Q35_REQUIRE_OK(launch::rmsnorm(a));
    const auto y = test::to_host(dy);
    const double depth = double(n) / 256 + 16;
    int64_t bad = 0;
    for (int64_t r = 0; r < rows; ++r) {
      double ss = 0;
      for (int i = 0; i < n; ++i) ss += double(x[size_t(r * stride + i)]) * x[size_t(r * stride + i)];
      const double s = 1.0 / std::sqrt(ss / n + 1e-6);
      for (int i = 0; i < n; ++i) {
        const double want = x[size_t(r * stride + i)] * s * (weight ? w[size_t(i)] : 1.0);
        const double tol = (depth + 10) * std::ldexp(std::fabs(want), -24) + 1e-37;
        bad += !(std::fabs(y[size_t(r * stride + i)] - want) <= tol);
      }
    }
    CHECK(bad == 0);
  });
}

TEST_CASE("rmsnorm: widths, strides, in place, without weight" * test::needs_device()) {
  check_rmsnorm(3, 256, 256, true, false, 1.0f, 1);
  check_rmsnorm(5, 4096, 4100, true, false, 3.0f, 2);  // a stride past the row
  check_rmsnorm(2, 37, 37, true, true, 1.0f, 3);       // odd width, in place
  check_rmsnorm(4, 128, 128, false, false, 1e3f, 4);   // no weight, large values
  check_rmsnorm(1, 5120, 5120, true, false, 1e-3f, 5);
}

TEST_CASE("rmsnorm: a zero row gives zeros (eps keeps the scale finite); NaN stays in its row" * test::needs_device()) {
  std::vector<float> x(2 * 64, 0.0f);
  for (int i = 0; i < 64; ++i) x[size_t(64 + i)] = float(i);
  x[64 + 7] = NAN;
  auto dx = test::to_device(x);
  auto dy = test::poisoned<float>(x.size());
  launch::rmsnorm_args a;
  a.x = dx.data(), a.y = dy.data(), a.rows = 2, a.n = 64;
  Q35_REQUIRE_OK(launch::rmsnorm(a));
  const auto y = test::to_host(dy);
  for (int i = 0; i < 64; ++i) CHECK(y[size_t(i)] == 0.0f);
  for (int i = 0; i < 64; ++i) CHECK(std::isnan(y[size_t(64 + i)]));
}

TEST_CASE("rmsnorm: bad arguments are named") {
  launch::rmsnorm_args a;
  a.rows = 1, a.n = 0;
  CHECK(launch::rmsnorm(a).message().find("n = 0") != std::string::npos);
  a.n = 8;
  CHECK(launch::rmsnorm(a).message().find("null x or y") != std::string::npos);
  float buf[8];
  a.x = buf, a.y = buf, a.x_stride = 4;
  CHECK(launch::rmsnorm(a).message().find("stride") != std::string::npos);
  a.x_stride = 0, a.eps = 0.0f;
  CHECK(launch::rmsnorm(a).message().find("eps") != std::string::npos);
}

}  // namespace
