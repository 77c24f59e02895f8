// GEMV family against float64 host references: every format, 1-8 tokens, odd and real Qwen3.5
// shapes, the residual and SwiGLU epilogues, expert-indexed runs with repeated and out-of-range ids.
//
// Tolerance, float path: the kernel's weights are bit-exact (tests/quant), so the only error is fp32
// accumulation. Each lane sums its items' rounded products in order and a <= 5-level shuffle tree
// adds the lanes of a row, so the chain depth is <= cols/32 + 8; Higham's bound
// (depth + 1) * 2^-24 * sum|w x| (ref::fp32_dot_bound) holds for every output.
// Integer path (16-bit activations, dp2a): the activation rounding (<= 2^-16 of each 32-group's
// max |x|) plus the fp32 steps per group, as derived at ref::fp32_dot_bound.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "matmul_case.hpp"
#include "q35/launch/gemv.hpp"
#include "reference/gemv_reference.hpp"
#include "test_util.hpp"

namespace {

using namespace q35;
using launch::gemv_epilogue;

int64_t chain_depth(int64_t cols) { return cols / warp_size + 8; }

// Minimum columns GEMV accepts for a format: one block, or one 16-element unit of a plain type.
template <class F>
constexpr int64_t min_cols = F::block_elems > quant::unit_elems ? F::block_elems : quant::unit_elems;

// Runs one plain GEMV with epilogue `e` and compares every output with the float64 reference.
// act16: through the integer path (activations quantized into a workspace first).
template <class F>
void check_gemv(int64_t rows, int64_t cols, int n_tokens, gemv_epilogue e, uint64_t seed, bool act16 = false,
                int warps_per_row = 0) {
  CAPTURE(F::name);
  CAPTURE(warps_per_row);
  CAPTURE(rows);
  CAPTURE(cols);
  CAPTURE(n_tokens);
  CAPTURE(int(e));
  CAPTURE(act16);
  const test::matmul_case<F> c(rows, cols, n_tokens, e, seed, act16);
  device_buffer<uint8_t> workspace;
  if (act16) Q35_REQUIRE_OK(workspace.allocate(launch::gemv_workspace_bytes(cols, n_tokens)));
  test::for_each_order([&] {
    auto dy = e == gemv_epilogue::residual ? test::to_device(c.h0) : test::poisoned<float>(size_t(n_tokens * rows));
    launch::gemv_args<F> a;
    a.w = c.w();
    a.maybe_w_up = e == gemv_epilogue::swiglu ? c.w_up() : nullptr;
    a.x = c.dx.data();
    a.y = dy.data();
    a.rows = rows;
    a.cols = cols;
    a.n_tokens = n_tokens;
    a.epilogue = e;
    a.maybe_workspace = workspace.data();
    a.workspace_bytes = workspace.bytes();
    a.warps_per_row = warps_per_row;
    if (act16) REQUIRE(launch::gemv_has_int_path(a));
    Q35_REQUIRE_OK(launch::gemv(a));
    const auto y = test::to_host(dy);
    int64_t bad = 0, first = -1;
    for (size_t i = 0; i < y.size(); ++i) {
      const auto [want, tol] = c.expect(e, i, chain_depth(cols));
      if (!(std::fabs(double(y[i]) - want) <= tol + 1e-30)) {
        if (first < 0) first = int64_t(i);
        ++bad;
      }
    }
    if (first >= 0) INFO("first bad output " << first << ": got " << y[size_t(first)]);
    CHECK(bad == 0);
  });
}

#define Q35_ALL_FORMATS                                                                             \
  quant::f32_format, quant::f16_format, quant::bf16_format, quant::q8_0_format, quant::q4_0_format, \
      quant::q4_k_format, quant::q5_k_format, quant::q6_k_format

TEST_CASE_TEMPLATE("gemv: odd shapes, 1-8 tokens, every format" * test::needs_device(), F, Q35_ALL_FORMATS) {
  // rows not a multiple of a block's rows; columns at the minimum, and an odd number of units (one
  // lane per row) or 2 x 9 units (two lanes per row, nine items each)
  const int64_t two_segments = 18 * min_cols<F>;
  check_gemv<F>(13, min_cols<F>, 1, gemv_epilogue::store, 11);
  check_gemv<F>(5, min_cols<F>, 8, gemv_epilogue::store, 12);
  check_gemv<F>(37, two_segments, 3, gemv_epilogue::store, 13);
  check_gemv<F>(9, 2 * min_cols<F>, 2, gemv_epilogue::store, 14);
  check_gemv<F>(21, two_segments, 5, gemv_epilogue::store, 15);
}

TEST_CASE_TEMPLATE("gemv: residual epilogue h += W x" * test::needs_device(), F, Q35_ALL_FORMATS) {
  check_gemv<F>(19, 3 * min_cols<F>, 1, gemv_epilogue::residual, 21);
  check_gemv<F>(8, min_cols<F>, 4, gemv_epilogue::residual, 22);
}

TEST_CASE_TEMPLATE("gemv: fused gate+up SwiGLU epilogue" * test::needs_device(), F, Q35_ALL_FORMATS) {
  check_gemv<F>(19, 3 * min_cols<F>, 1, gemv_epilogue::swiglu, 31);
  check_gemv<F>(11, 2 * min_cols<F>, 7, gemv_epilogue::swiglu, 32);
}

#define Q35_INT_FORMATS \
  quant::q8_0_format, quant::q4_0_format, quant::q4_k_format, quant::q5_k_format, quant::q6_k_format

// The integer path: rows not a multiple of a block's rows, 1, 3 and 6 items per row (one, one and
// two lanes per row), every token count bucket and epilogue.
TEST_CASE_TEMPLATE("gemv integer path: every quantized format, 1-8 tokens, every epilogue" * test::needs_device(), F,
                   Q35_INT_FORMATS) {
  const int64_t item = ops::dot16<F>::item_elems;
  check_gemv<F>(13, item, 1, gemv_epilogue::store, 111, true);
  check_gemv<F>(5, item, 8, gemv_epilogue::store, 112, true);
  check_gemv<F>(37, 3 * item, 3, gemv_epilogue::store, 113, true);
  check_gemv<F>(9, 6 * item, 2, gemv_epilogue::store, 114, true);
  check_gemv<F>(19, 2 * item, 1, gemv_epilogue::residual, 121, true);
  check_gemv<F>(8, item, 4, gemv_epilogue::residual, 122, true);
  check_gemv<F>(19, item, 1, gemv_epilogue::swiglu, 131, true);
  check_gemv<F>(11, 2 * item, 7, gemv_epilogue::swiglu, 132, true);
}

// Q6_K rows its 2048-weight, 16-byte-load item does not tile (rows of 210 n bytes are then only 8- or
// 4-byte aligned): one-token products take 4-block items of 8-byte loads (rows a multiple of 1024) or
// 2-block items of 4-byte loads (512); the sim faults a load that is not aligned to its width. Every
// epilogue, several items per lane, split-K; more tokens and expert mode there take the float path.
TEST_CASE("gemv integer path: Q6_K rows of 512 n and 1024 n weights (8- and 4-byte-load items)" *
          test::needs_device()) {
  using F = quant::q6_k_format;
  auto load_bytes = [](int64_t cols, int n_tokens, bool experts = false) {
    launch::gemv_args<F> a;
    a.w = reinterpret_cast<const quant::block_q6_k*>(uintptr_t(256));  // any 256-byte aligned address
    a.cols = cols, a.n_tokens = n_tokens;
    int32_t id = 0;
    if (experts) a.maybe_expert_ids = &id, a.expert_stride_bytes = 0;
    return launch::gemv_int_load_bytes(a);
  };
  CHECK(load_bytes(2048, 1) == 16);
  CHECK(load_bytes(2048, 8) == 16);
  CHECK(load_bytes(512, 1) == 4);
  CHECK(load_bytes(1024, 1) == 8);
  CHECK(load_bytes(1536, 1) == 4);
  CHECK(load_bytes(2560, 1) == 4);
  CHECK(load_bytes(3584, 1) == 4);
  CHECK(load_bytes(5120, 1) == 8);
  CHECK(load_bytes(17408, 1) == 8);
  CHECK(load_bytes(256, 1) == 0);         // half a 2-block item
  CHECK(load_bytes(1024, 4) == 0);        // 2+ tokens: the float path
  CHECK(load_bytes(1024, 1, true) == 0);  // expert mode: the float path
  for (gemv_epilogue e : {gemv_epilogue::store, gemv_epilogue::residual, gemv_epilogue::swiglu}) {
    check_gemv<F>(13, 512, 1, e, 161, true);   // one 2-block item per row
    check_gemv<F>(21, 1024, 1, e, 162, true);  // one 4-block item per row
    check_gemv<F>(9, 2560, 1, e, 163, true);   // 5 items: one lane per row, odd rows 4-byte aligned only
    check_gemv<F>(7, 5120, 1, e, 164, true);   // 5 items of 8-byte loads
  }
  check_gemv<F>(6, 3584, 1, gemv_epilogue::residual, 165, true);   // 7 items (Qwen3.5-0.8B ffn_down)
  check_gemv<F>(5, 12 * 512, 1, gemv_epilogue::store, 166, true);  // 12 items of 4-byte loads: 4 lanes x 3
  for (int warps : {1, 2, 4}) {
    check_gemv<F>(7, 6 * 1024, 1, gemv_epilogue::store, 167, true, warps);
    check_gemv<F>(5, 3 * 512, 1, gemv_epilogue::swiglu, 168, true, warps);
  }
  check_gemv<F>(9, 1024, 4, gemv_epilogue::store, 169);  // 4 tokens: float path
}

// Every row width of a Qwen3.5 checkpoint (0.8B ... 27B, 35B-A3B: n_embd, attention and GDN output
// widths, FFN and expert widths) has the integer path at one token in every quantized format a
// Q4_K_M / Q5_K_M / Q6_K / Q8_0 file holds (docs/benchmarks.md lists the path per model and tensor).
TEST_CASE("gemv integer path: every Qwen3.5 row width, every quantized format, one token") {
  auto check_format = [](auto tag) {
    using F = typename decltype(tag)::type;
    for (int64_t cols : {512, 1024, 2048, 2560, 3584, 4096, 5120, 6144, 9216, 12288, 17408}) {
      CAPTURE(F::name);
      CAPTURE(cols);
      launch::gemv_args<F> a;
      a.w = reinterpret_cast<const typename F::block*>(uintptr_t(256));
      a.cols = cols, a.n_tokens = 1;
      CHECK(launch::gemv_has_int_path(a));
    }
  };
  check_format(std::type_identity<quant::q4_k_format>{});
  check_format(std::type_identity<quant::q5_k_format>{});
  check_format(std::type_identity<quant::q6_k_format>{});
  check_format(std::type_identity<quant::q8_0_format>{});
  check_format(std::type_identity<quant::q4_0_format>{});
}

// Split-K: 1, 2 and 4 warps of a block on the same rows (a slice each, summed in slice order), on
// rows with more and with fewer items than a row's workers, every epilogue, both paths. The
// automatic choice takes a split wherever a matrix has fewer than 4 blocks per SM (most shapes above).
TEST_CASE_TEMPLATE("gemv: split-K across 1, 2 and 4 warps per row" * test::needs_device(), F, Q35_ALL_FORMATS) {
  for (int warps : {1, 2, 4}) {
    check_gemv<F>(7, 18 * min_cols<F>, 1, gemv_epilogue::store, 51, false, warps);
    check_gemv<F>(9, 2 * min_cols<F>, 3, gemv_epilogue::residual, 52, false, warps);
    check_gemv<F>(6, 5 * min_cols<F>, 8, gemv_epilogue::swiglu, 53, false, warps);
    if constexpr (ops::has_dot16<F>) {
      const int64_t item = ops::dot16<F>::item_elems;
      check_gemv<F>(7, 12 * item, 1, gemv_epilogue::store, 54, true, warps);    // 4 lanes x 3 items
      check_gemv<F>(5, 3 * item, 4, gemv_epilogue::residual, 55, true, warps);  // 1 lane x 3 items
      check_gemv<F>(6, 2 * item, 1, gemv_epilogue::swiglu, 56, true, warps);    // fewer items than workers
    }
  }
}

// Real Qwen3.5-9B decode shapes through the integer path the decoder takes (the sim runs them in
// seconds each); the float path at one of them.
TEST_CASE("gemv: Qwen3.5-9B shapes, 4096 -> 12288 gate/up and 12288 -> 4096 down" * test::needs_device()) {
  check_gemv<quant::q4_k_format>(12288, 4096, 1, gemv_epilogue::swiglu, 41, true);
  check_gemv<quant::q6_k_format>(4096, 12288, 2, gemv_epilogue::residual, 42, true);
  check_gemv<quant::q8_0_format>(8192, 4096, 1, gemv_epilogue::store, 43, true);
  check_gemv<quant::q4_k_format>(4096, 12288, 1, gemv_epilogue::residual, 44, true);
  check_gemv<quant::q4_k_format>(4096, 4096, 8, gemv_epilogue::store, 45, false);
}

}  // namespace

