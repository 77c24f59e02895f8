// Batched (prompt) path against float64 references: every format, token and row counts not a
// multiple of the 32 x 64 tile, columns not a multiple of the 64-column K step, the epilogues.
// Tolerance: each output is one sequential fp32 chain over all cols (depth cols + 1), Higham's
// bound ref::fp32_dot_bound; swiglu/residual add the same terms as in test_gemv.cpp.
#include <cmath>
#include <cstdint>
#include <vector>

#include "matmul_case.hpp"
#include "q35/launch/gemm.hpp"
#include "reference/gemv_reference.hpp"
#include "test_util.hpp"

namespace {

using namespace q35;
using ops::epilogue;

template <class F>
void check_gemm(int64_t rows, int64_t cols, int64_t n_tokens, epilogue e, uint64_t seed) {
  CAPTURE(F::name);
  CAPTURE(rows);
  CAPTURE(cols);
  CAPTURE(n_tokens);
  CAPTURE(int(e));
  const test::matmul_case<F> c(rows, cols, n_tokens, e, seed);
  test::for_each_order([&] {
    auto dy = e == epilogue::residual ? test::to_device(c.h0) : test::poisoned<float>(size_t(n_tokens * rows));
    launch::gemm_args<F> a;
    a.w = c.w();
    a.maybe_w_up = e == epilogue::swiglu ? c.w_up() : nullptr;
    a.x = c.dx.data();
    a.y = dy.data();
    a.rows = rows, a.cols = cols, a.n_tokens = n_tokens, a.epilogue = e;
    Q35_REQUIRE_OK(launch::gemm(a));
    const auto y = test::to_host(dy);
    int64_t bad = 0;
    for (size_t i = 0; i < y.size(); ++i) {
      const auto [want, tol] = c.expect(e, i, cols + 1);
      bad += !(std::fabs(double(y[i]) - want) <= tol + 1e-30);
    }
    CHECK(bad == 0);
  });
}

template <class F>
constexpr int64_t min_cols = F::block_elems > quant::unit_elems ? F::block_elems : quant::unit_elems;

TEST_CASE_TEMPLATE("gemm: odd tiles, every format and epilogue" * test::needs_device(), F, quant::f32_format,
                   quant::f16_format, quant::bf16_format, quant::q8_0_format, quant::q4_0_format, quant::q4_k_format,
                   quant::q5_k_format, quant::q6_k_format) {
  check_gemm<F>(70, min_cols<F>, 33, epilogue::store, 71);  // 2 x 2 tiles, both partial
  check_gemm<F>(64, 3 * min_cols<F>, 1, epilogue::residual, 72);
  check_gemm<F>(13, 2 * min_cols<F>, 40, epilogue::swiglu, 73);
}

TEST_CASE("gemm: Qwen3.5 hidden size 4096 as K, 37 prompt tokens" * test::needs_device()) {
  check_gemm<quant::q4_k_format>(200, 4096, 37, epilogue::store, 81);
  check_gemm<quant::q8_0_format>(96, 4096, 65, epilogue::swiglu, 82);
}

// Non-finite inputs propagate as IEEE arithmetic says, and stay in their token and row: a NaN
// activation of token 33 makes that token's outputs NaN while tokens 32 and 34 of the same 32-token
// tile stay finite; an infinite weight scale in row 66 (second row tile) makes only that row non-finite.
TEST_CASE("gemm: NaN and inf inputs propagate per token and per row" * test::needs_device()) {
  using F = quant::q8_0_format;
  const int64_t rows = 70, cols = 128, n_tokens = 35, nan_token = 33, inf_row = 66;
  auto w = test::random_weights<F>(rows, cols, 93);
  const size_t inf_block = size_t(inf_row * (cols / F::block_elems) + 1) * F::block_bytes;  // row 66, block 1
  w[inf_block + 0] = 0x00;                                                                  // d = +inf (f16 0x7c00)
  w[inf_block + 1] = 0x7c;
  auto x = test::random_floats(size_t(n_tokens * cols), 94);
  x[size_t(nan_token * cols + 70)] = NAN;
  auto dw = test::to_device(w);
  auto dx = test::to_device(x);
  test::for_each_order([&] {
    auto dy = test::poisoned<float>(size_t(n_tokens * rows));
    launch::gemm_args<F> a;
    a.w = reinterpret_cast<const F::block*>(dw.data()), a.x = dx.data(), a.y = dy.data();
    a.rows = rows, a.cols = cols, a.n_tokens = n_tokens, a.epilogue = epilogue::store;
    Q35_REQUIRE_OK(launch::gemm(a));
    const auto y = test::to_host(dy);
    int64_t bad = 0;
    for (int64_t t = 0; t < n_tokens; ++t) {
      for (int64_t r = 0; r < rows; ++r) {
        const float v = y[size_t(t * rows + r)];
        bad += t == nan_token ? !std::isnan(v) : std::isfinite(v) != (r != inf_row);
      }
    }
    CHECK(bad == 0);
  });
}

TEST_CASE("gemm: empty batch and validation") {
  launch::gemm_args<quant::q8_0_format> a;
  alignas(16) static float x[64];
  static float y[4];
  static quant::block_q8_0 w[2];
  a.w = w, a.x = x, a.y = y, a.rows = 1, a.cols = 64, a.n_tokens = 0;
  CHECK(launch::validate(a).ok());
  a.cols = 48;
  CHECK(launch::validate(a).message().find("cols = 48 is not a multiple of the block size 32") != std::string::npos);
}

TEST_CASE("gemm: zero tokens launches nothing" * test::needs_device()) {
  auto w = test::to_device(test::random_weights<quant::q8_0_format>(4, 64, 1));
  auto x = test::to_device(std::vector<float>(64, 1.0f));
  auto y = test::poisoned<float>(4);
  launch::gemm_args<quant::q8_0_format> a;
  a.w = reinterpret_cast<const quant::block_q8_0*>(w.data()), a.x = x.data(), a.y = y.data();
  a.rows = 4, a.cols = 64, a.n_tokens = 0;
  Q35_REQUIRE_OK(launch::gemm(a));
  for (float v : test::to_host(y)) CHECK(std::isnan(v));  // untouched
}

}  // namespace
