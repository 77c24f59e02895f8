// launch::logprobs against a float64 softmax: the given id's log-probability and the top list (ids in
// the row's order, larger first and lower id on ties, exactly; log-probabilities within 1e-4), for
// vocabularies on the vector and the scalar path up to a Qwen3.5 row, lists of 0 to 20, ties, NaN and
// infinities, rows with fewer finite logits than asked, and bad arguments.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "q35/launch/logprobs.hpp"
#include "test_util.hpp"

namespace {

using namespace q35;
using launch::token_logprobs;

struct reference_row {
  double logprob;
  std::vector<int32_t> top_ids;
  std::vector<double> top_logprobs;
};

reference_row reference(const float* l, int n_vocab, int32_t id, int top_n) {
  double m = -INFINITY;
  for (int i = 0; i < n_vocab; ++i)
    if (l[i] > -INFINITY) m = std::max(m, double(l[i]));
  double z = 0;
  for (int i = 0; i < n_vocab; ++i)
    if (l[i] > -INFINITY) z += std::exp(double(l[i]) - m);
  const bool finite = std::isfinite(m);
  const auto lp = [&](float v) { return finite ? double(v) - m - std::log(z) : NAN; };
  reference_row r;
  r.logprob = id >= 0 && id < n_vocab ? lp(l[id]) : NAN;
  std::vector<int32_t> order;
  for (int i = 0; i < n_vocab; ++i)
    if (l[i] > -INFINITY) order.push_back(i);
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return l[a] > l[b]; });
  if (finite)
    for (size_t k = 0; k < order.size() && int(k) < top_n; ++k) {
      r.top_ids.push_back(order[k]);
      r.top_logprobs.push_back(lp(l[order[k]]));
    }
  return r;
}

bool close(float got, double want) {
  if (std::isnan(want)) return std::isnan(got);
  if (std::isinf(want)) return got == want;
  return std::fabs(double(got) - want) <= 1e-5;  // observed below 1e-6 on every case here
}

// Runs the kernel and compares every row with the reference.
void check_rows(const std::vector<float>& logits, int n_rows, int n_vocab, const std::vector<int32_t>& ids, int top_n) {
  const auto d_logits = test::to_device(logits);
  const auto d_ids = test::to_device(ids);
  auto d_out = test::to_device(std::vector<token_logprobs>(size_t(n_rows)));
  launch::logprobs_args a;
  a.logits = d_logits.data(), a.n_rows = n_rows, a.n_vocab = n_vocab, a.ids = d_ids.data(), a.top_n = top_n;
  a.out = d_out.data();
  Q35_REQUIRE_OK(launch::logprobs(a));
  const auto out = test::to_host(d_out);
  for (int r = 0; r < n_rows; ++r) {
    CAPTURE(r);
    const reference_row want = reference(logits.data() + size_t(r) * size_t(n_vocab), n_vocab, ids[size_t(r)], top_n);
    const token_logprobs& got = out[size_t(r)];
    CHECK(got.id == ids[size_t(r)]);
    CHECK_MESSAGE(close(got.logprob, want.logprob), got.logprob, " vs ", want.logprob);
    REQUIRE(got.n_top == int(want.top_ids.size()));
    for (int k = 0; k < got.n_top; ++k) {
      CAPTURE(k);
      CHECK(got.top_ids[k] == want.top_ids[size_t(k)]);
      CHECK_MESSAGE(close(got.top_logprobs[k], want.top_logprobs[size_t(k)]), got.top_logprobs[k], " vs ",
                    want.top_logprobs[size_t(k)]);
    }
  }
}

std::vector<float> random_logits(size_t n, uint64_t seed, bool ties) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> nd(0.0f, 4.0f);
  std::vector<float> v(n);
  for (float& x : v) x = ties ? std::round(nd(rng)) : nd(rng);  // rounded: thousands of equal values
  return v;
}

}  // namespace

TEST_CASE("logprobs: the given id and the top list against a float64 softmax" * test::needs_device()) {
  struct shape {
    int n_rows, n_vocab;
  };
  // 4099 and 37: rows off 16-byte alignment take the scalar path
  const shape shapes[] = {{1, 1}, {2, 5}, {3, 37}, {2, 1000}, {2, 4099}, {1, 248320}};
  for (const shape& s : shapes)
    for (const bool ties : {false, true})
      for (const int top_n : {0, 1, 5, 20}) {
        CAPTURE(s.n_vocab);
        CAPTURE(ties);
        CAPTURE(top_n);
        const auto logits = random_logits(size_t(s.n_rows) * size_t(s.n_vocab), uint64_t(s.n_vocab + top_n), ties);
        std::vector<int32_t> ids;
        for (int r = 0; r < s.n_rows; ++r) ids.push_back((r * 7919 + top_n) % s.n_vocab);
        check_rows(logits, s.n_rows, s.n_vocab, ids, top_n);
      }
}

TEST_CASE("logprobs: NaN and -inf have probability 0; short and undefined rows" * test::needs_device()) {
  const int n_vocab = 64;
  std::vector<float> logits(size_t(4) * n_vocab, -INFINITY);
  // row 0: three finite logits (two tied), NaN elsewhere in part: a list of 20 holds three
  for (int i = 0; i < n_vocab; i += 2) logits[size_t(i)] = NAN;
  logits[9] = 2.0f, logits[17] = 2.0f, logits[40] = -3.0f;
  // row 1: every logit -inf or NaN: NaN log-probabilities, an empty list
  logits[size_t(n_vocab) + 3] = NAN;
  // row 2: a +inf logit: undefined
  logits[size_t(2 * n_vocab) + 5] = INFINITY;
  logits[size_t(2 * n_vocab) + 6] = 1.0f;
  // row 3: all equal: log(1/64) for each, ids in order
  std::fill(logits.begin() + 3 * n_vocab, logits.end(), 0.5f);
  test::for_each_order([&] { check_rows(logits, 4, n_vocab, {40, 3, 6, 63}, 20); });
  // the given id outside the vocabulary: NaN
  check_rows(logits, 1, n_vocab, {n_vocab}, 2);
}

TEST_CASE("logprobs: bad arguments are named") {
  float x = 0.0f;
  int32_t id = 0;
  token_logprobs o;
  launch::logprobs_args a;
  a.logits = &x, a.n_rows = 1, a.n_vocab = 1, a.ids = &id, a.top_n = 1, a.out = &o;
  const auto fails_with = [](const launch::logprobs_args& b, const char* text) {
    const status s = launch::logprobs(b);
    CHECK(!s.ok());
    CHECK(s.message().find(text) != std::string::npos);
  };
  auto b = a;
  b.top_n = 21;
  fails_with(b, "top_n = 21 is outside 0..20");
  b = a, b.n_vocab = 0;
  fails_with(b, "n_vocab = 0 is outside");
  b = a, b.n_rows = -1;
  fails_with(b, "n_rows = -1");
  b = a, b.ids = nullptr;
  fails_with(b, "logits, ids or out is null");
}