namespace {

using namespace q35;

// Non-finite inputs propagate as IEEE arithmetic says: a NaN activation makes every output of its
// token NaN (and leaves the other tokens finite); an infinite weight scale makes its row non-finite.
TEST_CASE("gemv: NaN and inf inputs propagate per token and per row" * test::needs_device()) {
  using F = quant::q8_0_format;
  const int64_t rows = 16, cols = 64;
  auto w = test::random_weights<F>(rows, cols, 91);
  w[size_t(3 * (cols / 32) * F::block_bytes) + 0] = 0x00;  // row 3, block 0: d = +inf (f16 0x7c00)
  w[size_t(3 * (cols / 32) * F::block_bytes) + 1] = 0x7c;
  auto x = test::random_floats(size_t(2 * cols), 92);
  x[size_t(cols + 5)] = NAN;  // token 1, column 5
  auto dw = test::to_device(w);
  auto dx = test::to_device(x);
  test::for_each_order([&] {
    auto dy = test::poisoned<float>(size_t(2 * rows));
    launch::gemv_args<F> a;
    a.w = reinterpret_cast<const F::block*>(dw.data()), a.x = dx.data(), a.y = dy.data();
    a.rows = rows, a.cols = cols, a.n_tokens = 2;
    Q35_REQUIRE_OK(launch::gemv(a));
    const auto y = test::to_host(dy);
    for (int64_t r = 0; r < rows; ++r) {
      CAPTURE(r);
      CHECK(std::isnan(y[size_t(rows + r)]));          // token 1 saw the NaN
      CHECK(std::isfinite(y[size_t(r)]) == (r != 3));  // token 0: only the inf row is not finite
    }
  });
}

// The largest GEMV of the model: the Q6_K output head, 248320 x 4096 (31040 blocks, 834 MB), one
// token through the integer path, one thread order (four would cost minutes of sim time; the orders are covered above).
TEST_CASE("gemv: largest shape, the Q6_K output head 4096 -> 248320" * test::needs_device()) {
  using F = quant::q6_k_format;
  const int64_t rows = 248320, cols = 4096;
  auto dw = test::to_device(test::random_weights<F>(rows, cols, 101));
  const auto x = test::random_floats(size_t(cols), 102);
  auto dx = test::to_device(x);
  auto dy = test::poisoned<float>(size_t(rows));
  device_buffer<uint8_t> workspace;
  Q35_REQUIRE_OK(workspace.allocate(launch::gemv_workspace_bytes(cols, 1)));
  launch::gemv_args<F> a;
  a.w = reinterpret_cast<const F::block*>(dw.data()), a.x = dx.data(), a.y = dy.data();
  a.rows = rows, a.cols = cols;
  a.maybe_workspace = workspace.data(), a.workspace_bytes = workspace.bytes();  // the integer path
  REQUIRE(launch::gemv_has_int_path(a));
  Q35_REQUIRE_OK(launch::gemv(a));
  const auto y = test::to_host(dy);
  const auto w = test::random_weights<F>(rows, cols, 101);  // the same bytes, regenerated on the host
  int64_t bad = 0;
  for (int64_t row = 0; row < rows; ++row) {  // row by row: the float64 reference stays small
    const std::vector<uint8_t> bytes(w.begin() + row * F::row_bytes(cols), w.begin() + (row + 1) * F::row_bytes(cols));
    const ref::dot_result r = ref::matvec_act16(test::reference_weights<F>(bytes, cols),
                                                test::weight_parts<F>(bytes, cols), x.data(), 1, cols, 1)[0];
    bad += !(std::fabs(double(y[size_t(row)]) - r.value) <= ref::fp32_dot_bound(r, cols / warp_size + 8) + 1e-30);
  }
  CHECK(bad == 0);
}

TEST_CASE("gemv: zero rows launch nothing" * test::needs_device()) {
  using F = quant::q4_k_format;
  auto x = test::to_device(std::vector<float>(256, 1.0f));
  auto y = test::poisoned<float>(4);
  static quant::block_q4_k w[1];
  launch::gemv_args<F> a;
  a.w = w, a.x = x.data(), a.y = y.data(), a.rows = 0, a.cols = 256;
  Q35_REQUIRE_OK(launch::gemv(a));
  for (float v : test::to_host(y)) CHECK(std::isnan(v));
}

}  // namespace

