// Float64 host reference of the router: logits W x, softmax / sigmoid scores, top-k by logit
// (NaN last, lower index on ties), entropy-adaptive k and renormalisation, with the non-finite
// rules documented in include/q35/ops/router.hpp.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <vector>

namespace q35::reference {

// logits[t, e] = sum_c w[e, c] x[t, c] in double; w [n_rows, n_embd], x [n_tokens, n_embd].
inline std::vector<double> router_logits(const std::vector<float>& x, const std::vector<float>& w, int64_t n_tokens,
                                         int n_rows, int n_embd) {
  std::vector<double> out(size_t(n_tokens) * size_t(n_rows));
  for (int64_t t = 0; t < n_tokens; ++t)
    for (int e = 0; e < n_rows; ++e) {
      double s = 0;
      for (int c = 0; c < n_embd; ++c) s += double(w[size_t(e) * n_embd + c]) * double(x[size_t(t) * n_embd + c]);
      out[size_t(t) * n_rows + e] = s;
    }
  return out;
}

struct route_ref_options {
  bool sigmoid = false;
  bool renormalize = true;
  bool adaptive = false;
  double entropy_below[2] = {1.2, 2.5};
  int k_values[3] = {1, 2, 3};
};

struct routed_ref {
  std::vector<int> ids;         // ranked, k_used of them
  std::vector<double> weights;  // their weights
  std::vector<double> p;        // scores of all experts
  double entropy = 0;           // nats, over the softmax distribution
  int k_used = 0;
};

// Order of the router's top-k: larger logit first, NaN after every number, lower index on ties.
inline std::vector<int> rank_experts(const double* logits, int n) {
  std::vector<int> idx(static_cast<size_t>(n));
  std::iota(idx.begin(), idx.end(), 0);
  std::stable_sort(idx.begin(), idx.end(), [&](int a, int b) {
    const double x = logits[a], y = logits[b];
    if (std::isnan(x) || std::isnan(y)) return !std::isnan(x) && std::isnan(y);
    return x > y;
  });
  return idx;
}

// Scores of all experts; NaN counts as -inf; an infinite maximum shares the mass among the experts at it.
inline std::vector<double> router_scores(const double* logits, int n, bool sigmoid) {
  std::vector<double> s(static_cast<size_t>(n)), p(static_cast<size_t>(n));
  for (int e = 0; e < n; ++e) s[size_t(e)] = std::isnan(logits[e]) ? -INFINITY : logits[e];
  if (sigmoid) {
    for (int e = 0; e < n; ++e) p[size_t(e)] = 1.0 / (1.0 + std::exp(-s[size_t(e)]));
    return p;
  }
  const double m = *std::max_element(s.begin(), s.end());
  double sum = 0;
  for (int e = 0; e < n; ++e) {
    p[size_t(e)] = std::isinf(m) ? (s[size_t(e)] == m ? 1.0 : 0.0) : std::exp(s[size_t(e)] - m);
    sum += p[size_t(e)];
  }
  for (auto& v : p) v /= sum;
  return p;
}

inline routed_ref route(const double* logits, int n_experts, int k, const route_ref_options& o) {
  routed_ref r;
  r.p = router_scores(logits, n_experts, o.sigmoid);
  if (!o.sigmoid)
    for (double q : r.p)
      if (q > 0) r.entropy -= q * std::log(q);
  r.k_used = k;
  if (o.adaptive)
    r.k_used = r.entropy < o.entropy_below[0]   ? o.k_values[0]
               : r.entropy < o.entropy_below[1] ? o.k_values[1]
                                                : o.k_values[2];
  const auto order = rank_experts(logits, n_experts);
  r.ids.assign(order.begin(), order.begin() + r.k_used);
  double sum = 0;
  for (int id : r.ids) sum += r.p[size_t(id)];
  const double denom = o.renormalize ? std::max(sum, 6.1e-5) : 1.0;
  for (int id : r.ids) r.weights.push_back(r.p[size_t(id)] / denom);
  return r;
}

}  // namespace q35::reference
