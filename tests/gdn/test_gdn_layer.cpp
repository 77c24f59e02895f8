// launch::gdn_layer against the float64 reference (tests/reference/gdn_reference.hpp): head counts
// (n_k, n_v) in {(2,4), (4,8), (16,16), (16,32), (16,48)}, prompt lengths around the chunk size,
// both core forms, prompts split across calls, several sequences of different lengths per batch.
//
// Tolerance: the reference carries a first-order running error bound for an fp32 evaluation of
// the sequential recurrence (each rounding u = 2^-24, an n-term sum within (n + 1) u sum|terms|,
// fast exp/sigmoid/silu within 4 u), from the projections through the state to ssm_out; every
// output must lie within value +- bound (+ one rounding of h + t). The chunked form computes the
// same quantities through the WY factorisation; its error is checked against the same bound (see
// docs/gdn.md for what that assumes).
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "gdn_case.hpp"

namespace {

using namespace q35;
using launch::gdn_core_mode;
using test::gdn_seq;

const char* mode_name(gdn_core_mode m) {
  return m == gdn_core_mode::recurrent ? "recurrent" : m == gdn_core_mode::chunked ? "chunked" : "automatic";
}

void require_close(const test::gdn_check& r) {
  INFO("outputs outside the bound: " << r.bad << ", worst |error| / bound = " << r.worst_ratio);
  CHECK(r.bad == 0);
}

}  // namespace

TEST_CASE("gdn_layer: one prompt then decode steps, per head configuration" * test::needs_device()) {
  struct config {
    int n_k, n_v, head_dim, prompt;
  };
  // d = 128 for the 9B/27B head counts at a prompt one past the chunk; d = 64 elsewhere
  const config configs[] = {{2, 4, 64, 63}, {4, 8, 128, 64}, {16, 16, 64, 65}, {16, 32, 128, 65}, {16, 48, 64, 70}};
  for (const auto& c : configs) {
    for (const gdn_core_mode mode : {gdn_core_mode::recurrent, gdn_core_mode::chunked}) {
      CAPTURE(c.n_k);
      CAPTURE(c.n_v);
      CAPTURE(c.head_dim);
      const std::string m = mode_name(mode);
      CAPTURE(m);
      test::gdn_case<> g(c.n_k, c.n_v, c.head_dim, 64, 2, 1000 + uint64_t(c.n_v * 7 + c.head_dim));
      require_close(g.run({{1, g.inputs(c.prompt, 1)}}, mode));
      // decode: one token per call, the recurrent kernel
      for (int t = 0; t < 2; ++t) require_close(g.run({{1, g.inputs(1, 10 + uint64_t(t))}}, gdn_core_mode::automatic));
    }
  }
}

TEST_CASE("gdn_layer: a prompt fed whole, split across calls and token by token gives the same outputs" *
          test::needs_device()) {
  // 300 tokens: several chunks with the state carried across them; splits at and around 64
  test::gdn_case<> g(4, 8, 64, 64, 4, 77);
  const std::vector<float> x = g.inputs(300, 5);
  const auto part = [&](int from, int to) {
    return std::vector<float>(x.begin() + int64_t(from) * 64, x.begin() + int64_t(to) * 64);
  };
  SUBCASE("whole, chunked") { require_close(g.run({{0, x}}, gdn_core_mode::chunked)); }
  SUBCASE("whole, recurrent") { require_close(g.run({{0, x}}, gdn_core_mode::recurrent)); }
  SUBCASE("split 1 + 63 + 64 + 65 + 107, automatic") {
    const int cuts[] = {0, 1, 64, 128, 193, 300};
    for (int i = 0; i + 1 < 6; ++i) require_close(g.run({{0, part(cuts[i], cuts[i + 1])}}, gdn_core_mode::automatic));
  }
  SUBCASE("split 2 + 3 + ... chunked, then decode steps") {
    int at = 0;
    for (int n = 2; at + n <= 280; at += n, n += 9)
      require_close(g.run({{0, part(at, at + n)}}, gdn_core_mode::chunked));
    for (; at < 300; ++at) require_close(g.run({{0, part(at, at + 1)}}, gdn_core_mode::recurrent));
  }
}

