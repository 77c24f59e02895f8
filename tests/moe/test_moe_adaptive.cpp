// moe_ffn with adaptive top-k (ffn_layer_args::route.adaptive): a token that the router gives k_t of
// the layer's k experts gets, bit for bit, what the exact top-k_t FFN gives it (the empty slots cost
// nothing and add nothing), on the decode kernels and on the grouped prefill path; the k_t follow the
// float64 entropy; the histogram counts k_t per token; an empty slot (-1) is not an error.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "moe/moe_case.hpp"
#include "q35/launch/expert_load.hpp"
#include "reference/router_reference.hpp"

namespace q35 {
namespace {

struct adaptive_run {
  std::vector<float> h;         // [n_tokens][n_embd]
  std::vector<int32_t> k_used;  // [n_tokens] (adaptive runs)
  std::vector<uint64_t> counts;
  int error_flag = 0;
};

// moe_ffn on c's weights with k experts per token, adaptive when `route` says so.
adaptive_run run(const test::moe_case& c, int k, const ops::route_options& route) {
  const test::moe_case_spec& s = c.spec;
  device_buffer<float> x = test::to_device(c.x), h = test::to_device(c.h0);
  device_buffer<int> flag = test::to_device(std::vector<int>{0});
  launch::ffn_layer_args a;
  a.shape = test::shape_of(s), a.shape.n_experts_used = k, a.route = route;
  a.x = x.data(), a.h = h.data(), a.n_tokens = s.n_tokens, a.error_flag = flag.data();
  device_buffer<uint8_t> ws = test::poisoned<uint8_t>(launch::moe_workspace_bytes(a.shape, s.n_tokens));
  a.workspace = ws.data(), a.workspace_bytes = ws.bytes();
  launch::expert_load load;
  Q35_REQUIRE_OK(load.allocate(1, s.n_experts));
  a.maybe_expert_counts = load.counts(0);
  Q35_REQUIRE_OK(launch::moe_ffn(a, c.weights));
  Q35_REQUIRE_OK(synchronize());
  adaptive_run r;
  r.h = test::to_host(h), r.error_flag = test::to_host(flag)[0];
  Q35_REQUIRE_OK(load.read(0, r.counts));
  if (route.adaptive) {
    const launch::detail::moe_buffers b = launch::detail::moe_buffers_of(a);
    r.k_used.resize(size_t(s.n_tokens));
    Q35_REQUIRE_OK(copy(r.k_used.data(), b.ws + b.l.k_used, r.k_used.size() * 4, copy_kind::device_to_host));
  }
  return r;
}

// Each token's entropy (nats) of the softmax over the router logits, in float64.
std::vector<double> entropies(const test::moe_case& c) {
  const test::moe_case_spec& s = c.spec;
  const std::vector<double> l = reference::router_logits(c.x, c.ref_w.router, s.n_tokens, s.n_experts, s.n_embd);
  std::vector<double> h;
  for (int64_t t = 0; t < s.n_tokens; ++t) {
    const double* lt = l.data() + t * s.n_experts;
    const double m = *std::max_element(lt, lt + s.n_experts);
    double sum = 0, acc = 0;
    for (int e = 0; e < s.n_experts; ++e) sum += std::exp(lt[e] - m);
    for (int e = 0; e < s.n_experts; ++e) {
      const double p = std::exp(lt[e] - m) / sum;
      if (p > 0) acc -= p * std::log(p);
    }
    h.push_back(acc);
  }
  return h;
}

}  // namespace

TEST_CASE("moe_ffn adaptive top-k: each token equals the exact top-k_t FFN bit for bit, both paths" *
          test::needs_device()) {
  for (const int64_t n_tokens : {int64_t(5), int64_t(60)}) {  // the decode kernels; the grouped GEMMs
    for (const uint32_t type : {uint32_t(quant::type_id::q8_0), uint32_t(quant::type_id::q4_k)}) {
      CAPTURE(n_tokens);
      CAPTURE(type);
      test::moe_case_spec s;
      s.n_experts = 16, s.k = 4, s.n_tokens = n_tokens, s.seed = 4100 + uint64_t(n_tokens) + type;
      s.type = s.down_type = s.sh_type = s.sh_down_type = type;
      const test::moe_case c = test::make_moe_case(s);

      // thresholds between the tokens' entropies at the thirds: every k value is used (away from
      // any token's entropy, so fp32 and float64 agree on each token's k)
      std::vector<double> sorted = entropies(c);
      std::sort(sorted.begin(), sorted.end());
      const size_t n = sorted.size(), i1 = n / 3, i2 = 2 * n / 3;
      REQUIRE(sorted[i1] - sorted[i1 - 1] > 1e-4);
      REQUIRE(sorted[i2] - sorted[i2 - 1] > 1e-4);
      ops::route_options route;
      route.adaptive = true;
      route.adaptive_k.entropy_below[0] = float((sorted[i1 - 1] + sorted[i1]) / 2);
      route.adaptive_k.entropy_below[1] = float((sorted[i2 - 1] + sorted[i2]) / 2);
      const int ks[3] = {1, 2, 4};
      std::copy(ks, ks + 3, route.adaptive_k.k_values);

      const adaptive_run got = run(c, s.k, route);
      CHECK(got.error_flag == 0);
      const std::vector<double> h = entropies(c);
      std::vector<adaptive_run> exact;
      for (const int k : ks) exact.push_back(run(c, k, {}));
      uint64_t selections = 0;
      for (int64_t t = 0; t < n_tokens; ++t) {
        CAPTURE(t);
        const int want_k = h[size_t(t)] < route.adaptive_k.entropy_below[0]   ? 1
                           : h[size_t(t)] < route.adaptive_k.entropy_below[1] ? 2
                                                                              : 4;
        REQUIRE(got.k_used[size_t(t)] == want_k);
        selections += uint64_t(want_k);
        const adaptive_run& e = exact[want_k == 1 ? 0 : want_k == 2 ? 1 : 2];
        REQUIRE(e.error_flag == 0);
        const size_t o = size_t(t * s.n_embd);
        CHECK(std::memcmp(got.h.data() + o, e.h.data() + o, size_t(s.n_embd) * sizeof(float)) == 0);
      }
      uint64_t counted = 0;
      for (const uint64_t v : got.counts) counted += v;
      CHECK(counted == selections);
      CHECK(selections < uint64_t(n_tokens * s.k));  // the point: fewer experts read
    }
  }
}

TEST_CASE("moe_ffn adaptive top-k: k values equal to k give the exact FFN; bad options are refused" *
          test::needs_device()) {
  test::moe_case_spec s;
  s.n_experts = 8, s.k = 2, s.n_tokens = 3, s.seed = 4200;
  const test::moe_case c = test::make_moe_case(s);
  ops::route_options all;
  all.adaptive = true;
  for (int& v : all.adaptive_k.k_values) v = s.k;
  const adaptive_run a = run(c, s.k, all), e = run(c, s.k, {});
  CHECK(a.h == e.h);
  CHECK(a.counts == e.counts);

  // the options are checked before anything runs, naming the value
  device_buffer<float> x = test::to_device(c.x), h = test::to_device(c.h0);
  device_buffer<int> flag = test::to_device(std::vector<int>{0});
  launch::ffn_layer_args bad;
  bad.shape = test::shape_of(s), bad.x = x.data(), bad.h = h.data(), bad.n_tokens = s.n_tokens;
  bad.error_flag = flag.data();
  device_buffer<uint8_t> ws = test::poisoned<uint8_t>(launch::moe_workspace_bytes(bad.shape, s.n_tokens));
  bad.workspace = ws.data(), bad.workspace_bytes = ws.bytes();
  bad.route = all, bad.route.adaptive_k.k_values[1] = 3;
  const status st = launch::moe_ffn(bad, c.weights);
  CHECK(st.message().find("adaptive k value 3 is outside 1..n_experts_used = 2") != std::string::npos);
  bad.route = all, bad.route.adaptive_k.entropy_below[0] = 3.0f, bad.route.adaptive_k.entropy_below[1] = 1.0f;
  CHECK(launch::moe_ffn(bad, c.weights).message().find("ascending") != std::string::npos);
}

}  // namespace q35
