// Expert-indexed GEMV (the MoE case): pairs with repeated expert ids, shared activations across a
// token's slots, out-of-range ids caught by the device-side guard; and the validation messages.
// Tolerance: as in test_gemv.cpp (fp32 accumulation depth cols/32 + 8, Higham's bound; on the
// integer path plus the 16-bit activation rounding, ref::fp32_dot_bound).
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "q35/launch/gemv.hpp"
#include "reference/gemv_reference.hpp"
#include "test_util.hpp"
#include "weights.hpp"

namespace {

using namespace q35;
using launch::gemv_epilogue;

// Float64 dots of rows [first, first + rows) of a dequantized tensor with one activation row, with
// the integer path's bound terms when act16 (parts: test::weight_parts of the same tensor).
std::vector<ref::dot_result> dots(const std::vector<float>& w, const std::vector<float>& parts, int64_t first,
                                  int64_t rows, int64_t cols, const float* x, bool act16) {
  const auto begin = w.begin() + first * cols, pbegin = parts.begin() + first * cols;
  const std::vector<float> wr(begin, begin + rows * cols);
  if (!act16) return ref::matvec(wr, x, rows, cols, 1);
  return ref::matvec_act16(wr, std::vector<float>(pbegin, pbegin + rows * cols), x, rows, cols, 1);
}

template <class F>
void check_experts(const std::vector<int32_t>& ids, int n_experts, int64_t rows, int64_t cols, int x_group_div,
                   gemv_epilogue e, uint64_t seed, bool act16 = false) {
  CAPTURE(F::name);
  CAPTURE(int(e));
  CAPTURE(act16);
  const int n_pairs = int(ids.size());
  const int n_x = (n_pairs + x_group_div - 1) / x_group_div;
  const auto wg = test::random_weights<F>(n_experts * rows, cols, seed);
  const auto wu = test::random_weights<F>(n_experts * rows, cols, seed + 1);
  const auto x = test::random_floats(size_t(n_x * cols), seed + 2);
  const auto dg = test::reference_weights<F>(wg, n_experts * rows * cols);
  const auto du = test::reference_weights<F>(wu, n_experts * rows * cols);
  const auto pg = test::weight_parts<F>(wg, n_experts * rows * cols);
  const auto pu = test::weight_parts<F>(wu, n_experts * rows * cols);
  auto dwg = test::to_device(wg), dwu = test::to_device(wu);
  auto dx = test::to_device(x);
  auto dids = test::to_device(ids);
  device_buffer<uint8_t> workspace;
  if (act16) Q35_REQUIRE_OK(workspace.allocate(launch::gemv_workspace_bytes(cols, n_x)));
  bool any_bad = false;
  for (int32_t id : ids) any_bad |= id < 0 || id >= n_experts;

  test::for_each_order([&] {
    auto dy = test::poisoned<float>(size_t(n_pairs * rows));
    auto flag = test::to_device(std::vector<int>{0});
    launch::gemv_args<F> a;
    a.w = reinterpret_cast<const typename F::block*>(dwg.data());
    a.maybe_w_up = e == gemv_epilogue::swiglu ? reinterpret_cast<const typename F::block*>(dwu.data()) : nullptr;
    a.x = dx.data();
    a.y = dy.data();
    a.rows = rows;
    a.cols = cols;
    a.epilogue = e;
    a.maybe_expert_ids = dids.data();
    a.n_pairs = n_pairs;
    a.n_experts = n_experts;
    a.x_group_div = x_group_div;
    a.maybe_error_flag = flag.data();
    a.maybe_workspace = workspace.data(), a.workspace_bytes = workspace.bytes();
    if (act16) REQUIRE(launch::gemv_has_int_path(a));
    Q35_REQUIRE_OK(launch::gemv(a));
    const auto y = test::to_host(dy);
    CHECK(test::to_host(flag)[0] == (any_bad ? 1 : 0));
    int64_t bad = 0;
    for (int p = 0; p < n_pairs; ++p) {
      const int32_t id = ids[size_t(p)];
      const float* yp = y.data() + p * rows;
      if (id < 0 || id >= n_experts) {  // guarded pair: every row NaN
        for (int64_t r = 0; r < rows; ++r) bad += !std::isnan(yp[r]);
        continue;
      }
      const float* xp = x.data() + (p / x_group_div) * cols;
      const auto rg = dots(dg, pg, id * rows, rows, cols, xp, act16);
      const auto ru = dots(du, pu, id * rows, rows, cols, xp, act16);
      for (int64_t r = 0; r < rows; ++r) {
        const auto [want, tol] = ref::expect(e, rg[size_t(r)], &ru[size_t(r)], 0.0, cols / warp_size + 8);
        bad += !(std::fabs(double(yp[r]) - want) <= tol + 1e-30);
      }
    }
    CHECK(bad == 0);
  });
}

TEST_CASE_TEMPLATE("gemv experts: repeated ids, shared x, out-of-range ids guarded" * test::needs_device(), F,
                   quant::q4_k_format, quant::q6_k_format, quant::q8_0_format, quant::f16_format) {
  const int64_t cols = 2 * (F::block_elems > 16 ? F::block_elems : 16);
  // 8 pairs = 4 tokens x top-2: expert 3 three times, two invalid ids (7 >= 5, -1)
  const std::vector<int32_t> ids = {3, 3, 0, 4, 7, -1, 1, 3};
  check_experts<F>(ids, 5, 21, cols, 2, gemv_epilogue::swiglu, 51);
  check_experts<F>(ids, 5, 21, cols, 1, gemv_epilogue::store, 52);
  check_experts<F>({0, 4, 2, 2}, 5, 13, cols, 1, gemv_epilogue::store, 53);  // all valid: flag stays 0
  if constexpr (ops::has_dot16<F>) {  // the integer path: the guard and shared x as above
    check_experts<F>(ids, 5, 21, ops::dot16<F>::item_elems, 2, gemv_epilogue::swiglu, 54, true);
    check_experts<F>(ids, 5, 21, ops::dot16<F>::item_elems, 1, gemv_epilogue::store, 55, true);
  }
}

// Qwen3.5-35B-A3B expert shapes: gate/up 2048 -> 512, top-8 of 256 experts, one token.
TEST_CASE("gemv experts: 35B-A3B gate/up shape, top-8 of 256" * test::needs_device()) {
  check_experts<quant::q4_k_format>({17, 255, 0, 128, 64, 3, 200, 99}, 256, 512, 2048, 8, gemv_epilogue::swiglu, 61,
                                    true);
}

// Q6_K SwiGLU in expert mode takes 4-block items of 8-byte loads (launch::gemv_int_load_bytes: the
// 16-byte item's instance spilled on sm_90), so rows of 1024 n weights have the integer path too;
// store keeps the 16-byte item. Widths 1024 (one item), 3072 (three; not a multiple of 2048) and
// 2048 (what took the 16-byte item before).
TEST_CASE("gemv experts: Q6_K swiglu takes 8-byte items, rows of 1024 n included" * test::needs_device()) {
  using F = quant::q6_k_format;
  launch::gemv_args<F> a;
  static int32_t ids[1];
  a.maybe_expert_ids = ids, a.n_pairs = 1, a.n_experts = 1, a.rows = 4;
  a.epilogue = gemv_epilogue::swiglu;
  for (int64_t cols : {1024, 2048, 3072}) {
    a.cols = cols;
    CHECK(launch::gemv_int_load_bytes(a) == 8);
  }
  a.epilogue = gemv_epilogue::store;
  a.cols = 2048;
  CHECK(launch::gemv_int_load_bytes(a) == 16);
  a.cols = 3072;
  CHECK(launch::gemv_int_load_bytes(a) == 0);  // expert store: only the 16-byte item (float path)
  const std::vector<int32_t> pairs = {2, 0, 2, 1};
  for (int64_t cols : {1024, 2048, 3072}) {
    CAPTURE(cols);
    check_experts<F>(pairs, 3, 19, cols, 2, gemv_epilogue::swiglu, 81 + uint64_t(cols), true);
  }
}

// A merged ffn_gate_up_exps tensor [n_experts][2 ff][cols]: expert e's gate rows then its up rows in
// one allocation. w = base, maybe_w_up = base + ff rows, expert stride = 2 ff rows: pair p must read
// rows [2 ff id, 2 ff id + ff) and [2 ff id + ff, 2 ff (id + 1)) (ids >= 1 catch a stride taken
// as ff rows, or an up pointer taken relative to another allocation). store and residual read the
// gate half alone through the same stride.
template <class F>
void check_merged_gate_up(const std::vector<int32_t>& ids, int n_experts, int64_t ff, int64_t cols, int x_group_div,
                          gemv_epilogue e, uint64_t seed, bool act16 = false) {
  CAPTURE(F::name);
  CAPTURE(int(e));
  CAPTURE(act16);
  const int n_pairs = int(ids.size());
  const int n_x = (n_pairs + x_group_div - 1) / x_group_div;
  const int64_t row_bytes = F::row_bytes(cols);
  const auto w = test::random_weights<F>(n_experts * 2 * ff, cols, seed);
  const auto x = test::random_floats(size_t(n_x * cols), seed + 1);
  const auto h0 = test::random_floats(size_t(n_pairs * ff), seed + 2, -4.0f, 4.0f);
  const auto dw = test::reference_weights<F>(w, n_experts * 2 * ff * cols);
  const auto pw = test::weight_parts<F>(w, n_experts * 2 * ff * cols);
  auto dev_w = test::to_device(w);
  auto dx = test::to_device(x);
  auto dids = test::to_device(ids);
  device_buffer<uint8_t> workspace;
  if (act16) Q35_REQUIRE_OK(workspace.allocate(launch::gemv_workspace_bytes(cols, n_x)));
  test::for_each_order([&] {
    auto dy = e == gemv_epilogue::residual ? test::to_device(h0) : test::poisoned<float>(size_t(n_pairs * ff));
    auto flag = test::to_device(std::vector<int>{0});
    launch::gemv_args<F> a;
    a.w = reinterpret_cast<const typename F::block*>(dev_w.data());
    a.maybe_w_up = e == gemv_epilogue::swiglu
                       ? reinterpret_cast<const typename F::block*>(dev_w.data() + ff * row_bytes)
                       : nullptr;
    a.expert_stride_bytes = 2 * ff * row_bytes;
    a.x = dx.data(), a.y = dy.data(), a.rows = ff, a.cols = cols, a.epilogue = e;
    a.maybe_expert_ids = dids.data(), a.n_pairs = n_pairs, a.n_experts = n_experts;
    a.x_group_div = x_group_div, a.maybe_error_flag = flag.data();
    a.maybe_workspace = workspace.data(), a.workspace_bytes = workspace.bytes();
    if (act16) REQUIRE(launch::gemv_has_int_path(a));
    Q35_REQUIRE_OK(launch::gemv(a));
    const auto y = test::to_host(dy);
    CHECK(test::to_host(flag)[0] == 0);
    int64_t bad = 0;
    for (int p = 0; p < n_pairs; ++p) {
      const int64_t id = ids[size_t(p)];
      const float* xp = x.data() + (p / x_group_div) * cols;
      const auto rg = dots(dw, pw, 2 * ff * id, ff, cols, xp, act16);
      const auto ru = dots(dw, pw, 2 * ff * id + ff, ff, cols, xp, act16);
      for (int64_t r = 0; r < ff; ++r) {
        const auto [want, tol] =
            ref::expect(e, rg[size_t(r)], &ru[size_t(r)], h0[size_t(p * ff + r)], cols / warp_size + 8);
        const bool ok = std::fabs(double(y[size_t(p * ff + r)]) - want) <= tol + 1e-30;
        if (!ok && bad == 0) FAIL_CHECK("first bad: pair " << p << ", row " << r << ": got " << y[size_t(p * ff + r)]);
        bad += !ok;
      }
    }
    CHECK(bad == 0);
  });
}

TEST_CASE_TEMPLATE("gemv experts: merged gate_up tensor, expert ids >= 1, every epilogue" * test::needs_device(), F,
                   quant::f32_format, quant::f16_format, quant::bf16_format, quant::q8_0_format, quant::q4_0_format,
                   quant::q4_k_format, quant::q5_k_format, quant::q6_k_format) {
  const int64_t cols = 2 * (F::block_elems > 16 ? F::block_elems : 16);
  // 6 pairs = 3 tokens x top-2 over 4 experts; expert 3 (the last) twice, expert 0 once
  const std::vector<int32_t> ids = {3, 1, 2, 3, 0, 2};
  check_merged_gate_up<F>(ids, 4, 11, cols, 2, gemv_epilogue::swiglu, 71);
  check_merged_gate_up<F>(ids, 4, 11, cols, 1, gemv_epilogue::store, 72);
  check_merged_gate_up<F>(ids, 4, 11, cols, 1, gemv_epilogue::residual, 73);
  if constexpr (ops::has_dot16<F>) {  // the integer path, at one and at three items per row
    const int64_t item = ops::dot16<F>::item_elems;
    check_merged_gate_up<F>(ids, 4, 11, item, 2, gemv_epilogue::swiglu, 74, true);
    check_merged_gate_up<F>(ids, 4, 11, 3 * item, 1, gemv_epilogue::store, 75, true);
    check_merged_gate_up<F>(ids, 4, 11, item, 1, gemv_epilogue::residual, 76, true);
  }
}

TEST_CASE("gemv: validate names the problem") {
  launch::gemv_args<quant::q4_k_format> a;
  alignas(16) static float x[512];
  static float y[64];
  static quant::block_q4_k w[4];
  a.w = w, a.x = x, a.y = y, a.rows = 2, a.cols = 512;
  CHECK(launch::validate(a).ok());
  auto msg = [&](auto args) { return launch::validate(args).message(); };
  auto b = a;
  b.cols = 300;
  CHECK(msg(b).find("cols = 300 is not a multiple of the block size 256") != std::string::npos);
  b = a;
  b.x = nullptr;
  CHECK(msg(b).find("null") != std::string::npos);
  b = a;
  b.x = x + 1;
  CHECK(msg(b).find("x is not 16-byte aligned") != std::string::npos);
  b = a;
  b.n_tokens = 9;
  CHECK(msg(b).find("n_tokens = 9 is outside 1..8") != std::string::npos);
  b = a;
  b.epilogue = gemv_epilogue::swiglu;
  CHECK(msg(b).find("swiglu needs maybe_w_up") != std::string::npos);
  b = a;
  b.maybe_w_up = w;
  CHECK(msg(b).find("maybe_w_up is given but the epilogue is not swiglu") != std::string::npos);
  static int32_t ids[2];
  b = a;
  b.maybe_expert_ids = ids;
  b.n_pairs = 2;
  b.n_experts = 4;
  CHECK(msg(b).find("needs maybe_error_flag") != std::string::npos);
  b.n_pairs = 0;
  CHECK(msg(b).find("n_pairs = 0") != std::string::npos);
  launch::gemv_args<quant::f16_format> c;
  static quant::block_f16 wf[64];
  c.w = wf, c.x = x, c.y = y, c.rows = 1, c.cols = 40;
  CHECK(launch::validate(c).message().find("not a multiple of the block size 16") != std::string::npos);
  c.cols = int64_t(1) << 30;  // 2 GiB of f16 per row: over the kernel's 32-bit row offsets
  CHECK(launch::validate(c).message().find("is over 2^31 / 64 bytes") != std::string::npos);
}

TEST_CASE("gemv experts: host-visible ids are rejected before launch, naming pair and id") {
  const int32_t good[] = {0, 3, 3, 1};
  const int32_t bad_high[] = {0, 3, 4, 1};
  const int32_t bad_negative[] = {-1};
  CHECK(launch::validate_expert_ids(good, 4).ok());
  const status hi = launch::validate_expert_ids(bad_high, 4);
  CHECK(hi.code() == status_code::invalid_argument);
  CHECK(hi.message() == "gemv: expert id 4 of pair 2 is outside [0, 4)");
  CHECK(launch::validate_expert_ids(bad_negative, 4).message() == "gemv: expert id -1 of pair 0 is outside [0, 4)");
}

}  // namespace
