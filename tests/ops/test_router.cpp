// launch::router (router GEMV + softmax/sigmoid + top-k + renormalisation + shared-expert gate)
// against the float64 reference: E = 8 ... 512, k = 1 ... 16, token counts that do not fill the
// last tile, ties, F32/F16/BF16 weights, poisoned outputs, every sim thread order.
#include <cmath>
#include <cstdint>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "ops/router_fixture.hpp"
#include "q35/launch/router.hpp"
#include "q35/models/qwen35_moe.hpp"
#include "reference/router_reference.hpp"
#include "test_util.hpp"

namespace {

using namespace q35;

template <int E, int K>
using traits = test::router_traits<E, K>;

// Dyadic inputs: the kernel's logits are exact, so ids (ties included) must match the float64
// reference exactly and weights to a few ulp.
template <class Traits, class WeightT = float, class Policy = kernels::router_policy_auto>
void check_exact(int64_t n_tokens, int n_embd, uint64_t seed, bool shexp, ops::route_options route = {}) {
  CAPTURE(Traits::n_experts);
  CAPTURE(Traits::n_experts_used);
  CAPTURE(n_tokens);
  CAPTURE(n_embd);
  CAPTURE(seed);
  auto c = test::make_case(n_tokens, n_embd, Traits::n_experts, Traits::n_experts_used, seed, true, shexp);
  c.route = route;
  const auto logits = reference::router_logits(c.x, c.w, c.n_tokens, c.n_experts, c.n_embd);
  test::for_each_order([&] {
    const auto o = test::run_router<Traits, WeightT, Policy>(c);
    for (int64_t t = 0; t < n_tokens; ++t)
      for (int e = 0; e < c.n_experts; ++e)
        REQUIRE(double(o.logits[size_t(t) * size_t(c.n_experts + 1) + size_t(e)]) ==
                logits[size_t(t) * size_t(c.n_experts) + size_t(e)]);
    test::check_routing(c, o, logits);
    test::check_gate(c, o);
    for (uint32_t cnt : o.counters) CHECK(cnt == 0);  // every tile counter is left at 0
  });
}

TEST_CASE_TEMPLATE("router: exact logits, ids and weights vs float64, E = 8 ... 512, k = 1 ... 16" *
                       test::needs_device(),
                   T, traits<8, 1>, traits<8, 8>, traits<60, 4>, traits<64, 4>, traits<128, 2>, traits<256, 8>,
                   traits<256, 16>, traits<512, 16>) {
  for (uint64_t seed = 1; seed <= 3; ++seed) {
    check_exact<T>(1, 256, seed * 10, seed == 1);
    check_exact<T>(7, 64, seed * 10 + 1, seed != 1);  // 7 tokens: the second tile of 4 is not full
  }
}

TEST_CASE("router: many ties (n_embd 16, dyadic inputs) resolve to the lower expert index" * test::needs_device()) {
  for (uint64_t seed = 0; seed < 6; ++seed) {
    check_exact<traits<60, 8>>(13, 16, 500 + seed, false);
    check_exact<traits<256, 16>>(5, 16, 600 + seed, true);
  }
}

TEST_CASE("router: the Qwen3.5-35B-A3B shape (n_embd 2048, E 256, k 8) with the shared-expert gate" *
          test::needs_device()) {
  check_exact<traits<256, 8>>(5, 2048, 77, true);
}

// A model's moe sub-traits are router traits as they stand.
static_assert(kernels::router_traits<models::qwen35_35b_a3b::moe>);
static_assert(kernels::router_traits<models::qwen35_9b_moe::moe>);

TEST_CASE("router: the model traits (Qwen3.5-35B-A3B, the 64-expert layout) plug in directly" * test::needs_device()) {
  check_exact<models::qwen35_35b_a3b::moe>(2, 2048, 81, true);
  check_exact<models::qwen35_9b_moe::moe>(11, 256, 82, true);
}

TEST_CASE("router: half and bf16 router weights" * test::needs_device()) {
  // multiples of 1/64 in [-1, 1] are exact in both; n_embd 48 is three 16-element units
  check_exact<traits<60, 4>, half>(6, 48, 900, true);
  check_exact<traits<256, 8>, bf16>(5, 256, 901, true);
  check_exact<traits<512, 16>, half>(3, 64, 902, false);
}

TEST_CASE("router: every policy shape (warps, tokens and rows per block, loads in flight, split-k)" *
          test::needs_device()) {
  // the decode policy on many tiles, and the batch policy on a single token
  check_exact<traits<256, 8>, float, kernels::router_policy_decode>(19, 160, 60, true);
  check_exact<traits<256, 8>, float, kernels::router_policy_batch>(1, 160, 59, true);
  // 2 warps, 2 tokens and 2 rows per block, 1 load in flight, no split
  check_exact<traits<60, 4>, float, kernels::router_policy<64, 2, 2, 1, 1>>(5, 96, 61, true);
  // 8 warps in 4 groups of 2 (split-k 2), 4 rows per block; 19 tokens: the last tile is partial
  check_exact<traits<256, 8>, float, kernels::router_policy<256, 8, 4, 2, 2>>(19, 160, 62, true);
  // all 8 warps on one row (split-k 8), 2 rows per block; n_embd 208 (13 units) leaves 7 slices empty
  check_exact<traits<512, 16>, bf16, kernels::router_policy<256, 1, 2, 3, 8>>(3, 208, 63, true);
  // the same with n_embd 2560 (160 units: slices 0-4 hold columns, one unit per lane); each block's
  // second row overwrites live split-k partials: the barrier after the sum matters
  check_exact<traits<64, 4>, bf16, kernels::router_policy<256, 1, 2, 3, 8>>(2, 2048 + 512, 65, true);
  check_exact<traits<60, 8>, half, kernels::router_policy<128, 3, 2, 1, 2>>(7, 80, 64, false);
}

TEST_CASE("router: sigmoid scoring, with and without renormalisation" * test::needs_device()) {
  ops::route_options r;
  r.score = ops::router_score::sigmoid;
  check_exact<traits<64, 4>>(9, 64, 31, true, r);
  r.renormalize = false;
  check_exact<traits<128, 8>>(9, 64, 32, false, r);
  ops::route_options soft_raw;
  soft_raw.renormalize = false;
  check_exact<traits<256, 8>>(5, 64, 33, false, soft_raw);
}

// Continuous random inputs: the kernel's fp32 logits are within the float summation bound of the
// float64 ones, and routing those logits with the reference gives exactly the kernel's ids.
TEST_CASE("router: random continuous inputs, many seeds" * test::needs_device()) {
  for (uint64_t seed = 0; seed < 8; ++seed) {
    CAPTURE(seed);
    auto c = test::make_case(int64_t(1 + seed % 6), 512, 256, 8, 7000 + seed, false, true);
    const auto ref = reference::router_logits(c.x, c.w, c.n_tokens, c.n_experts, c.n_embd);
    const auto o = test::run_router<traits<256, 8>>(c);
    std::vector<double> own(ref.size());
    for (int64_t t = 0; t < c.n_tokens; ++t) {
      for (int e = 0; e < c.n_experts; ++e) {
        double abs_sum = 0;
        for (int i = 0; i < c.n_embd; ++i)
          abs_sum += std::fabs(double(c.w[size_t(e) * 512 + size_t(i)]) * c.x[size_t(t) * 512 + size_t(i)]);
        const double got = o.logits[size_t(t) * 257 + size_t(e)], want = ref[size_t(t) * 256 + size_t(e)];
        CHECK(std::fabs(got - want) <= c.n_embd * std::ldexp(abs_sum, -24));  // n u sum|w x|
        own[size_t(t) * 256 + size_t(e)] = got;
      }
    }
    test::check_routing(c, o, own);
    test::check_gate(c, o);
  }
}

// Rows of W with NaN / +inf / -inf entries give NaN / +-inf logits (x > 0, so no inf * 0).
TEST_CASE("router: NaN and inf logits give distinct in-range ids and no NaN weights" * test::needs_device()) {
  struct poison {
    int row;
    float value;
  };
  const std::vector<std::vector<poison>> patterns = {
      {{3, NAN}},                                  // NaN ranks last
      {{5, INFINITY}},                             // one +inf takes all the mass
      {{2, INFINITY}, {40, INFINITY}, {7, NAN}},   // two +inf share it, lower index first
      {{0, -INFINITY}, {1, -INFINITY}, {9, NAN}},  // -inf: probability 0, ranks above NaN
      {{4, INFINITY}, {5, -INFINITY}, {6, NAN}, {59, NAN}},
  };
  for (size_t pi = 0; pi < patterns.size(); ++pi) {
    CAPTURE(pi);
    auto c = test::make_case(6, 64, 60, 8, 40 + pi, true, false);
    for (auto& v : c.x) v = std::fabs(v) + 1.0f / 64;  // x > 0
    for (const auto& p : patterns[pi]) c.w[size_t(p.row) * 64 + 10] = p.value;
    const auto logits = reference::router_logits(c.x, c.w, c.n_tokens, c.n_experts, c.n_embd);
    test::for_each_order([&] { test::check_routing(c, test::run_router<traits<60, 8>>(c), logits); });
  }
  SUBCASE("every logit NaN: uniform weights over the k lowest ids") {
    auto c = test::make_case(3, 64, 8, 8, 50, true, false);
    c.x[3] = NAN;
    c.x[64 + 3] = NAN;
    c.x[128 + 3] = NAN;
    const auto o = test::run_router<traits<8, 8>>(c);
    for (int t = 0; t < 3; ++t)
      for (int j = 0; j < 8; ++j) {
        CHECK(o.ids[size_t(t * 8 + j)] == j);
        CHECK(o.weights[size_t(t * 8 + j)] == doctest::Approx(1.0 / 8).epsilon(1e-6));
      }
  }
  SUBCASE("k = E with NaN rows: every expert once, NaN ones last with weight 0") {
    auto c = test::make_case(2, 64, 8, 8, 51, true, false);
    for (auto& v : c.x) v = std::fabs(v) + 1.0f / 64;
    c.w[1 * 64] = NAN;
    c.w[6 * 64] = NAN;
    const auto logits = reference::router_logits(c.x, c.w, c.n_tokens, c.n_experts, c.n_embd);
    const auto o = test::run_router<traits<8, 8>>(c);
    test::check_routing(c, o, logits);
    CHECK(o.ids[6] == 1);
    CHECK(o.ids[7] == 6);
    CHECK(o.weights[6] == 0.0f);
  }
}

TEST_CASE("router: token counts across tiles, and a second launch on the same workspace" * test::needs_device()) {
  for (int64_t n : {1, 2, 3, 4, 5, 8, 37}) {
    auto c = test::make_case(n, 32, 64, 4, 1234 + uint64_t(n), true, true);
    const auto logits = reference::router_logits(c.x, c.w, c.n_tokens, c.n_experts, c.n_embd);
    const auto o = test::run_router<traits<64, 4>>(c);
    test::check_routing(c, o, logits);
    test::check_gate(c, o);
  }
  // Counters left at 0 let a second launch on the same workspace route correctly.
  auto c = test::make_case(9, 32, 64, 4, 99, true, false);
  auto d_x = test::to_device(c.x);
  auto d_w = test::to_device(c.w);
  launch::router_workspace ws;
  Q35_REQUIRE_OK(ws.allocate(16, 64));
  std::vector<std::vector<int32_t>> runs;
  for (int rep = 0; rep < 3; ++rep) {
    auto ids = test::poisoned<int32_t>(9 * 4);
    auto w = test::poisoned<float>(9 * 4);
    launch::router_args<float> a;
    a.n_tokens = 9, a.n_embd = 32, a.n_experts = 64, a.n_experts_used = 4;
    a.x = d_x.data(), a.w_router = d_w.data(), a.ids = ids.data(), a.weights = w.data();
    a.workspace = ws.view();
    Q35_REQUIRE_OK(launch::router<traits<64, 4>>(a));
    runs.push_back(test::to_host(ids));
  }
  CHECK(runs[1] == runs[0]);
  CHECK(runs[2] == runs[0]);
}

TEST_CASE("router: validate names the bad value") {
  // validate reads no memory: host arrays stand in for device buffers, so this runs without a GPU
  alignas(16) static float x[4 * 64], w[64 * 64], out[64], logits[4 * 65];
  alignas(16) static int32_t ids[64];
  alignas(16) static uint32_t counters[4];
  launch::router_workspace_view ws{logits, counters, 4, 64};
  launch::router_args<float> good;
  good.n_tokens = 4, good.n_embd = 64, good.n_experts = 64, good.n_experts_used = 4;
  good.x = x, good.w_router = w, good.ids = ids, good.weights = out;
  good.workspace = ws;
  using T = traits<64, 4>;
  Q35_REQUIRE_OK((launch::validate<T, float>(good)));

  auto expect = [&](launch::router_args<float> a, const std::string& needle) {
    const status s = launch::validate<T, float>(a);
    INFO(s.to_string());
    CHECK(s.code() == status_code::invalid_argument);
    CHECK(s.message().find(needle) != std::string::npos);
  };
  auto a = good;
  a.n_experts = 600;
  expect(a, "n_experts = 600 is outside 1..512");
  a = good, a.n_experts_used = 17;
  expect(a, "n_experts_used (k) = 17 is outside 1..16");
  a = good, a.n_experts = 8, a.n_experts_used = 9;
  expect(a, "n_experts_used (k) = 9 exceeds n_experts = 8");
  a = good, a.n_experts = 128;
  expect(a, "do not match the traits (64, 4)");
  a = good, a.n_embd = 66;
  expect(a, "n_embd = 66 is not a positive multiple of the GEMV unit of 16 elements");
  a = good, a.x = nullptr;
  expect(a, "x is null");
  a = good, a.w_router = nullptr;
  expect(a, "w_router is null");
  a = good, a.ids = nullptr;
  expect(a, "ids is null");
  a = good, a.weights = nullptr;
  expect(a, "weights is null");
  a = good, a.maybe_w_shexp = w;
  expect(a, "maybe_shexp_gate is null");
  a = good, a.x = x + 1;
  expect(a, "16-byte aligned");
  a = good, a.n_tokens = 5;
  expect(a, "workspace holds 4 tokens");
  a = good, a.workspace = {};
  expect(a, "workspace is not allocated");
  a = good, a.n_tokens = -1;
  expect(a, "n_tokens = -1 is negative");
  a = good, a.route.adaptive = true;
  expect(a, "maybe_k_used is null");
  a.maybe_k_used = ids, a.route.score = ops::router_score::sigmoid;
  expect(a, "adaptive top-k needs softmax scoring");
  a.route.score = ops::router_score::softmax, a.route.adaptive_k.k_values[2] = 5;
  expect(a, "adaptive k value 5 is outside 1..n_experts_used = 4");

  launch::router_args<half> h;
  h.n_tokens = 0, h.n_embd = 36, h.n_experts = 64, h.n_experts_used = 4;
  const status s = launch::validate<T, half>(h);
  CHECK(s.message().find("n_embd = 36 is not a positive multiple of the GEMV unit of 16 elements") !=
        std::string::npos);

  // Zero tokens: nothing to check beyond the shape, nothing launched.
  a = good, a.n_tokens = 0, a.x = nullptr, a.ids = nullptr;
  Q35_REQUIRE_OK(launch::router<T>(a));
}

}  // namespace
