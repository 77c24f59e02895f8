// Batch invariance of launch::matmul: a token's output row is bit-identical whatever other tokens share
// the call, for every format, epilogue and Qwen3.5-like row width (Q6_K's rows of 512 and 1024 columns
// included), in its two modes:
// - row_invariant: from one token up to gemv_max_tokens (the GEMV's 1-, 4- and 8-token instances);
// - gemm_every_count: from one token up to gemm_i8_invariant_tokens (64), every count on the GEMM (the
//   int8 GEMM's 16-, 32- and 64-token tiles with the same split-K, the float GEMM for F32/F16/BF16).
// The second mode's rows are also held to the float64 reference (the integer formats, the integer
// path's bound); a call that ignored the flag (the GEMV rounds differently at 1..8 tokens) fails.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "matmul_case.hpp"
#include "q35/launch/matmul.hpp"
#include "test_util.hpp"

namespace {

using namespace q35;
using ops::epilogue;

struct call_runner {
  quant::weight_view w, up;
  int64_t rows, cols;
  epilogue e;
  bool gemm_every_count;
  mutable device_buffer<uint8_t> ws;  // scratch each call may overwrite

  // y of tokens t0 .. t0 + n - 1 of the case in one call
  template <class F>
  std::vector<float> run(const test::matmul_case<F>& c, int64_t t0, int64_t n) const {
    auto dx = test::to_device(std::vector<float>(c.x.begin() + t0 * cols, c.x.begin() + (t0 + n) * cols));
    auto dy = test::to_device(std::vector<float>(c.h0.begin() + t0 * rows, c.h0.begin() + (t0 + n) * rows));
    launch::matmul_args a;
    a.w = w, a.maybe_w_up = up, a.x = dx.data(), a.y = dy.data(), a.n_tokens = n, a.epilogue = e;
    a.maybe_workspace = ws.data(), a.workspace_bytes = ws.bytes();
    a.row_invariant = !gemm_every_count, a.gemm_every_count = gemm_every_count;
    Q35_REQUIRE_OK(launch::matmul(a));
    return test::to_host(dy);
  }
};

template <class F>
call_runner runner(const test::matmul_case<F>& c, int64_t rows, int64_t cols, int64_t n_max, epilogue e,
                   bool gemm_every_count) {
  call_runner r{{}, {}, rows, cols, e, gemm_every_count, {}};
  r.w.data = c.dwg.data(), r.w.type = uint32_t(F::id), r.w.rows = rows, r.w.cols = cols;
  if (e == epilogue::swiglu) r.up = r.w, r.up.data = c.dwu.data();
  Q35_REQUIRE_OK(r.ws.allocate(launch::matmul_workspace_bytes(cols, n_max, (e == epilogue::swiglu ? 2 : 1) * rows)));
  return r;
}

// row_invariant (gemm false): each token alone is the truth, for the calls of the last n tokens, n = 2..8.
// gemm_every_count (gemm true): the rows of the call of all 64 tokens are the truth; calls of the last n
// tokens for n on each side of the tiles' and the GEMV's bounds give the same bits, and so does a token
// alone.
template <class F>
void check_rows_invariant(int64_t cols, epilogue e, bool gemm) {
  CAPTURE(F::name);
  CAPTURE(cols);
  CAPTURE(int(e));
  CAPTURE(gemm);
  const int64_t rows = 40, n_max = gemm ? launch::gemm_i8_invariant_tokens : launch::gemv_max_tokens;
  const test::matmul_case<F> c(rows, cols, n_max, e, gemm ? 317 : 313, true);
  const call_runner r = runner(c, rows, cols, n_max, e, gemm);
  if (!gemm) {
    std::vector<std::vector<float>> alone;
    for (int64_t t = 0; t < n_max; ++t) alone.push_back(r.run(c, t, 1));
    for (int64_t n = 2; n <= n_max; ++n) {
      CAPTURE(n);
      const auto y = r.run(c, n_max - n, n);
      for (int64_t k = 0; k < n; ++k)
        CHECK(std::memcmp(y.data() + k * rows, alone[size_t(n_max - n + k)].data(), size_t(rows) * 4) == 0);
    }
    return;
  }
  const auto all = r.run(c, 0, n_max);
  // the integer formats against float64 (the int8 GEMM's chain: one addition per 32-element group, plus
  // the epilogue's; the float GEMM's own bound is tests/kernels/test_gemm_mma_float.cpp's)
  if constexpr (launch::gemm_i8_supports<F>) {
    int64_t bad = 0;
    for (size_t i = 0; i < all.size(); ++i) {
      const auto [want, tol] = c.expect(e, i, cols / 32 + 1);
      bad += !(std::fabs(double(all[i]) - want) <= tol + 1e-30);
    }
    CHECK(bad == 0);
  }
  for (const int64_t n : {1, 2, 4, 5, 8, 9, 16, 17, 32, 33, 63}) {
    CAPTURE(n);
    const auto y = r.run(c, n_max - n, n);
    CHECK(std::memcmp(y.data(), all.data() + (n_max - n) * rows, size_t(n * rows) * 4) == 0);
  }
  for (const int64_t t : {0, 31}) {
    CAPTURE(t);
    CHECK(std::memcmp(r.run(c, t, 1).data(), all.data() + t * rows, size_t(rows) * 4) == 0);
  }
}

}  // namespace

TEST_CASE_TEMPLATE("matmul: a token's row does not depend on the other tokens of the call" * test::needs_device(), F,
                   quant::f32_format, quant::f16_format, quant::bf16_format, quant::q8_0_format, quant::q4_0_format,
                   quant::q4_k_format, quant::q5_k_format, quant::q6_k_format) {
  for (const int64_t cols : {256, 512, 1024, 2560})
    for (const epilogue e : {epilogue::store, epilogue::residual, epilogue::swiglu})
      check_rows_invariant<F>(cols, e, false);
}

TEST_CASE_TEMPLATE("matmul: gemm_every_count gives a token's row the same bits in every call of 1..64 tokens" *
                       test::needs_device(),
                   F, quant::f32_format, quant::f16_format, quant::bf16_format, quant::q8_0_format, quant::q4_0_format,
                   quant::q4_k_format, quant::q5_k_format, quant::q6_k_format) {
  for (const int64_t cols : {256, 2560})
    for (const epilogue e : {epilogue::store, epilogue::residual, epilogue::swiglu})
      check_rows_invariant<F>(cols, e, true);
}