namespace {

using namespace q35;

// Activations quantized by their producer (launch::quantize_act16, as a fused RMSNorm/SwiGLU would)
// give bit-identical outputs to the workspace path, with x itself absent; validation names a
// too-small workspace and pre-quantized input on a shape without the integer path.
TEST_CASE("gemv integer path: pre-quantized activations, workspace validation" * test::needs_device()) {
  using F = quant::q4_k_format;
  const int64_t rows = 24, cols = 512;
  const int n_tokens = 3;
  const test::matmul_case<F> c(rows, cols, n_tokens, gemv_epilogue::store, 141, true);
  device_buffer<uint8_t> ws, xq;
  Q35_REQUIRE_OK(ws.allocate(launch::gemv_workspace_bytes(cols, n_tokens)));
  Q35_REQUIRE_OK(xq.allocate(quant::act16_bytes(cols, n_tokens)));
  Q35_REQUIRE_OK(launch::quantize_act16(c.dx.data(), n_tokens, cols, xq.data(), xq.bytes()));
  auto y0 = test::poisoned<float>(size_t(n_tokens * rows)), y1 = test::poisoned<float>(size_t(n_tokens * rows));
  launch::gemv_args<F> a;
  a.w = c.w(), a.x = c.dx.data(), a.y = y0.data(), a.rows = rows, a.cols = cols, a.n_tokens = n_tokens;
  a.maybe_workspace = ws.data(), a.workspace_bytes = ws.bytes();
  Q35_REQUIRE_OK(launch::gemv(a));
  auto b = a;
  b.x = nullptr, b.maybe_workspace = nullptr, b.workspace_bytes = 0, b.y = y1.data();
  b.maybe_x16 = launch::act16_layout(xq.data(), cols, n_tokens);
  Q35_REQUIRE_OK(launch::gemv(b));
  const auto h0 = test::to_host(y0), h1 = test::to_host(y1);
  CHECK(std::memcmp(h0.data(), h1.data(), h0.size() * sizeof(float)) == 0);
  for (size_t i = 0; i < h0.size(); ++i) {
    const auto [want, tol] = c.expect(gemv_epilogue::store, i, chain_depth(cols));
    CHECK(std::fabs(double(h0[i]) - want) <= tol);
  }
  auto small = a;
  small.workspace_bytes = ws.bytes() - 1;
  CHECK(launch::validate(small).message().find("is below gemv_workspace_bytes") != std::string::npos);
  launch::gemv_args<quant::q6_k_format> q6;  // 256 columns: Q6_K's integer items are >= 512 wide
  q6.w = reinterpret_cast<const quant::block_q6_k*>(c.w()), q6.y = y1.data(), q6.rows = 1, q6.cols = 256;
  q6.maybe_x16 = b.maybe_x16;
  CHECK(launch::validate(q6).message().find("maybe_x16 is given but this format and shape have no integer path") !=
        std::string::npos);
}

}  // namespace
