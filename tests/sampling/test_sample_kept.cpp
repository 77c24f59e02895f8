// ops::select_kept (through a probe kernel): the kept set of penalty -> top-k -> top-p -> min-p and
// the draw weights, against the float64 reference, for each filter alone and combined.
//
// Kept sets must be equal. A reference decision closer to its threshold than the device can
// resolve is not compared (and counted): top-p cut within 1e-5 of p (the device's masses are float
// exponentials, <= 2^-22 |x| relative each, truncated to 2^-40: ~1e-6 relative at most), min-p
// within 1e-4 of log(min_p) (l - m and log(min_p) are rounded to float, |l - m| < 64 here).
//
// Probabilities: p_dev = w_i / sum w against the reference p_i. x = (l - m) / T is rounded twice
// (2^-23 |x|), exp2(x log2 e) adds 2^-24 |x| log2 e and <= 2 ulp (2^-22): each weight is within
// (|x| + 1) 2^-21 relative, and so is the sum; truncation to 2^-40 adds n 2^-40 absolute (Z >= 1).
// Tolerance: |p_dev - p_i| <= 2 (x_max + 1) 2^-21 p_i + 2 n 2^-40.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "sample_case.hpp"

namespace {

using namespace q35;

enum class logit_kind { spread, ties, specials };

// n_rows rows of n_vocab logits: spread ~ N(0, 3); ties: halves in [-3, 3]; specials: spread with
// some NaN, -inf and +-0 entries.
std::vector<float> make_logits(int n_rows, int n_vocab, logit_kind kind, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::uniform_int_distribution<int> half(-6, 6);
  std::vector<float> v(size_t(n_rows) * size_t(n_vocab));
  for (size_t i = 0; i < v.size(); ++i) {
    v[i] = kind == logit_kind::ties ? 0.5f * float(half(rng)) : normal(rng);
    if (kind == logit_kind::specials) {
      const int r = int(rng() % 16);
      if (r == 0) v[i] = NAN;
      if (r == 1) v[i] = -INFINITY;
      if (r == 2) v[i] = (rng() & 1) ? -0.0f : 0.0f;
    }
  }
  return v;
}

// A window per row: previous ids with repeats, -1 slots and ids out of range.
std::vector<int32_t> make_recent(int n_rows, int window, int n_vocab, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<int32_t> r(size_t(n_rows) * size_t(window));
  for (auto& id : r) {
    const int c = int(rng() % 10);
    id = c == 0 ? -1 : c == 1 ? n_vocab + int(rng() % 5) : int(rng() % uint64_t(std::min(n_vocab, 40)));
  }
  return r;
}

struct named_params {
  const char* name;
  launch::sampling_params p;
};

std::vector<named_params> filter_cases() {
  std::vector<named_params> c;
  auto add = [&](const char* name, auto&& set) {
    launch::sampling_params p = test::plain_params();
    set(p);
    c.push_back({name, p});
  };
  add("temperature 0.7 alone", [](auto& p) { p.temperature = 0.7f; });
  add("temperature 2.5 alone", [](auto& p) { p.temperature = 2.5f; });
  add("top_k 1", [](auto& p) { p.top_k = 1; });
  add("top_k 5", [](auto& p) { p.top_k = 5; });
  add("top_k 40", [](auto& p) { p.top_k = 40; });
  add("top_k past n_vocab", [](auto& p) { p.top_k = 1 << 20; });
  add("top_p 0.5", [](auto& p) { p.top_p = 0.5f; });
  add("top_p 0.95", [](auto& p) { p.top_p = 0.95f; });
  add("top_p 0.999", [](auto& p) { p.top_p = 0.999f; });
  add("min_p 0.05", [](auto& p) { p.min_p = 0.05f; });
  add("min_p 0.3", [](auto& p) { p.min_p = 0.3f; });
  add("min_p 1", [](auto& p) { p.min_p = 1.0f; });
  add("llama.cpp defaults", [](auto& p) { p = launch::sampling_params{}; });
  add("top_k 10 + top_p 0.8", [](auto& p) { p.top_k = 10, p.top_p = 0.8f; });
  add("top_p 0.9 + min_p 0.1, T 1.3", [](auto& p) { p.top_p = 0.9f, p.min_p = 0.1f, p.temperature = 1.3f; });
  add("penalty 1.5 alone", [](auto& p) { p.repeat_penalty = 1.5f, p.repeat_last_n = 16; });
  add("penalty 0.7 + defaults", [](auto& p) {
    p = launch::sampling_params{};
    p.repeat_penalty = 0.7f, p.repeat_last_n = 24;
  });
  // Qwen3.5's recommended presence penalty, and counted (frequency) penalties, one negative
  add("presence 1.5 + defaults", [](auto& p) {
    p = launch::sampling_params{};
    p.presence_penalty = 1.5f, p.repeat_last_n = 32;
  });
  add("frequency 0.4 + presence 0.3, T 1.2", [](auto& p) {
    p.temperature = 1.2f, p.frequency_penalty = 0.4f, p.presence_penalty = 0.3f, p.repeat_last_n = 48;
  });
  add("penalty 1.1 + frequency -0.3 + top_k 20",
      [](auto& p) { p.top_k = 20, p.repeat_penalty = 1.1f, p.frequency_penalty = -0.3f, p.repeat_last_n = 40; });
  return c;
}

// Compares the probe with the reference on every row; returns the rows whose kept set differs from
// the exact one within the tolerances.
// fast: the kernel's fast path where it applies (it adds the rows it decided to *n_fast), else the
// general path.
int compare_rows(const std::vector<float>& logits, int n_rows, int n_vocab, const launch::sampling_params& sp,
                 const std::vector<int32_t>& recent, bool fast = true, int* n_fast = nullptr) {
  const test::probe_result got = fast ? test::probe_kept<true>(logits, n_rows, n_vocab, sp, recent)
                                      : test::probe_kept<false>(logits, n_rows, n_vocab, sp, recent);
  if (n_fast)
    for (int f : got.fast) *n_fast += f;
  // top-p: weights carry (|x| + 1) 2^-21 relative (|x| <= 28 where a weight is not 0 at T = 1),
  // truncation n 2^-40 absolute against Z >= 1; cum / Z doubles both.
  const double mass_tol = 2.0 * 29.0 * std::ldexp(1.0, -21) + 2.0 * double(n_vocab) * std::ldexp(1.0, -40);
  // min-p: l - m and log(min_p) rounded to float, |l - m| < 64 in these tests
  const double x_tol = std::ldexp(1.0, -23) * (64.0 + std::abs(std::log(double(sp.min_p > 0 ? sp.min_p : 1.0f))));
  int within_tol = 0;
  for (int r = 0; r < n_rows; ++r) {
    CAPTURE(r);
    const float* row = logits.data() + size_t(r) * size_t(n_vocab);
    const int32_t* win = recent.empty() ? nullptr : recent.data() + size_t(r) * size_t(sp.repeat_last_n);
    const reference::sample_ref want =
        reference::sample_reference(row, n_vocab, test::ref_params(sp), win, mass_tol, x_tol);
    REQUIRE(got.argmax[size_t(r)] == want.argmax);
    REQUIRE(got.sampled[size_t(r)] == int(want.sampled));
    const size_t base = size_t(r) * size_t(n_vocab);
    if (!want.sampled) {
      for (int i = 0; i < n_vocab; ++i) REQUIRE(got.kept[base + size_t(i)] == 0);
      continue;
    }
    // the device's kept set: a prefix of the reference order, of an allowed length
    int n_dev = 0;
    while (n_dev < n_vocab && got.kept[base + size_t(want.order[size_t(n_dev)])]) ++n_dev;
    for (int j = n_dev; j < n_vocab; ++j) REQUIRE(got.kept[base + size_t(want.order[size_t(j)])] == 0);
    CAPTURE(want.n_kept);
    REQUIRE(n_dev >= want.n_kept_min);
    REQUIRE(n_dev <= want.n_kept_max);
    within_tol += n_dev != want.n_kept;
    // probabilities over that set
    const std::vector<double> prob = want.prob_of_prefix(n_dev);
    double z = 0, x_max = 0;
    for (int i = 0; i < n_vocab; ++i) z += double(got.weight[base + size_t(i)]);
    for (int j = 0; j < n_dev; ++j) {
      const double x = want.x[size_t(want.order[size_t(j)])];
      if (std::isfinite(x)) x_max = std::max(x_max, -x / double(sp.temperature));
    }
    int mismatches = 0;
    for (int i = 0; i < n_vocab; ++i) {
      const double p_dev = double(got.weight[base + size_t(i)]) / z;
      const double tol =
          2.0 * (x_max + 1.0) * std::ldexp(1.0, -21) * prob[size_t(i)] + 2.0 * double(n_vocab) * std::ldexp(1.0, -40);
      if (std::abs(p_dev - prob[size_t(i)]) > tol && ++mismatches <= 5)
        FAIL_CHECK("id " << i << ": p = " << p_dev << ", reference " << prob[size_t(i)] << " (tol " << tol << ")");
    }
    REQUIRE(mismatches == 0);
  }
  return within_tol;
}

TEST_CASE("select_kept: each filter alone and combined equals the float64 kept set and probabilities" *
          test::needs_device()) {
  int compared = 0, within_tol = 0, n_fast = 0;
  for (const bool fast : {true, false}) {
    CAPTURE(fast);
    for (const named_params& c : filter_cases()) {
      CAPTURE(std::string(c.name));
      for (int n_vocab : {1, 7, 64, 300, 5000}) {
        CAPTURE(n_vocab);
        for (logit_kind kind : {logit_kind::spread, logit_kind::ties, logit_kind::specials}) {
          CAPTURE(int(kind));
          const int n_rows = 3;
          const uint64_t seed = uint64_t(n_vocab) * 131 + uint64_t(kind) * 7 + 1;
          const auto logits = make_logits(n_rows, n_vocab, kind, seed);
          const auto recent = launch::penalizes(c.p) ? make_recent(n_rows, c.p.repeat_last_n, n_vocab, seed + 5)
                                                     : std::vector<int32_t>{};
          within_tol += compare_rows(logits, n_rows, n_vocab, c.p, recent, fast, &n_fast);
          compared += n_rows;
        }
      }
    }
  }
  MESSAGE("rows compared: ", compared, " (", n_fast, " on the fast path), kept set other than the exact one (within ",
          "the tolerance): ", within_tol);
  CHECK(within_tol * 50 < compared);
  CHECK(n_fast * 3 > compared);  // both paths are covered
}

TEST_CASE("select_kept under every sim thread order" * test::needs_device()) {
  launch::sampling_params p{};  // llama.cpp defaults, with a penalty
  p.repeat_penalty = 1.2f, p.repeat_last_n = 8;
  const auto logits = make_logits(2, 300, logit_kind::ties, 99);
  const auto recent = make_recent(2, 8, 300, 98);
  test::for_each_order([&] {
    int n_fast = 0;
    compare_rows(logits, 2, 300, p, recent, true, &n_fast);
    CHECK(n_fast == 2);
    compare_rows(logits, 2, 300, p, recent, false);
  });
}

TEST_CASE("select_kept: a 248,320-entry row (Qwen3.5's vocabulary)" * test::needs_device()) {
  const int n_vocab = 248320;
  const auto logits = make_logits(1, n_vocab, logit_kind::spread, 7);
  for (const char* name :
       {"defaults", "top_k 0 + top_p 0.9", "min_p 0.02 alone", "penalty + top_k 1000", "frequency + presence"}) {
    CAPTURE(std::string(name));
    launch::sampling_params p{};
    std::vector<int32_t> recent;
    if (std::string(name) == "top_k 0 + top_p 0.9") p.top_k = 0, p.top_p = 0.9f, p.min_p = 0.0f;
    if (std::string(name) == "min_p 0.02 alone") p = test::plain_params(), p.min_p = 0.02f;
    const bool penalty = std::string(name) == "penalty + top_k 1000" || std::string(name) == "frequency + presence";
    if (std::string(name) == "penalty + top_k 1000") p.top_k = 1000, p.repeat_penalty = 1.3f;
    if (std::string(name) == "frequency + presence")
      p.top_k = 20, p.frequency_penalty = 0.5f, p.presence_penalty = 1.5f;
    if (penalty) {
      p.repeat_last_n = 64;
      recent = make_recent(1, 64, n_vocab, 8);
      // and the ten largest logits, so that the penalty changes the top of the order
      std::vector<int32_t> ids(static_cast<size_t>(n_vocab));
      std::iota(ids.begin(), ids.end(), 0);
      std::partial_sort(ids.begin(), ids.begin() + 10, ids.end(),
                        [&](int32_t a, int32_t b) { return logits[size_t(a)] > logits[size_t(b)]; });
      std::copy(ids.begin(), ids.begin() + 10, recent.begin() + 20);
      // counted: the top three twice more
      if (p.frequency_penalty != 0.0f) std::copy(ids.begin(), ids.begin() + 3, recent.begin() + 40);
      if (p.frequency_penalty != 0.0f) std::copy(ids.begin(), ids.begin() + 3, recent.begin() + 50);
    }
    int n_fast = 0;
    const int within_tol = compare_rows(logits, 1, n_vocab, p, recent, true, &n_fast);
    const int within_tol_general = compare_rows(logits, 1, n_vocab, p, recent, false);
    MESSAGE(std::string(name), ": fast path ", std::string(n_fast ? "taken" : "not taken"),
            "; kept set other than the exact one within the tolerance: ", within_tol, " (general path ",
            within_tol_general, ")");
  }
}

}  // namespace
