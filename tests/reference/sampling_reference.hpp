// Float64 host reference of launch::sample: the greedy id, the kept set of repetition penalty ->
// top-k -> top-p -> min-p and the exact probabilities of the temperature draw over it (the rules in
// docs/sampling.md), by sorting the row; plus the chi-square statistic of observed draws.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <vector>

namespace q35::reference {

struct sample_ref_params {
  double temperature = 0.8;
  int top_k = 40;
  double top_p = 0.95;
  double min_p = 0.05;
  float repeat_penalty = 1.0f;
  float frequency_penalty = 0.0f;
  float presence_penalty = 0.0f;
  int repeat_last_n = 64;
};

// The logits the filters see: for each distinct id of the window, occurring c times there, l / p
// (l > 0) or l * p, then l - (c * frequency + presence) (llama.cpp's penalties sampler), in float as
// the device computes them: each operation rounded on its own, l / p as l * (1 / p) with 1 / p rounded
// to float.
inline std::vector<float> penalized_logits(const float* logits, int n_vocab, const sample_ref_params& p,
                                           const int32_t* maybe_recent) {
  std::vector<float> l(logits, logits + n_vocab);
  if (!maybe_recent || p.repeat_last_n <= 0) return l;
  if (p.repeat_penalty == 1.0f && p.frequency_penalty == 0.0f && p.presence_penalty == 0.0f) return l;
  std::vector<int> count(static_cast<size_t>(n_vocab), 0);
  for (int t = 0; t < p.repeat_last_n; ++t) {
    const int32_t id = maybe_recent[t];
    if (id >= 0 && id < n_vocab) ++count[size_t(id)];
  }
  const volatile float inv_p = 1.0f / p.repeat_penalty;  // volatile: each product rounded on its own
  for (int id = 0; id < n_vocab; ++id) {
    if (count[size_t(id)] == 0) continue;
    volatile float v = l[size_t(id)];
    v = v > 0.0f ? v * inv_p : v * p.repeat_penalty;
    volatile const float by_count = float(count[size_t(id)]) * p.frequency_penalty;
    volatile const float offset = by_count + p.presence_penalty;
    l[size_t(id)] = v - offset;
  }
  return l;
}

struct sample_ref {
  int argmax = 0;          // greedy id: largest logit, lowest id on ties, NaN only when all are NaN
  bool sampled = false;    // false: the answer is argmax (greedy, or no finite maximum)
  std::vector<int> order;  // ids by larger logit first (NaN as -inf), lower id on ties
  std::vector<double> x;   // [n_vocab]: l - m of the penalised logits (NaN as -inf)
  double temperature = 1;
  int n_kept = 0;  // the kept set is order[0, n_kept)
  // With the tolerances of sample_reference: every length in [n_kept_min, n_kept_max] is a correct
  // kept set for a sampler whose masses and logit differences carry those errors.
  int n_kept_min = 0, n_kept_max = 0;
  std::vector<char> kept;    // [n_vocab]: in order[0, n_kept)
  std::vector<double> prob;  // [n_vocab]: probability of the draw (0 outside the kept set)

