// Test fixture of the router tests: inputs of one call, a runner that launches launch::router on
// fresh poisoned outputs, and the comparison with the float64 reference.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <set>
#include <vector>

#include "q35/core/numeric.hpp"
#include "q35/launch/router.hpp"
#include "reference/router_reference.hpp"
#include "test_util.hpp"

namespace q35::test {

template <int E, int K>
struct router_traits {
  static constexpr int n_experts = E;
  static constexpr int n_experts_used = K;
};

struct router_case {
  int64_t n_tokens = 1;
  int n_embd = 64;
  int n_experts = 8;
  int k = 1;
  std::vector<float> x;        // [n_tokens, n_embd]
  std::vector<float> w;        // [n_experts, n_embd]
  std::vector<float> w_shexp;  // [n_embd] or empty
  ops::route_options route;
};

struct router_out {
  std::vector<int32_t> ids;     // [n_tokens, k]
  std::vector<float> weights;   // [n_tokens, k]
  std::vector<int32_t> k_used;  // [n_tokens]
  std::vector<float> gate;      // [n_tokens] when w_shexp was given
  std::vector<float> logits;    // the kernel's fp32 logits [n_tokens, n_experts + 1] (workspace)
  std::vector<uint32_t> counters;
  std::vector<uint64_t> expert_counts;  // [n_experts]: the histogram of this one launch
};

// Uniform multiples of 1/64 in [-1, 1]: products are multiples of 2^-12 and sums of up to 4096 of
// them are exact in float, so the kernel's logits equal the float64 ones bit for bit (ties included).
inline std::vector<float> dyadic_floats(size_t n, uint64_t seed, int lo = -64, int hi = 64) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int> d(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = float(d(rng)) / 64.0f;
  return v;
}

inline router_case make_case(int64_t n_tokens, int n_embd, int n_experts, int k, uint64_t seed, bool dyadic,
                             bool shexp) {
  router_case c;
  c.n_tokens = n_tokens, c.n_embd = n_embd, c.n_experts = n_experts, c.k = k;
  const size_t nx = size_t(n_tokens) * size_t(n_embd), nw = size_t(n_experts) * size_t(n_embd);
  c.x = dyadic ? dyadic_floats(nx, seed) : random_floats(nx, seed);
  c.w = dyadic ? dyadic_floats(nw, seed + 1) : random_floats(nw, seed + 1, -0.1f, 0.1f);
  if (shexp) c.w_shexp = dyadic ? dyadic_floats(size_t(n_embd), seed + 2) : random_floats(size_t(n_embd), seed + 2);
  return c;
}

template <class WeightT>
std::vector<WeightT> convert(const std::vector<float>& v) {
  std::vector<WeightT> r(v.size());
  for (size_t i = 0; i < v.size(); ++i) r[i] = from_float<WeightT>(v[i]);
  return r;
}

// Runs the router on c.x with weights already in their storage type: w [n_experts rows], w_shexp
// [one row] or empty (c.w and c.w_shexp are not read); run(args) launches it.
template <class WeightT, class Run>
router_out run_router_with(const router_case& c, const std::vector<WeightT>& w, const std::vector<WeightT>& w_shexp,
                           Run&& run) {
  auto d_x = to_device(c.x);
  auto d_w = to_device(w);
  device_buffer<WeightT> d_shexp;
  if (!w_shexp.empty()) d_shexp = to_device(w_shexp);
  const size_t n = size_t(c.n_tokens);
  auto ids = poisoned<int32_t>(n * size_t(c.k));
  auto weights = poisoned<float>(n * size_t(c.k));
  auto k_used = poisoned<int32_t>(n);
  auto gate = poisoned<float>(n);
  launch::router_workspace ws;
  Q35_REQUIRE_OK(ws.allocate(c.n_tokens, c.n_experts));
  launch::router_args<WeightT> a;
  a.n_tokens = c.n_tokens, a.n_embd = c.n_embd, a.n_experts = c.n_experts, a.n_experts_used = c.k;
  a.x = d_x.data(), a.w_router = d_w.data(), a.maybe_w_shexp = w_shexp.empty() ? nullptr : d_shexp.data();
  a.ids = ids.data(), a.weights = weights.data(), a.maybe_k_used = k_used.data();
  a.maybe_shexp_gate = w_shexp.empty() ? nullptr : gate.data();
  device_buffer<uint64_t> counts;
  Q35_REQUIRE_OK(counts.allocate(size_t(c.n_experts)));
  Q35_REQUIRE_OK(fill_bytes(counts.data(), 0, counts.bytes()));
  a.maybe_expert_counts = counts.data();
  a.workspace = ws.view();
  a.route = c.route;
  Q35_REQUIRE_OK(run(a));
  router_out o{to_host(ids), to_host(weights), to_host(k_used), {}, {}, {}};
  if (!w_shexp.empty()) o.gate = to_host(gate);
  std::vector<float> l(n * size_t(c.n_experts + 1));
  Q35_REQUIRE_OK(copy(l.data(), ws.view().logits, l.size() * 4, copy_kind::device_to_host));
  std::vector<uint32_t> cnt(n);
  Q35_REQUIRE_OK(copy(cnt.data(), ws.view().tile_counters, cnt.size() * 4, copy_kind::device_to_host));
  Q35_REQUIRE_OK(synchronize());
  o.logits = l, o.counters = cnt;
  o.expert_counts = to_host(counts);
  return o;
}

template <class Traits, class WeightT, class Policy = kernels::router_policy_auto>
router_out run_router_stored(const router_case& c, const std::vector<WeightT>& w, const std::vector<WeightT>& w_shexp) {
  return run_router_with(
      c, w, w_shexp, [](const launch::router_args<WeightT>& a) { return launch::router<Traits, WeightT, Policy>(a); });
}

// The same through the run-time entry (launch::router(router_view_args)): w holds the weights of
// ggml type `type` (its scalars or blocks).
template <class WeightT>
router_out run_router_view(const router_case& c, const std::vector<WeightT>& w, const std::vector<WeightT>& w_shexp,
                           uint32_t type) {
  return run_router_with(c, w, w_shexp, [&](const launch::router_args<WeightT>& a) {
    launch::router_view_args v;
    v.n_tokens = a.n_tokens, v.n_embd = a.n_embd, v.n_experts = a.n_experts, v.n_experts_used = a.n_experts_used;
    v.x = a.x;
    v.w_router = {a.w_router, type, a.n_embd, a.n_experts, 1, 0};
    if (a.maybe_w_shexp) v.maybe_w_shexp = {a.maybe_w_shexp, type, a.n_embd, 1, 1, 0};
    v.ids = a.ids, v.weights = a.weights, v.maybe_k_used = a.maybe_k_used, v.maybe_shexp_gate = a.maybe_shexp_gate;
    v.maybe_expert_counts = a.maybe_expert_counts, v.workspace = a.workspace, v.route = a.route;
    return launch::router(v);
  });
}

template <class Traits, class WeightT = float, class Policy = kernels::router_policy_auto>
router_out run_router(const router_case& c) {
  return run_router_stored<Traits, WeightT, Policy>(
      c, convert<WeightT>(c.w), c.w_shexp.empty() ? std::vector<WeightT>{} : convert<WeightT>(c.w_shexp));
}

inline reference::route_ref_options ref_options(const ops::route_options& r) {
  reference::route_ref_options o;
  o.sigmoid = r.score == ops::router_score::sigmoid;
  o.renormalize = r.renormalize;
  o.adaptive = r.adaptive;
  for (int i = 0; i < 2; ++i) o.entropy_below[i] = r.adaptive_k.entropy_below[i];
  for (int i = 0; i < 3; ++i) o.k_values[i] = r.adaptive_k.k_values[i];
  return o;
}

// The kernel's fp32 logits of one token as doubles (to route them with the reference).
inline std::vector<double> kernel_logits(const router_case& c, const router_out& o, int64_t t) {
  std::vector<double> l(static_cast<size_t>(c.n_experts));
  for (int e = 0; e < c.n_experts; ++e) l[size_t(e)] = o.logits[size_t(t) * size_t(c.n_experts + 1) + size_t(e)];
  return l;
}

// Compares every token's ids (exactly), weights and k_used with the reference routed from
// `logits` [n_tokens, n_experts]. Weight tolerance: fast_exp's argument x * log2(e) is rounded
// (relative error |x| u), the sum over n_experts terms and the renormalisation add (n_experts + k) u;
// we allow twice that, u = 2^-24.
inline void check_routing(const router_case& c, const router_out& o, const std::vector<double>& logits) {
  const auto opt = ref_options(c.route);
  // The histogram counts each selection once: exactly one block routed each token.
  std::vector<uint64_t> hist(static_cast<size_t>(c.n_experts), 0);
  for (int32_t id : o.ids)
    if (id >= 0 && id < c.n_experts) ++hist[size_t(id)];
  CHECK(o.expert_counts == hist);
  for (int64_t t = 0; t < c.n_tokens; ++t) {
    CAPTURE(t);
    const auto r = reference::route(&logits[size_t(t) * size_t(c.n_experts)], c.n_experts, c.k, opt);
    REQUIRE(o.k_used[size_t(t)] == r.k_used);
    double spread = 0;
    for (int e = 0; e < c.n_experts; ++e) {
      const double l = logits[size_t(t) * size_t(c.n_experts) + size_t(e)];
      if (std::isfinite(l)) spread = std::max(spread, std::fabs(l));
    }
    const double rel = 2.0 * (c.n_experts + c.k + 8 + 4 * spread) * std::ldexp(1.0, -24);
    std::set<int> seen;
    for (int j = 0; j < c.k; ++j) {
      CAPTURE(j);
      const int id = o.ids[size_t(t) * size_t(c.k) + size_t(j)];
      const float wgt = o.weights[size_t(t) * size_t(c.k) + size_t(j)];
      REQUIRE(!std::isnan(wgt));
      if (j >= r.k_used) {
        CHECK(id == -1);
        CHECK(wgt == 0.0f);
        continue;
      }
      REQUIRE(id == r.ids[size_t(j)]);
      REQUIRE(seen.insert(id).second);
      CHECK(std::fabs(double(wgt) - r.weights[size_t(j)]) <= rel * r.weights[size_t(j)] + 1e-37);  // + float underflow
    }
  }
}

// The shared-expert gate against sigmoid of the float64 dot; |d sigmoid| <= |d logit| / 4, and
// the logit error of an n-term float sum is <= n u sum|w x|.
inline void check_gate(const router_case& c, const router_out& o) {
  if (c.w_shexp.empty()) return;
  const auto l = reference::router_logits(c.x, c.w_shexp, c.n_tokens, 1, c.n_embd);
  for (int64_t t = 0; t < c.n_tokens; ++t) {
    double abs_sum = 0;
    for (int i = 0; i < c.n_embd; ++i)
      abs_sum += std::fabs(double(c.w_shexp[size_t(i)]) * c.x[size_t(t) * c.n_embd + i]);
    const double want = 1.0 / (1.0 + std::exp(-l[size_t(t)]));
    CHECK(std::fabs(o.gate[size_t(t)] - want) <= c.n_embd * std::ldexp(abs_sum, -24) / 4 + 4 * std::ldexp(1.0, -24));
  }
}

}  // namespace q35::test
