// The int8 tensor-core prompt path (kernels/gemm_i8.hpp) against float64 references: every integer
// format and epilogue, token and row counts not a multiple of the 64 x 64 tile (and of the 16- and
// 32-token tiles of dense calls of few tokens), K not a multiple of
// the 128-column step (Q8_0 / Q4_0), the widths of Qwen3.5 rows, extreme integer sums, NaN rows.
// Tolerance: the integer path's bound (reference/gemv_reference.hpp: the activation rounding of the
// 16-bit activations plus fp32 error) with the chain of one addition per 32-element group (split-K's
// chains are no longer: g groups per split and s splits add g + s - 1 <= g s times).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "matmul_case.hpp"
#include "q35/launch/gemm_i8.hpp"
#include "q35/launch/gemv.hpp"
#include "q35/launch/matmul.hpp"
#include "reference/gemv_reference.hpp"
#include "test_util.hpp"

namespace {

using namespace q35;
using ops::epilogue;

// Kernel launches so far (sim; -1 on a GPU, where the checks of launch counts are left out).
int64_t launch_count() {
#if Q35_BACKEND_SIM
  return sim::counters().launches.load();
#else
  return -1;
#endif
}

// fp32 additions in one output's chain: one per activation group, plus the epilogue's
int64_t gemm_i8_depth(int64_t cols) { return cols / 32 + 1; }

struct split_input {
  device_buffer<uint8_t> buf;
  quant::act8x2_view view;
};
split_input quantize(const device_buffer<float>& x, int64_t n_tokens, int64_t cols) {
  split_input s;
  Q35_REQUIRE_OK(s.buf.allocate(quant::act8x2_bytes(cols, n_tokens)));
  Q35_REQUIRE_OK(launch::quantize_act8x2(x.data(), n_tokens, cols, s.buf.data(), s.buf.bytes(), s.view));
  return s;
}

template <class F>
void check_gemm_i8(int64_t rows, int64_t cols, int64_t n_tokens, epilogue e, uint64_t seed, bool all_orders = true,
                   int k_splits = 0, int tile = 0) {
  CAPTURE(F::name);
  CAPTURE(rows);
  CAPTURE(cols);
  CAPTURE(n_tokens);
  CAPTURE(int(e));
  CAPTURE(k_splits);
  CAPTURE(tile);
  const test::matmul_case<F> c(rows, cols, n_tokens, e, seed, /*act16=*/true);
  const split_input x = quantize(c.dx, n_tokens, cols);
  // forced splits: a workspace of exactly the partials' size (poisoned: every partial is written)
  device_buffer<float> ws;
  const size_t ws_bytes = launch::gemm_i8_split_bytes(rows * (e == epilogue::swiglu ? 2 : 1), n_tokens, k_splits);
  if (ws_bytes) ws = test::poisoned<float>(ws_bytes / 4);
  auto body = [&] {
    // poisoned, with a tail after the outputs that must stay untouched
    const size_t n_out = size_t(n_tokens * rows), tail = 64;
    auto dy = test::poisoned<float>(n_out + tail);
    if (e == epilogue::residual) Q35_REQUIRE_OK(dy.upload(c.h0.data(), n_out));
    launch::gemm_i8_args<F> a;
    a.w = c.w();
    a.maybe_w_up = e == epilogue::swiglu ? c.w_up() : nullptr;
    a.x = x.view, a.y = dy.data();
    a.rows = rows, a.cols = cols, a.n_tokens = n_tokens, a.epilogue = e;
    a.k_splits = k_splits, a.maybe_workspace = ws.data(), a.workspace_bytes = ws_bytes, a.tile_tokens = tile;
    Q35_REQUIRE_OK(launch::gemm_i8(a));
    const auto y = test::to_host(dy);
    int64_t bad = 0, bad_tail = 0;
    for (size_t i = 0; i < n_out; ++i) {
      const auto [want, tol] = c.expect(e, i, gemm_i8_depth(cols));
      bad += !(std::fabs(double(y[i]) - want) <= tol + 1e-30);
    }
    for (size_t i = n_out; i < n_out + tail; ++i) {
      uint32_t bits;
      std::memcpy(&bits, &y[i], 4);
      bad_tail += bits != 0xffffffffu;
    }
    CHECK(bad == 0);
    CHECK(bad_tail == 0);
  };
  if (all_orders) {
    test::for_each_order(body);
  } else {
    body();
  }
}

template <class F>
constexpr int64_t kq = F::block_elems > 32 ? F::block_elems : 32;

TEST_CASE_TEMPLATE("gemm_i8: odd tiles, every integer format and epilogue" * test::needs_device(), F,
                   quant::q8_0_format, quant::q4_0_format, quant::q4_k_format, quant::q5_k_format, quant::q6_k_format) {
  check_gemm_i8<F>(70, 2 * kq<F>, 33, epilogue::store, 71);  // 2 row tiles x 1 token tile, both partial
  check_gemm_i8<F>(64, 3 * kq<F>, 9, epilogue::residual, 72);
  check_gemm_i8<F>(45, 2 * kq<F>, 66, epilogue::swiglu, 73);  // swiglu: 32 outputs per row tile
}

// The 16- and 32-token tiles: chosen for calls of 1..16 and 17..32 tokens, and forced over several
// token tiles (each partial), split and not.
TEST_CASE_TEMPLATE("gemm_i8: the 16- and 32-token tiles, every integer format and epilogue" * test::needs_device(), F,
                   quant::q8_0_format, quant::q4_0_format, quant::q4_k_format, quant::q5_k_format, quant::q6_k_format) {
  CHECK(launch::gemm_i8_tile_tokens(1) == 16);
  CHECK(launch::gemm_i8_tile_tokens(16) == 16);
  CHECK(launch::gemm_i8_tile_tokens(17) == 32);
  CHECK(launch::gemm_i8_tile_tokens(32) == 32);
  CHECK(launch::gemm_i8_tile_tokens(33) == 64);
  CHECK(launch::gemm_i8_tile_tokens(1000) == 64);
  check_gemm_i8<F>(70, 2 * kq<F>, 16, epilogue::store, 74);  // one full 16-token tile, 2 row tiles
  check_gemm_i8<F>(64, 3 * kq<F>, 3, epilogue::residual, 75, false);
  check_gemm_i8<F>(45, 2 * kq<F>, 13, epilogue::swiglu, 76);
  check_gemm_i8<F>(70, 2 * kq<F>, 32, epilogue::residual, 77);  // one full 32-token tile
  check_gemm_i8<F>(45, 2 * kq<F>, 21, epilogue::swiglu, 78, false);
  check_gemm_i8<F>(70, 2 * kq<F>, 45, epilogue::store, 79, false, 0, 16);   // 3 tiles of 16, the last of 13
  check_gemm_i8<F>(45, 2 * kq<F>, 70, epilogue::swiglu, 80, false, 0, 32);  // 3 tiles of 32, the last of 6
  check_gemm_i8<F>(40, 1280, 20, epilogue::residual, 81, false, 3, 16);     // split K over 2 tiles of 16
  check_gemm_i8<F>(40, 1280, 33, epilogue::swiglu, 82, false, 4, 32);
}

TEST_CASE_TEMPLATE("gemm_i8: K tails of the 32-element formats" * test::needs_device(), F, quant::q8_0_format,
                   quant::q4_0_format) {
  for (int64_t cols : {32, 96, 160, 224}) {
    check_gemm_i8<F>(17, cols, 12, epilogue::store, 80 + cols, false);
    check_gemm_i8<F>(17, cols, 40, epilogue::residual, 90 + cols, false, 0, 32);
  }
}

// Split-K (forced): K ranges of 4, 4, 2 and 3, 3, 3, 1 steps of 128 columns (the last range short),
// one split per 128-column step of a K tail, and more splits asked than there are steps.
TEST_CASE_TEMPLATE("gemm_i8: split-K, every integer format and epilogue" * test::needs_device(), F, quant::q8_0_format,
                   quant::q4_0_format, quant::q4_k_format, quant::q5_k_format, quant::q6_k_format) {
  check_gemm_i8<F>(70, 1280, 33, epilogue::store, 91, false, 3);
  check_gemm_i8<F>(64, 1280, 9, epilogue::residual, 92, false, 4);
  check_gemm_i8<F>(45, 1280, 66, epilogue::swiglu, 93, false, 2);   // past one token tile: splits still run
  check_gemm_i8<F>(40, 1280, 20, epilogue::swiglu, 94, false, 12);  // 10 steps: 10 splits
  check_gemm_i8<F>(40, 256, 12, epilogue::store, 95, false, 5);     // 2 steps: 2 splits
}

TEST_CASE_TEMPLATE("gemm_i8: split-K over a K tail" * test::needs_device(), F, quant::q8_0_format, quant::q4_0_format) {
  check_gemm_i8<F>(17, 160, 12, epilogue::store, 96, false, 2);  // steps of 128 and 32 columns
  check_gemm_i8<F>(17, 416, 12, epilogue::residual, 97, false, 4);
}

// launch::matmul with the workspace matmul_workspace_bytes sizes: a call of one token tile on a
// matrix of one row tile splits K automatically (one more launch: the reduction), and a token's row
// is bit-identical in every such call (9..64 tokens, on the 16-, 32- and 64-token tiles); past one
// token tile it runs unsplit.
TEST_CASE("gemm_i8: matmul splits K for few row tiles, the same way at 9..64 tokens" * test::needs_device()) {
  const int64_t rows = 40, cols = 2560, n_max = 64;
  CHECK(launch::gemm_i8_auto_splits(rows, cols, 9) ==
        std::min(cols / 128 / launch::gemm_i8_min_split_steps, int64_t(launch::gemm_i8_max_splits)));
  CHECK(launch::gemm_i8_auto_splits(rows, cols, 9) == launch::gemm_i8_auto_splits(rows, cols, 64));
  CHECK(launch::gemm_i8_auto_splits(rows, cols, 65) == 1);
  CHECK(launch::gemm_i8_auto_splits(64 * 2 * launch::sm_count(), cols, 9) == 1);  // enough row tiles
  CHECK(launch::gemm_i8_auto_splits(rows, 384, 9) == 1);                          // too few K steps
  const test::matmul_case<quant::q4_k_format> c(rows, cols, n_max + 1, epilogue::residual, 98, true);
  quant::weight_view w;
  w.data = c.dwg.data(), w.type = uint32_t(quant::type_id::q4_k), w.rows = rows, w.cols = cols;
  device_buffer<uint8_t> ws;
  Q35_REQUIRE_OK(ws.allocate(launch::matmul_workspace_bytes(cols, n_max + 1, rows)));
  // y of tokens t0 .. t0 + n - 1 in one call, and the launches it took
  auto run = [&](int64_t t0, int64_t n, int64_t& launches) {
    auto dx = test::to_device(std::vector<float>(c.x.begin() + t0 * cols, c.x.begin() + (t0 + n) * cols));
    auto dy = test::to_device(std::vector<float>(c.h0.begin() + t0 * rows, c.h0.begin() + (t0 + n) * rows));
    launch::matmul_args a;
    a.w = w, a.x = dx.data(), a.y = dy.data(), a.n_tokens = n, a.epilogue = epilogue::residual;
    a.maybe_workspace = ws.data(), a.workspace_bytes = ws.bytes();
    const int64_t l0 = launch_count();
    Q35_REQUIRE_OK(launch::matmul(a));
    launches = launch_count() - l0;
    return test::to_host(dy);
  };
  int64_t launches = 0;
  const bool sim = launch_count() >= 0;
  const auto all = run(0, n_max, launches);
  CHECK((!sim || launches == 3));  // the activations' split, the GEMM's splits, their reduction
  int64_t bad = 0;
  for (int64_t i = 0; i < n_max * rows; ++i) {
    const auto [want, tol] = c.expect(epilogue::residual, size_t(i), gemm_i8_depth(cols));
    bad += !(std::fabs(double(all[size_t(i)]) - want) <= tol);
  }
  CHECK(bad == 0);
  for (const int64_t n : {9, 10, 16, 17, 32, 33, 63}) {
    CAPTURE(n);
    const int64_t t0 = n_max - n;
    const auto y = run(t0, n, launches);
    CHECK((!sim || launches == 3));
    CHECK(std::memcmp(y.data(), all.data() + t0 * rows, size_t(n * rows) * 4) == 0);
  }
  (void)run(0, n_max + 1, launches);
  CHECK((!sim || launches == 2));  // two token tiles: unsplit
}

// Called directly (matmul takes the GEMV there), the GEMM gives a token's row the same bits in calls
// of 1..8 tokens (the 16-token tile, the automatic splits of the shape) as in a 64-token call: what a
// batch-invariant mode running every decode row through it would rely on (docs/server.md, "Not yet").
TEST_CASE_TEMPLATE("gemm_i8: a token's row is bit-identical in calls of 1..8 tokens and of 64" * test::needs_device(),
                   F, quant::q8_0_format, quant::q4_k_format, quant::q6_k_format) {
  const int64_t rows = 40, cols = 2560, n_max = 64;
  REQUIRE(launch::gemm_i8_auto_splits(rows, cols, 1) > 1);
  const test::matmul_case<F> c(rows, cols, n_max, epilogue::residual, 97, true);
  device_buffer<uint8_t> ws;
  Q35_REQUIRE_OK(ws.allocate(launch::gemm_i8_split_workspace_bytes(rows, cols, n_max)));
  auto run = [&](int64_t t0, int64_t n) {
    auto dx = test::to_device(std::vector<float>(c.x.begin() + t0 * cols, c.x.begin() + (t0 + n) * cols));
    auto dy = test::to_device(std::vector<float>(c.h0.begin() + t0 * rows, c.h0.begin() + (t0 + n) * rows));
    const split_input x = quantize(dx, n, cols);
    launch::gemm_i8_args<F> a;
    a.w = c.w(), a.x = x.view, a.y = dy.data();
    a.rows = rows, a.cols = cols, a.n_tokens = n, a.epilogue = epilogue::residual;
    a.maybe_workspace = ws.data(), a.workspace_bytes = ws.bytes();
    Q35_REQUIRE_OK(launch::gemm_i8(a));
    return test::to_host(dy);
  };
  const auto all = run(0, n_max);
  int64_t bad = 0;
  for (int64_t i = 0; i < n_max * rows; ++i) {
    const auto [want, tol] = c.expect(epilogue::residual, size_t(i), gemm_i8_depth(cols));
    bad += !(std::fabs(double(all[size_t(i)]) - want) <= tol);
  }
  CHECK(bad == 0);
  for (int64_t n = 1; n <= 8; ++n) {
    CAPTURE(n);
    const int64_t t0 = (n * 7) % (n_max - n + 1);
    const auto y = run(t0, n);
    CHECK(std::memcmp(y.data(), all.data() + t0 * rows, size_t(n * rows) * 4) == 0);
  }
}

TEST_CASE("gemm_i8: Qwen3.5 widths as K, prompt-sized token counts" * test::needs_device()) {
  check_gemm_i8<quant::q4_k_format>(130, 1024, 129, epilogue::store, 81, false);
  check_gemm_i8<quant::q6_k_format>(40, 2560, 20, epilogue::residual, 82, false);  // 210-byte blocks, odd phases
  check_gemm_i8<quant::q5_k_format>(33, 1024, 70, epilogue::swiglu, 83, false);
  check_gemm_i8<quant::q8_0_format>(64, 4096, 16, epilogue::store, 84, false);
}

// The largest integer sums: Q8_0 quants of +-127 against activations at +-32767 (hi = 127 / -128,
// lo = 255 / 1): |S_lo| = 32 * 127 * 255 and |S_hi| = 32 * 127 * 128 must convert exactly.
TEST_CASE("gemm_i8: extreme integer sums convert exactly" * test::needs_device()) {
  const int64_t rows = 4, cols = 64, n_tokens = 2;
  std::vector<quant::block_q8_0> w(size_t(rows * cols / 32));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t b = 0; b < cols / 32; ++b) {
      quant::block_q8_0& blk = w[size_t(r * (cols / 32) + b)];
      blk.d = 0x3c00;  // 1.0
      for (int i = 0; i < 32; ++i) blk.qs[i] = int8_t(r % 2 ? -127 : 127);
    }
  std::vector<float> xh(size_t(n_tokens * cols));
  for (int64_t c = 0; c < cols; ++c) xh[size_t(c)] = 1.0f, xh[size_t(cols + c)] = -2.0f;  // token 1: q = -32767
  std::vector<uint8_t> wb(w.size() * sizeof(quant::block_q8_0));
  std::memcpy(wb.data(), w.data(), wb.size());
  const auto dw = test::to_device(wb);
  const auto dx = test::to_device(xh);
  const split_input x = quantize(dx, n_tokens, cols);
  auto dy = test::poisoned<float>(size_t(rows * n_tokens));
  launch::gemm_i8_args<quant::q8_0_format> a;
  a.w = reinterpret_cast<const quant::block_q8_0*>(dw.data());
  a.x = x.view, a.y = dy.data(), a.rows = rows, a.cols = cols, a.n_tokens = n_tokens;
  Q35_REQUIRE_OK(launch::gemm_i8(a));
  const auto y = test::to_host(dy);
  for (int64_t t = 0; t < n_tokens; ++t)
    for (int64_t r = 0; r < rows; ++r) {
      // scale * d * sum q_w q_x over 64 elements, scale = max|x| / 32767, q_x = +-32767
      const double amax = t == 0 ? 1.0 : 2.0, sign = (r % 2 ? -1.0 : 1.0) * (t == 0 ? 1.0 : -1.0);
      const double want = sign * double(float(amax / 32767.0)) * 64.0 * 127.0 * 32767.0;
      CAPTURE(t);
      CAPTURE(r);
      CHECK(std::fabs(double(y[size_t(t * rows + r)]) - want) <= 1e-6 * std::fabs(want));
    }
}

