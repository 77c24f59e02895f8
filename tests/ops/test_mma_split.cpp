// ops::mma_split_product (fp32 products on bf16 tensor cores, 3 planes per operand, 6 mma per 16
// columns) against float64: every output within mma_split_coef(K) u sum_k |a_k b_k| (the op's file
// header), both B layouts, operands over a wide exponent range (no scaling is involved), a partial
// tile count (n_pairs) leaving the other accumulators untouched, every sim thread order.
//
// The RMS of |error| / sum |terms| over all outputs also sees a dropped part product, which the
// worst-case element bound (12.75 K u) is too loose to catch. Measured on the sim (rounding to
// nearest): 3.9-4.2e-8 with all 6 products (worst error / bound 0.006-0.008), 0.96-2.2e-6 without
// a2 b0 (worst 0.1-0.2 of the bound), 0.6-1.5e-3 without a1 b0 (54-98 times the bound). Limit 2^-22
// (2.4e-7) on the sim; 2^-19 on a GPU, whose truncating adds raise the floor: there it guards the
// i + j <= 1 products.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "q35/arch/thread.hpp"
#include "q35/core/dim3.hpp"
#include "q35/launch/launch.hpp"
#include "q35/ops/mma_split.hpp"
#include "test_util.hpp"

namespace {

using namespace q35;

constexpr int m_rows = 32, k_cols = 48, n_cols = 32;

// 2 warps: warp w computes C rows 16 w .. + 16, all n_cols columns (4 n8 tiles, n_pairs of the 2
// pairs), starting from the poisoned accumulator values in c (so untouched tiles keep them).
template <bool BTrans>
struct split_product_kernel {
  struct params {
    const float* a;  // [m_rows][k_cols]
    const float* b;  // BTrans ? [k_cols][n_cols] : [n_cols][k_cols]
    float* c;        // [m_rows][n_cols], in and out
    int n_pairs;
  };
  using b_matrix = std::conditional_t<BTrans, ops::split_matrix<k_cols, n_cols>, ops::split_matrix<n_cols, k_cols>>;
  struct alignas(16) shared_storage {
    ops::split_matrix<m_rows, k_cols> a;
    b_matrix b;
  };
  static constexpr int threads = 64;
  static dim3 grid(const params&) { return dim3(1); }
  Q35_DEVICE void operator()(const params& p, shared_storage& s) const {
    const int t = arch::thread_rank();
    for (int e = t; e < m_rows * k_cols; e += threads) s.a.set(e / k_cols, e % k_cols, p.a[e]);
    for (int e = t; e < b_matrix::rows * b_matrix::cols; e += threads)
      s.b.set(e / b_matrix::cols, e % b_matrix::cols, p.b[e]);
    arch::sync_block();
    const int w = arch::warp_id();
    arch::mma_c_f32_16x8 acc[n_cols / 8];
    for (int n = 0; n < n_cols / 8; ++n)
      for (int i = 0; i < 4; ++i) {
        const arch::mma_coord at = ops::mma_acc_at(16 * w, 8 * n, i);
        acc[n].r[i] = p.c[at.row * n_cols + at.col];
      }
    ops::mma_split_product<BTrans, n_cols / 8, k_cols>(acc, s.a, 16 * w, s.b, 0, 0, p.n_pairs);
    for (int n = 0; n < n_cols / 8; ++n)
      for (int i = 0; i < 4; ++i) {
        const arch::mma_coord at = ops::mma_acc_at(16 * w, 8 * n, i);
        p.c[at.row * n_cols + at.col] = acc[n].r[i];
      }
  }
};

// Random values with exponents spread over +-2^spread.
std::vector<float> wide_floats(size_t n, uint64_t seed, int spread) {
  std::vector<float> v = test::random_floats(n, seed, -1.0f, 1.0f);
  const std::vector<float> e = test::random_floats(n, seed + 1, -float(spread), float(spread));
  for (size_t i = 0; i < n; ++i) v[i] = std::ldexp(v[i], int(std::lround(e[i])));
  return v;
}

template <bool BTrans>
void check_product(int spread, int n_pairs, uint64_t seed) {
  const std::vector<float> a = wide_floats(size_t(m_rows * k_cols), seed, spread);
  const std::vector<float> b = wide_floats(size_t(k_cols * n_cols), seed + 7, spread);
  const std::vector<float> c0 = test::random_floats(size_t(m_rows * n_cols), seed + 13, -1.0f, 1.0f);
  auto da = test::to_device(a), db = test::to_device(b), dc = test::to_device(c0);
  Q35_REQUIRE_OK(launch::launch<split_product_kernel<BTrans>>({da.data(), db.data(), dc.data(), n_pairs}));
  const std::vector<float> c = test::to_host(dc);
  const double u = std::ldexp(1.0, -24);
  int64_t bad = 0, untouched_changed = 0;
  double worst = 0, err2 = 0, want2 = 0;
  for (int r = 0; r < m_rows; ++r)
    for (int n = 0; n < n_cols; ++n) {
      const size_t at = size_t(r * n_cols + n);
      if (n / 16 >= n_pairs) {
        untouched_changed += c[at] != c0[at] ? 1 : 0;  // bitwise: the accumulator was not touched
        continue;
      }
      double want = c0[at], mag = std::fabs(double(c0[at]));
      for (int k = 0; k < k_cols; ++k) {
        const double bv = BTrans ? b[size_t(k * n_cols + n)] : b[size_t(n * k_cols + k)];
        want += double(a[size_t(r * k_cols + k)]) * bv;
        mag += std::fabs(double(a[size_t(r * k_cols + k)]) * bv);
      }
      const double tol = ops::mma_split_coef(k_cols) * u * mag;
      const double err = std::fabs(double(c[at]) - want);
      if (!(err <= tol)) ++bad;
      worst = std::max(worst, err / tol);
      err2 += err * err / (mag * mag);
      want2 += 1;
    }
  const double rms = std::sqrt(err2 / want2);  // RMS of |error| / sum |terms|
  MESSAGE("worst error / bound = " << worst << ", RMS error / sum|terms| = " << rms);
  CHECK(bad == 0);
  CHECK(untouched_changed == 0);
#if Q35_BACKEND_SIM
  CHECK(rms <= 0x1p-22);
#else
  CHECK(rms <= 0x1p-19);
#endif
}

}  // namespace

TEST_CASE("mma_split_product: B as [n][k], values within 2^+-4, every thread order" * test::needs_device()) {
  test::for_each_order([] { check_product<false>(4, 2, 1); });
}

TEST_CASE("mma_split_product: B as [k][n] (transposed loads), values within 2^+-4" * test::needs_device()) {
  test::for_each_order([] { check_product<true>(4, 2, 2); });
}

TEST_CASE("mma_split_product: exponents over 2^+-40, no scaling needed" * test::needs_device()) {
  check_product<false>(40, 2, 3);
  check_product<true>(40, 2, 4);
}

TEST_CASE("mma_split_product: n_pairs = 1 leaves the second pair of tiles untouched" * test::needs_device()) {
  check_product<false>(4, 1, 5);
  check_product<true>(4, 1, 6);
}
