// launch::rmsnorm against a float64 reference: odd widths, strides, in place, no weight, large values;
// its optional 16-bit copy against launch::quantize_act16.
//
// Tolerance: the kernel sums n squares in fp32 in chains of at most n/threads + 5 + log2(warps)
// additions, then divides, takes one sqrt and two products per element: relative error of the scale
// <= (depth + 8) * 2^-24 (sum, division, sqrt: a few ulp), of each output <= that + 2 ulp.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "q35/launch/gemv.hpp"
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

// The 16-bit copy for the GEMV's integer path: the same bytes launch::quantize_act16 writes for y
// (values and group records, NaN groups included), for row strides past n and rows with more
// groups than the block has threads; in place (y == x) too, where a group's elements, scaled by 32
// other threads, must not be read back as x.
void check_act16(int64_t rows, int n, int64_t stride, bool weight, bool nan_row, uint64_t seed, bool in_place = false) {
  CAPTURE(rows);
  CAPTURE(n);
  CAPTURE(in_place);
  auto x = test::random_floats(size_t(rows * stride), seed, -2.0f, 2.0f);
  if (nan_row) x[size_t(stride + 5)] = NAN;  // row 1's first group is NaN, its other groups are not
  const auto w = test::random_floats(size_t(n), seed + 1, 0.5f, 1.5f);
  auto dx = test::to_device(x);
  auto dw = test::to_device(w);
  const size_t bytes = quant::act16_bytes(n, rows);
  test::for_each_order([&] {
    auto dy = in_place ? test::to_device(x) : test::poisoned<float>(size_t(rows * stride));
    device_buffer<uint8_t> fused, separate;
    Q35_REQUIRE_OK(fused.allocate(bytes));
    Q35_REQUIRE_OK(separate.allocate(bytes));
    launch::rmsnorm_args a;
    a.x = in_place ? dy.data() : dx.data(), a.maybe_w = weight ? dw.data() : nullptr, a.y = dy.data();
    a.rows = rows, a.n = n, a.x_stride = stride, a.y_stride = stride;
    a.maybe_act16 = fused.data(), a.act16_bytes = fused.bytes();
    Q35_REQUIRE_OK(launch::rmsnorm(a));
    // y's rows made contiguous, then quantized by the separate kernel
    const auto y = test::to_host(dy);
    std::vector<float> packed(size_t(rows * n));
    for (int64_t r = 0; r < rows; ++r)
      for (int i = 0; i < n; ++i) packed[size_t(r * n + i)] = y[size_t(r * stride + i)];
    auto dp = test::to_device(packed);
    Q35_REQUIRE_OK(launch::quantize_act16(dp.data(), rows, n, separate.data(), separate.bytes()));
    const auto f = test::to_host(fused), g = test::to_host(separate);
    CHECK(std::memcmp(f.data(), g.data(), bytes) == 0);
    const quant::act16_view v = launch::act16_view_of(a);
    CHECK(reinterpret_cast<const void*>(v.q) == fused.data());
    CHECK(reinterpret_cast<const uint8_t*>(v.groups) == fused.data() + quant::act16_groups_offset(n, rows));
  });
}

TEST_CASE("rmsnorm: the 16-bit copy equals launch::quantize_act16 of y, bit for bit" * test::needs_device()) {
  check_act16(3, 256, 256, true, true, 11);
  check_act16(8, 4096, 4100, true, false, 12);     // the decode width, a stride past the row
  check_act16(1, 16384, 16384, false, false, 13);  // 512 groups: two per thread
  check_act16(2, 5120, 5120, true, true, 14);
  check_act16(2, 4096, 4096, true, true, 15, true);  // in place: y == x
  check_act16(1, 1024, 1040, false, false, 16, true);
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
  alignas(16) static uint8_t q[4096];
  a.eps = 1e-6f, a.maybe_act16 = q, a.act16_bytes = sizeof(q);
  CHECK(launch::rmsnorm(a).message() == "launch::rmsnorm: maybe_act16 needs n a multiple of 32 (n = 8)");
  a.n = 64, a.rows = 2, a.x_stride = a.y_stride = 0;
  float big[128];
  a.x = big, a.y = big;
  a.act16_bytes = 100;
  CHECK(launch::rmsnorm(a).message() == "launch::rmsnorm: act16_bytes = 100 is below quant::act16_bytes = " +
                                            std::to_string(quant::act16_bytes(64, 2)));
  a.act16_bytes = sizeof(q), a.maybe_act16 = q + 8;
  CHECK(launch::rmsnorm(a).message() == "launch::rmsnorm: maybe_act16 is not 16-byte aligned");
}

}  // namespace