// A NaN in one token's activations makes that token's outputs NaN (as the float product would) and
// leaves the others finite and correct.
TEST_CASE("gemm_i8: a NaN activation poisons its token only" * test::needs_device()) {
  const int64_t rows = 20, cols = 256, n_tokens = 11;
  test::matmul_case<quant::q4_k_format> c(rows, cols, n_tokens, epilogue::store, 91, true);
  std::vector<float> x = c.x;
  x[size_t(5 * cols + 77)] = NAN;
  const auto dx = test::to_device(x);
  const split_input xs = quantize(dx, n_tokens, cols);
  auto dy = test::poisoned<float>(size_t(rows * n_tokens));
  launch::gemm_i8_args<quant::q4_k_format> a;
  a.w = c.w(), a.x = xs.view, a.y = dy.data(), a.rows = rows, a.cols = cols, a.n_tokens = n_tokens;
  Q35_REQUIRE_OK(launch::gemm_i8(a));
  const auto y = test::to_host(dy);
  int64_t bad = 0;
  for (int64_t t = 0; t < n_tokens; ++t)
    for (int64_t r = 0; r < rows; ++r) {
      const size_t i = size_t(t * rows + r);
      if (t == 5) {
        bad += !std::isnan(y[i]);
      } else {
        const auto [want, tol] = c.expect(epilogue::store, i, gemm_i8_depth(cols));
        bad += !(std::fabs(double(y[i]) - want) <= tol);
      }
    }
  CHECK(bad == 0);
}