TEST_CASE("gdn_layer: several sequences of different lengths in one batch" * test::needs_device()) {
  test::gdn_case<> g(2, 4, 128, 64, 5, 91);
  for (const gdn_core_mode mode : {gdn_core_mode::recurrent, gdn_core_mode::chunked}) {
    const std::string m = mode_name(mode);
    CAPTURE(m);
    for (int s = 0; s < 5; ++s) g.reset_slot(s);
    // slots out of order, an empty sequence, lengths around the chunk size
    require_close(g.run({{3, g.inputs(65, 1)}, {0, g.inputs(1, 2)}, {4, {}}, {1, g.inputs(130, 3)}}, mode));
    // then a decode step for four of them and more prompt for the fifth
    require_close(g.run({{1, g.inputs(1, 4)}, {3, g.inputs(1, 5)}, {4, g.inputs(64, 6)}, {0, g.inputs(1, 7)}}, mode));
  }
}

TEST_CASE("gdn_layer: a swapped v-head -> k-head mapping (j / r instead of j mod n_k) fails the check" *
          test::needs_device()) {
  test::gdn_case<> g(2, 4, 64, 64, 1, 123);
  const std::vector<gdn_seq> batch{{0, g.inputs(20, 9)}};
  const std::vector<float> h0 = test::random_floats(20 * 64, 4, -2.0f, 2.0f);
  const std::vector<float> h = g.run_device(batch, h0, gdn_core_mode::chunked);
  test::gdn_case<> again(2, 4, 64, 64, 1, 123);  // fresh reference states
  const test::gdn_check right = again.check(batch, h0, h, gdn_core_mode::chunked, false);
  test::gdn_case<> swapped(2, 4, 64, 64, 1, 123);
  const test::gdn_check wrong = swapped.check(batch, h0, h, gdn_core_mode::chunked, true);
  CHECK(right.bad == 0);
  CHECK(wrong.bad > 20 * 64 / 2);  // most outputs leave the bound
}

TEST_CASE("gdn_layer: fork (pool copy) and snapshot / restore" * test::needs_device()) {
  test::gdn_case<> g(4, 8, 64, 64, 3, 55);
  require_close(g.run({{0, g.inputs(70, 1)}}, gdn_core_mode::automatic));
  // fork slot 0 into slot 2; both continue differently in one batch
  Q35_REQUIRE_OK(g.pool.copy(0, 2));
  g.ref_states.insert_or_assign(2, g.ref_states.at(0));
  std::vector<uint8_t> snap;
  Q35_REQUIRE_OK(g.pool.snapshot(0, snap));
  CHECK(snap.size() == g.pool.slot_bytes());
  const ref::gdn_state saved = g.ref_states.at(0);
  const std::vector<gdn_seq> next{{2, g.inputs(3, 2)}, {0, g.inputs(1, 3)}};
  const std::vector<float> h0 = test::random_floats(4 * 64, 8, -2.0f, 2.0f);
  const std::vector<float> first = g.run_device(next, h0, gdn_core_mode::recurrent);
  require_close(g.check(next, h0, first, gdn_core_mode::recurrent));
  // restore slot 0 and rerun its step: bit-identical to the first run
  Q35_REQUIRE_OK(g.pool.restore(0, snap));
  Q35_REQUIRE_OK(g.pool.copy(0, 2));
  const std::vector<float> second = g.run_device(next, h0, gdn_core_mode::recurrent);
  CHECK(first == second);
  g.ref_states.insert_or_assign(0, saved);
  g.ref_states.insert_or_assign(2, saved);
  require_close(g.check(next, h0, second, gdn_core_mode::recurrent));
  // a snapshot of the wrong size is refused
  snap.pop_back();
  CHECK(g.pool.restore(0, snap).code() == status_code::invalid_argument);
}

TEST_CASE("gdn_layer: block-quantized projections (q8_0)" * test::needs_device()) {
  test::gdn_case<quant::q8_0_format> g(2, 4, 64, 64, 1, 31);
  require_close(g.run({{0, g.inputs(66, 1)}}, gdn_core_mode::chunked));
  require_close(g.run({{0, g.inputs(1, 2)}}, gdn_core_mode::recurrent));
}
