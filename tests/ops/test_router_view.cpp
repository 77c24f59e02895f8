// launch::router(router_view_args): the run-time entry (expert count, k and weight format known only
// at run time, one instance per bucket of 32..512 experts) against the float64 reference, as the
// traits-based tests do: exact dyadic logits and routing for E = 1 ... 512 and k = 1 ... 16
// (counts that are not a bucket's bound included), F16/BF16/quantized weights, and the checks.
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/weights.hpp"
#include "ops/router_fixture.hpp"
#include "q35/launch/router.hpp"
#include "reference/router_reference.hpp"
#include "test_util.hpp"

namespace ops_test_router_view {

using namespace q35;

void check_exact_view(int64_t n_tokens, int n_embd, int n_experts, int k, uint64_t seed, bool shexp) {
  CAPTURE(n_experts);
  CAPTURE(k);
  CAPTURE(n_tokens);
  auto c = test::make_case(n_tokens, n_embd, n_experts, k, seed, true, shexp);
  const auto logits = reference::router_logits(c.x, c.w, c.n_tokens, c.n_experts, c.n_embd);
  const auto o = test::run_router_view(c, c.w, c.w_shexp, uint32_t(quant::type_id::f32));
  for (int64_t t = 0; t < n_tokens; ++t)
    for (int e = 0; e < n_experts; ++e)
      REQUIRE(double(o.logits[size_t(t) * size_t(n_experts + 1) + size_t(e)]) ==
              logits[size_t(t) * size_t(n_experts) + size_t(e)]);
  test::check_routing(c, o, logits);
  test::check_gate(c, o);
  for (uint32_t cnt : o.counters) CHECK(cnt == 0);
}

TEST_CASE("router (run-time shape): exact logits, ids and weights, E = 1 ... 512, k = 1 ... 16" *
          test::needs_device()) {
  struct ek {
    int e, k;
  };
  for (const ek s : {ek{1, 1}, ek{8, 8}, ek{33, 3}, ek{60, 8}, ek{100, 16}, ek{256, 8}, ek{300, 12}, ek{512, 16}}) {
    check_exact_view(1, 128, s.e, s.k, uint64_t(s.e * 31 + s.k), true);   // decode policy
    check_exact_view(13, 64, s.e, s.k, uint64_t(s.e * 37 + s.k), false);  // batch policy, partial last tile
  }
}

TEST_CASE("router (run-time shape): every thread order" * test::needs_device()) {
  test::for_each_order([] { check_exact_view(5, 64, 77, 6, 9, true); });
}

// Weights in a 16-bit or block format: logits within the fp32 bound of the reference's dot over
// the dequantized weights, routing of the kernel's own logits exact (as test_router_quant.cpp).
template <class Format>
void check_format_view(int64_t n_tokens, int n_embd, int n_experts, int k, uint64_t seed) {
  CAPTURE(Format::name);
  auto c = test::make_case(n_tokens, n_embd, n_experts, k, seed, false, true);
  const auto w_bytes = test::random_weights<Format>(n_experts, n_embd, seed + 10);
  const auto sh_bytes = test::random_weights<Format>(1, n_embd, seed + 11);
  c.w = test::reference_weights<Format>(w_bytes, int64_t(n_embd) * n_experts);
  c.w_shexp = test::reference_weights<Format>(sh_bytes, n_embd);
  const auto ref = reference::router_logits(c.x, c.w, c.n_tokens, c.n_experts, c.n_embd);
  const auto o = test::run_router_view(c, w_bytes, sh_bytes, uint32_t(Format::id));
  std::vector<double> kl;
  for (int64_t t = 0; t < n_tokens; ++t) {
    for (int e = 0; e < n_experts; ++e) {
      double abs_sum = 0;
      for (int i = 0; i < n_embd; ++i)
        abs_sum += std::fabs(double(c.w[size_t(e) * n_embd + i]) * c.x[size_t(t * n_embd + i)]);
      // fp32 accumulation, depth <= n_embd / 16 + 32 per lane and butterfly (test_router_quant.cpp)
      const double tol = (n_embd / 16 + 64) * std::ldexp(abs_sum, -24);
      const double got = o.logits[size_t(t) * size_t(n_experts + 1) + size_t(e)];
      REQUIRE(std::fabs(got - ref[size_t(t * n_experts + e)]) <= tol);
    }
    const auto l = test::kernel_logits(c, o, t);
    kl.insert(kl.end(), l.begin(), l.end());
  }
  test::check_routing(c, o, kl);
  test::check_gate(c, o);
}

TEST_CASE_TEMPLATE("router (run-time shape): weights in F16, BF16 and block formats" * test::needs_device(), F,
                   quant::f16_format, quant::bf16_format, quant::q8_0_format, quant::q4_k_format) {
  check_format_view<F>(1, 256, 40, 5, 71);
  check_format_view<F>(9, 256, 130, 8, 72);
}

TEST_CASE("router (run-time shape): bad shapes are named") {
  launch::router_view_args good;
  float dummy[4] = {};
  good.n_tokens = 1, good.n_embd = 64, good.n_experts = 60, good.n_experts_used = 4;
  good.w_router = {dummy, uint32_t(quant::type_id::f32), 64, 60, 1, 0};
  auto expect = [](const launch::router_view_args& a, const std::string& needle) {
    const status s = launch::router(a);
    INFO(s.to_string());
    CHECK(s.to_string().find(needle) != std::string::npos);
  };
  launch::router_view_args a = good;
  a.w_router.rows = 59;
  expect(a, "w_router is 59 x 64 x 1");
  a = good, a.maybe_w_shexp = {dummy, uint32_t(quant::type_id::f16), 64, 1, 1, 0};
  expect(a, "maybe_w_shexp must be one row");
  a = good, a.n_experts = 513, a.w_router.rows = 513;
  expect(a, "n_experts = 513 is outside 1..512");
  a = good, a.n_experts_used = 17;
  expect(a, "n_experts_used (k) = 17 is outside 1..16");
  a = good, a.w_router.type = 3;
  expect(a, "ggml type 3 is not supported");
}

}  // namespace ops_test_router_view