// The split planes hold exactly the GEMV's 16-bit values: q = 256 hi + lo, same scale and sum.
TEST_CASE("gemm_i8: quantize_act8x2 splits the act16 values exactly" * test::needs_device()) {
  const int64_t n = 3, cols = 320;
  std::vector<float> x = test::random_floats(size_t(n * cols), 5, -3.0f, 3.0f);
  x[7] = 0.0f, x[100] = 1e-30f, x[200] = -40000.0f;
  const auto dx = test::to_device(x);
  const split_input s = quantize(dx, n, cols);
  device_buffer<uint8_t> q16;
  Q35_REQUIRE_OK(q16.allocate(quant::act16_bytes(cols, n)));
  Q35_REQUIRE_OK(launch::quantize_act16(dx.data(), n, cols, q16.data(), q16.bytes()));
  const auto a8 = test::to_host(s.buf);
  const auto a16 = test::to_host(q16);
  const size_t plane = quant::act8x2_plane_bytes(cols, n);
  int64_t bad = 0;
  for (int64_t i = 0; i < n * cols; ++i) {
    int16_t q;
    std::memcpy(&q, a16.data() + 2 * i, 2);
    const int v = 256 * int(int8_t(a8[size_t(i)])) + int(a8[plane + size_t(i)]);
    bad += v != q;
  }
  for (int64_t g = 0; g < n * cols / 32; ++g) {
    quant::act16_group g16;
    quant::act8x2_group g8;
    std::memcpy(&g16, a16.data() + quant::act16_groups_offset(cols, n) + 16 * g, 16);
    std::memcpy(&g8, a8.data() + 2 * plane + 8 * g, 8);
    bad += std::memcmp(&g16.scale, &g8.scale, 4) != 0 || std::memcmp(&g16.sum, &g8.sum, 4) != 0;
  }
  CHECK(bad == 0);
}