  // Probabilities exp(x / T) / Z over order[0, n).
  std::vector<double> prob_of_prefix(int n) const {
    std::vector<double> q(x.size(), 0.0);
    double z = 0;
    for (int j = 0; j < n; ++j) z += q[size_t(order[size_t(j)])] = std::exp(x[size_t(order[size_t(j)])] / temperature);
    for (double& v : q) v /= z;
    return q;
  }
};

// mass_tol: relative error allowed in the masses top-p compares (cumulative / Z_k against p);
// x_tol: absolute error allowed in l - m against log(min_p) (x = 0 is exact).
inline sample_ref sample_reference(const float* logits, int n_vocab, const sample_ref_params& p,
                                   const int32_t* maybe_recent = nullptr, double mass_tol = 0, double x_tol = 0) {
  const std::vector<float> l = penalized_logits(logits, n_vocab, p, maybe_recent);
  sample_ref r;
  r.temperature = p.temperature;
  // value with NaN as -inf; order: larger value first, lower id on ties
  const auto val = [&](int i) { return std::isnan(l[size_t(i)]) ? -INFINITY : double(l[size_t(i)]); };
  r.order.resize(static_cast<size_t>(n_vocab));
  std::iota(r.order.begin(), r.order.end(), 0);
  std::stable_sort(r.order.begin(), r.order.end(), [&](int a, int b) { return val(a) > val(b); });
  // argmax: the same order, but NaN after -inf
  r.argmax = 0;
  for (int i = 0; i < n_vocab; ++i)
    if (!std::isnan(l[size_t(i)])) {
      r.argmax = i;
      break;
    }
  for (int i = 0; i < n_vocab; ++i)
    if (!std::isnan(l[size_t(i)]) && l[size_t(i)] > l[size_t(r.argmax)]) r.argmax = i;
  const double m = val(r.order[0]);
  r.x.resize(static_cast<size_t>(n_vocab));
  for (int i = 0; i < n_vocab; ++i) r.x[size_t(i)] = val(i) - m;
  r.kept.assign(size_t(n_vocab), 0);
  r.prob.assign(size_t(n_vocab), 0.0);
  r.sampled = p.temperature > 0 && std::isfinite(m);
  if (!r.sampled) return r;

  // top-k: the first k of the order
  const int k = p.top_k > 0 ? std::min(p.top_k, n_vocab) : n_vocab;
  // top-p: the shortest prefix with cumulative mass >= p z_k (and with p -+ mass_tol)
  int n_p[3] = {k, k, k};
  if (p.top_p < 1.0) {
    double z_k = 0;
    for (int j = 0; j < k; ++j) z_k += std::exp(r.x[size_t(r.order[size_t(j)])]);
    const double targets[3] = {p.top_p, p.top_p - mass_tol, p.top_p + mass_tol};
    for (int t = 0; t < 3; ++t) {
      double cum = 0;
      for (int j = 0; j < k; ++j) {
        cum += std::exp(r.x[size_t(r.order[size_t(j)])]);
        if (cum / z_k >= targets[t]) {
          n_p[t] = j + 1;
          break;
        }
      }
    }
  }
  // min-p: the prefix with l - m >= log(min_p) (and with log(min_p) +- x_tol; x = 0 always kept)
  int n_m[3] = {n_vocab, n_vocab, n_vocab};
  if (p.min_p > 0) {
    const double log_min_p = std::log(p.min_p);
    const double bounds[3] = {log_min_p, log_min_p + x_tol, log_min_p - x_tol};
    for (int t = 0; t < 3; ++t) {
      int n = 0;
      while (n < n_vocab && (r.x[size_t(r.order[size_t(n)])] >= bounds[t] || r.x[size_t(r.order[size_t(n)])] == 0)) ++n;
      n_m[t] = n;
    }
  }
  r.n_kept = std::min({k, n_p[0], n_m[0]});
  r.n_kept_min = std::min({k, n_p[1], n_m[1]});
  r.n_kept_max = std::min({k, n_p[2], n_m[2]});
  for (int j = 0; j < r.n_kept; ++j) r.kept[size_t(r.order[size_t(j)])] = 1;
  r.prob = r.prob_of_prefix(r.n_kept);
  return r;
}

// Pearson's chi-square of observed counts against probabilities: categories expected below 5 are
// pooled into one; an observation where prob is 0 gives +inf. df = categories - 1.
struct chi_square {
  double statistic = 0;
  int df = 0;
};

inline chi_square chi_square_of(const std::vector<int64_t>& observed, const std::vector<double>& prob) {
  int64_t n = 0;
  for (int64_t o : observed) n += o;
  chi_square c;
  double pooled_e = 0, pooled_o = 0;
  int categories = 0;
  for (size_t i = 0; i < prob.size(); ++i) {
    const double e = prob[i] * double(n);
    if (prob[i] == 0.0) {
      if (observed[i] > 0) c.statistic = INFINITY;
      continue;
    }
    if (e < 5.0) {
      pooled_e += e;
      pooled_o += double(observed[i]);
      continue;
    }
    c.statistic += (double(observed[i]) - e) * (double(observed[i]) - e) / e;
    ++categories;
  }
  if (pooled_e > 0) {
    c.statistic += (pooled_o - pooled_e) * (pooled_o - pooled_e) / pooled_e;
    ++categories;
  }
  c.df = std::max(categories - 1, 1);
  return c;
}

// Upper critical value of chi-square with df degrees of freedom at significance alpha = Q(z), z the
// standard normal quantile (Wilson-Hilferty: within 1 % of the exact value for df >= 3).
inline double chi_square_critical(int df, double z) {
  const double a = 2.0 / (9.0 * double(df));
  const double c = 1.0 - a + z * std::sqrt(a);
  return double(df) * c * c * c;
}

}  // namespace q35::reference
