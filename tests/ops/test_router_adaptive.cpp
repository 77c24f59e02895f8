// Adaptive top-k: per token the entropy of the softmax picks k (default: H < 1.2 -> 1, < 2.5 -> 2,
// else 3); crafted distributions with known entropy ln(m), custom thresholds, random distributions.
#include <cmath>
#include <cstdint>
#include <vector>

#include "ops/router_fixture.hpp"
#include "q35/launch/router.hpp"
#include "reference/router_reference.hpp"
#include "test_util.hpp"

namespace {

using namespace q35;

// Token t's logits: 0 for experts in ties[t] (m of them), -64 elsewhere, so p is uniform over
// those m experts up to e^-64 and the entropy is ln(m) (to 1e-25). x = (1, 0, ...), W[e, 0] = logit.
test::router_case crafted(const std::vector<std::vector<int>>& ties, int n_experts, int k, int n_embd = 16) {
  test::router_case c;
  c.n_tokens = int64_t(ties.size()), c.n_embd = n_embd, c.n_experts = n_experts, c.k = k;
  c.x.assign(size_t(c.n_tokens) * size_t(n_embd), 0.0f);
  c.w.assign(size_t(n_experts) * size_t(n_embd), 0.0f);
  // one token per "column": x_t = e_t, W[e, t] = 0 if e in ties[t] else -64
  for (size_t t = 0; t < ties.size(); ++t) {
    c.x[t * size_t(n_embd) + t] = 1.0f;
    for (int e = 0; e < n_experts; ++e) c.w[size_t(e) * size_t(n_embd) + t] = -64.0f;
    for (int e : ties[t]) c.w[size_t(e) * size_t(n_embd) + t] = 0.0f;
  }
  c.route.adaptive = true;
  return c;
}

std::vector<int> spread(int m, int n_experts, int offset) {
  std::vector<int> v;
  for (int i = 0; i < m; ++i) v.push_back((offset + i * 7) % n_experts);
  return v;
}

TEST_CASE("router adaptive: crafted entropies ln(m) pick 1, 2 or 3 experts" * test::needs_device()) {
  // m:      1     2      3      4      12     13     64
  // ln m:   0     0.69   1.10   1.39   2.48   2.56   4.16
  // k:      1     1      1      2      2      3      3
  const int ms[] = {1, 2, 3, 4, 12, 13, 64};
  const int want_k[] = {1, 1, 1, 2, 2, 3, 3};
  std::vector<std::vector<int>> ties;
  for (int i = 0; i < 7; ++i) ties.push_back(spread(ms[i], 64, 5 * i + 3));
  auto c = crafted(ties, 64, 4);
  const auto logits = reference::router_logits(c.x, c.w, c.n_tokens, c.n_experts, c.n_embd);
  test::for_each_order([&] {
    const auto o = test::run_router<test::router_traits<64, 4>>(c);
    for (int t = 0; t < 7; ++t) {
      CAPTURE(t);
      CHECK(o.k_used[size_t(t)] == want_k[t]);
      CHECK(reference::route(&logits[size_t(t) * 64], 64, 4, test::ref_options(c.route)).entropy ==
            doctest::Approx(std::log(double(ms[t]))).epsilon(1e-12));
    }
    test::check_routing(c, o, logits);  // ids: the lowest-index tied experts; weights 1/k_used each
    for (int t = 0; t < 7; ++t)
      for (int j = 0; j < o.k_used[size_t(t)]; ++j)
        CHECK(o.weights[size_t(t) * 4 + size_t(j)] == doctest::Approx(1.0 / o.k_used[size_t(t)]).epsilon(1e-6));
  });
}

TEST_CASE("router adaptive: configurable thresholds and k values, k_used up to the traits' k" * test::needs_device()) {
  // thresholds 0.5 / 3.0 nats, k = 2 / 5 / 8 (of at most 8)
  std::vector<std::vector<int>> ties;
  const int ms[] = {1, 2, 20, 21, 200};  // ln: 0, 0.69, 3.00 (< 3.0? ln 20 = 2.996), 3.04, 5.30
  const int want_k[] = {2, 5, 5, 8, 8};
  for (int i = 0; i < 5; ++i) ties.push_back(spread(ms[i], 256, 11 * i));
  auto c = crafted(ties, 256, 8);
  c.route.adaptive_k.entropy_below[0] = 0.5f;
  c.route.adaptive_k.entropy_below[1] = 3.0f;
  c.route.adaptive_k.k_values[0] = 2;
  c.route.adaptive_k.k_values[1] = 5;
  c.route.adaptive_k.k_values[2] = 8;
  const auto logits = reference::router_logits(c.x, c.w, c.n_tokens, c.n_experts, c.n_embd);
  const auto o = test::run_router<test::router_traits<256, 8>>(c);
  for (int t = 0; t < 5; ++t) CHECK(o.k_used[size_t(t)] == want_k[t]);
  test::check_routing(c, o, logits);
}

TEST_CASE("router adaptive: random routing distributions against the float64 entropy" * test::needs_device()) {
  // Logit scales from peaked to flat so all three k values occur; dyadic inputs keep logits exact.
  int seen[4] = {0, 0, 0, 0};
  for (uint64_t seed = 0; seed < 6; ++seed) {
    auto c = test::make_case(9, 32, 60, 4, 3000 + seed, true, false);
    const float scale = float(1 << (seed % 4)) / 2;  // 0.5 ... 4
    for (auto& v : c.w) v *= scale;
    c.route.adaptive = true;
    const auto logits = reference::router_logits(c.x, c.w, c.n_tokens, c.n_experts, c.n_embd);
    const auto o = test::run_router<test::router_traits<60, 4>>(c);
    for (int64_t t = 0; t < c.n_tokens; ++t) {
      const auto r = reference::route(&logits[size_t(t) * 60], 60, 4, test::ref_options(c.route));
      // the float entropy is within ~1e-5 of the float64 one; none of these lies that close to a threshold
      REQUIRE(std::fabs(r.entropy - 1.2) > 1e-4);
      REQUIRE(std::fabs(r.entropy - 2.5) > 1e-4);
      ++seen[o.k_used[size_t(t)]];
    }
    test::check_routing(c, o, logits);
  }
  CHECK(seen[1] > 0);
  CHECK(seen[2] > 0);
  CHECK(seen[3] > 0);
}

}  // namespace