// launch::matmul past 8 tokens: x split once by quantize_shared_input (maybe_x8, no workspace) gives
// the bits of the matmul that splits x in its own workspace; all-float weights get no split.
TEST_CASE("gemm_i8: matmul with a shared split input equals its own split" * test::needs_device()) {
  const int64_t rows = 40, cols = 512, n = 21;
  const test::matmul_case<quant::q4_k_format> c(rows, cols, n, epilogue::store, 95, true);
  quant::weight_view w;
  w.data = c.dwg.data(), w.type = uint32_t(quant::type_id::q4_k), w.rows = rows, w.cols = cols;
  device_buffer<uint8_t> ws, shared;
  Q35_REQUIRE_OK(ws.allocate(launch::matmul_workspace_bytes(cols, n, rows)));
  Q35_REQUIRE_OK(shared.allocate(launch::matmul_workspace_bytes(cols, n, rows)));
  auto y1 = test::poisoned<float>(size_t(n * rows)), y2 = test::poisoned<float>(size_t(n * rows));
  launch::matmul_args a;
  a.w = w, a.x = c.dx.data(), a.y = y1.data(), a.n_tokens = n;
  a.maybe_workspace = ws.data(), a.workspace_bytes = ws.bytes();
  Q35_REQUIRE_OK(launch::matmul(a));
  quant::act16_view x16;
  quant::act8x2_view x8;
  quant::weight_view f32 = w;
  f32.type = uint32_t(quant::type_id::f32);
  Q35_REQUIRE_OK(launch::quantize_shared_input(c.dx.data(), n, cols, {f32}, shared.data(), shared.bytes(), x16, x8));
  CHECK(x8.empty());
  Q35_REQUIRE_OK(launch::quantize_shared_input(c.dx.data(), n, cols, {f32, w}, shared.data(), shared.bytes(), x16, x8));
  REQUIRE(!x8.empty());
  CHECK(x16.empty());
  a.y = y2.data(), a.maybe_workspace = nullptr, a.workspace_bytes = 0, a.maybe_x8 = x8;
  Q35_REQUIRE_OK(launch::matmul(a));
  const auto h1 = test::to_host(y1), h2 = test::to_host(y2);
  CHECK(std::memcmp(h1.data(), h2.data(), h1.size() * 4) == 0);
  a.maybe_x8 = {};  // neither a split input nor a workspace: the error names the bytes
  CHECK(launch::matmul(a).to_string().find("need a workspace of") != std::string::npos);
}

TEST_CASE("gemm_i8: bad arguments are named") {
  launch::gemm_i8_args<quant::q4_k_format> a;
  a.rows = 4, a.cols = 100, a.n_tokens = 9;
  CHECK(launch::gemm_i8(a).to_string().find("cols = 100") != std::string::npos);
  a.cols = 256;
  CHECK(launch::gemm_i8(a).to_string().find("null") != std::string::npos);
}

// Split-K's arguments: a negative count, a misaligned workspace, and forced splits without room for
// their partials are errors naming the value or the bytes; automatic splits without room run unsplit.
// A token tile other than 16, 32 or 64 is named.
TEST_CASE("gemm_i8: bad split-K arguments are named" * test::needs_device()) {
  const int64_t rows = 40, cols = 1280, n = 12;
  const test::matmul_case<quant::q4_k_format> c(rows, cols, n, epilogue::store, 99, true);
  const split_input x = quantize(c.dx, n, cols);
  device_buffer<float> y, ws;
  Q35_REQUIRE_OK(y.allocate(size_t(n * rows)));
  Q35_REQUIRE_OK(ws.allocate(64));
  launch::gemm_i8_args<quant::q4_k_format> a;
  a.w = c.w(), a.x = x.view, a.y = y.data(), a.rows = rows, a.cols = cols, a.n_tokens = n;
  a.k_splits = -1;
  CHECK(launch::gemm_i8(a).to_string().find("k_splits = -1 is negative") != std::string::npos);
  a.k_splits = 2, a.maybe_workspace = reinterpret_cast<uint8_t*>(ws.data()) + 4, a.workspace_bytes = 32;
  CHECK(launch::gemm_i8(a).to_string().find("maybe_workspace is not 16-byte aligned") != std::string::npos);
  const std::string need = std::to_string(launch::gemm_i8_split_bytes(rows, n, 2));
  a.maybe_workspace = ws.data(), a.workspace_bytes = ws.bytes();
  CHECK(launch::gemm_i8(a).to_string().find("k_splits = 2 needs a workspace of " + need + " bytes (have 256)") !=
        std::string::npos);
  a.maybe_workspace = nullptr, a.workspace_bytes = 0;
  CHECK(launch::gemm_i8(a).to_string().find("(have 0)") != std::string::npos);
  a.k_splits = 0;  // automatic: 2 splits would be chosen on a 132-SM GPU, but there is no room: unsplit
  CHECK(launch::gemm_i8(a).ok());
  for (const int tile : {8, 48, -16, 128}) {
    a.tile_tokens = tile;
    CHECK(launch::gemm_i8(a).to_string().find("tile_tokens = " + std::to_string(tile) +
                                              " is not 0 (automatic), 16, 32 or 64") != std::string::npos);
  }
}

}  // namespace
