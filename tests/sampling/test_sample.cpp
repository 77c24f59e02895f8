// launch::sample: greedy ids, empirical distributions against the exact float64 distribution
// (chi-square), reproducibility from the seed and the device counter, validation messages, and a
// row of Qwen3.5's 248,320-entry vocabulary.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "sample_case.hpp"

namespace {

using namespace q35;

// Significance of the chi-square tests: alpha = 1e-4 (z = 3.719). The seeds are fixed, so each test
// is deterministic; alpha is the chance that a correct sampler fails for an arbitrary seed.
constexpr double chi_square_z = 3.719;

std::vector<float> normal_logits(int n, float sigma, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> d(0.0f, sigma);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = d(rng);
  return v;
}

std::vector<float> repeat_rows(const std::vector<float>& row, int n_rows) {
  std::vector<float> v;
  v.reserve(row.size() * size_t(n_rows));
  for (int r = 0; r < n_rows; ++r) v.insert(v.end(), row.begin(), row.end());
  return v;
}

TEST_CASE("greedy: argmax with the lowest id on ties, NaN only when all are NaN" * test::needs_device()) {
  const int n_vocab = 40;
  std::vector<std::vector<float>> rows;
  rows.push_back(normal_logits(n_vocab, 2.0f, 1));
  std::vector<float> ties(n_vocab, 1.0f);
  ties[3] = 2.0f, ties[17] = 2.0f, ties[30] = 2.0f;
  rows.push_back(ties);
  std::vector<float> nan_first = normal_logits(n_vocab, 1.0f, 2);
  nan_first[0] = NAN, nan_first[5] = NAN;
  rows.push_back(nan_first);
  rows.push_back(std::vector<float>(n_vocab, NAN));
  std::vector<float> neg_inf(n_vocab, -INFINITY);
  neg_inf[0] = NAN, neg_inf[9] = -INFINITY;
  rows.push_back(neg_inf);
  std::vector<float> pos_inf = normal_logits(n_vocab, 1.0f, 3);
  pos_inf[12] = INFINITY, pos_inf[20] = INFINITY;
  rows.push_back(pos_inf);
  std::vector<float> zeros(n_vocab, -1.0f);
  zeros[6] = -0.0f, zeros[4] = 0.0f;  // -0 == +0: the lower id wins
  rows.push_back(zeros);
  const int expected[] = {-1, 3, -1, 0, 1, 12, 4};
  std::vector<float> all;
  for (const auto& r : rows) all.insert(all.end(), r.begin(), r.end());
  const int n_rows = int(rows.size());
  for (float temperature : {0.0f, -1.0f}) {
    launch::sampling_params p{};
    p.temperature = temperature;
    test::for_each_order([&] {
      test::sampler s(all, n_rows, n_vocab);
      const auto ids = s.draw(p);
      for (int r = 0; r < n_rows; ++r) {
        CAPTURE(r);
        const auto want = reference::sample_reference(rows[size_t(r)].data(), n_vocab, test::ref_params(p));
        CHECK(ids[size_t(r)] == want.argmax);
        if (expected[r] >= 0) CHECK(ids[size_t(r)] == expected[r]);
      }
    });
  }
}

TEST_CASE("greedy applies the repetition penalty first (llama.cpp's chain)" * test::needs_device()) {
  std::vector<float> row = {1.0f, 3.0f, 2.5f, -1.0f};
  launch::sampling_params p{};
  p.temperature = 0.0f, p.repeat_penalty = 1.5f, p.repeat_last_n = 3;
  test::sampler s(row, 1, 4, {1, 1, -1});  // id 1: 3 / 1.5 = 2 < 2.5
  CHECK(s.draw(p)[0] == 2);
}

TEST_CASE("greedy sees the frequency and presence penalties after the repetition penalty" * test::needs_device()) {
  std::vector<float> row = {1.0f, 3.0f, 2.5f, -1.0f};
  launch::sampling_params p{};
  p.temperature = 0.0f, p.repeat_last_n = 4;
  test::sampler s(row, 1, 4, {1, 1, 3, -1});
  p.presence_penalty = 0.4f;  // id 1: 3 - 0.4 = 2.6 > 2.5
  CHECK(s.draw(p)[0] == 1);
  p.frequency_penalty = 0.3f;  // id 1 twice: 3 - (2 x 0.3 + 0.4) = 2.0 < 2.5
  CHECK(s.draw(p)[0] == 2);
  // a negative frequency penalty favours the window's ids; 7 lies outside the vocabulary (skipped)
  test::sampler t({2.0f, 3.0f, 2.9f, -1.0f}, 1, 4, {2, 7, 2, 2});
  p.presence_penalty = 0.0f, p.frequency_penalty = -0.1f;  // id 2: 2.9 + 3 x 0.1 = 3.2 > 3
  CHECK(t.draw(p)[0] == 2);
  p.presence_penalty = 0.25f;  // 2.9 - (-0.3 + 0.25) = 2.95 < 3
  CHECK(t.draw(p)[0] == 1);
  p.repeat_penalty = 0.9f, p.presence_penalty = 0.0f;  // 2.9 / 0.9 + 0.3 = 3.52
  CHECK(t.draw(p)[0] == 2);
}

TEST_CASE("rows without a finite maximum return the greedy id even when sampling" * test::needs_device()) {
  std::vector<float> rows = {NAN, NAN, NAN, -INFINITY, NAN, -INFINITY, 0.0f, INFINITY, 1.0f, INFINITY};
  test::sampler s(rows, 2, 5);
  const auto ids = s.draw(launch::sampling_params{});
  CHECK(ids[0] == 3);
  CHECK(ids[1] == 2);
}

struct draw_case {
  const char* name;
  launch::sampling_params p;
  launch::sampling_params wrong;  // a deliberately different filter the observed draws must reject
};

std::vector<draw_case> draw_cases() {
  std::vector<draw_case> c;
  auto add = [&](const char* name, auto&& set, auto&& set_wrong) {
    launch::sampling_params p = test::plain_params();
    set(p);
    launch::sampling_params w = p;
    set_wrong(w);
    c.push_back({name, p, w});
  };
  add(
      "temperature 0.8", [](auto& p) { p.temperature = 0.8f; }, [](auto& p) { p.temperature = 1.0f; });
  add(
      "temperature 1.5", [](auto& p) { p.temperature = 1.5f; }, [](auto& p) { p.temperature = 1.0f; });
  add(
      "top_k 8", [](auto& p) { p.top_k = 8; }, [](auto& p) { p.top_k = 9; });
  add(
      "top_p 0.7", [](auto& p) { p.top_p = 0.7f; }, [](auto& p) { p.top_p = 0.8f; });
  add(
      "min_p 0.1", [](auto& p) { p.min_p = 0.1f; }, [](auto& p) { p.min_p = 0.05f; });
  add(
      "defaults (top_k 40, top_p 0.95, min_p 0.05, T 0.8)", [](auto& p) { p = launch::sampling_params{}; },
      [](auto& p) { p.temperature = 1.0f; });
  add(
      "top_k 12, top_p 0.9, T 1.2", [](auto& p) { p.top_k = 12, p.top_p = 0.9f, p.temperature = 1.2f; },
      [](auto& p) { p.top_p = 1.0f; });
  add(
      "penalty 1.4 on ids 0-3, top_k 20", [](auto& p) { p.repeat_penalty = 1.4f, p.repeat_last_n = 6, p.top_k = 20; },
      [](auto& p) { p.repeat_penalty = 1.0f; });
  add(
      "frequency 0.5 + presence 0.5 on ids 0-3 (id 1 twice), top_k 20",
      [](auto& p) { p.frequency_penalty = 0.5f, p.presence_penalty = 0.5f, p.repeat_last_n = 6, p.top_k = 20; },
      [](auto& p) { p.frequency_penalty = 0.0f; });
  return c;
}

TEST_CASE("draws follow the exact distribution (chi-square, alpha = 1e-4); a wrong filter is rejected" *
          test::needs_device()) {
  const int n_vocab = 48, n_rows = 2000, n_calls = 4;  // 8000 draws per case
  // The distribution's logits, with the top four ids (the penalised ones) placed first.
  std::vector<float> row = normal_logits(n_vocab, 1.5f, 11);
  std::sort(row.begin(), row.end(), [](float a, float b) { return a > b; });
  std::swap(row[5], row[20]);  // not in sorted order
  const std::vector<int32_t> window = {0, 1, 2, 3, 1, -1};
  std::vector<int32_t> recent;
  for (int r = 0; r < n_rows; ++r) recent.insert(recent.end(), window.begin(), window.end());
  for (const bool fast : {true, false}) {
    for (const draw_case& c : draw_cases()) {
      CAPTURE(fast);
      CAPTURE(std::string(c.name));
      const bool penalty = launch::penalizes(c.p);
      test::sampler s(repeat_rows(row, n_rows), n_rows, n_vocab, penalty ? recent : std::vector<int32_t>{});
      launch::sampling_params p = c.p;
      p.seed = 0x5eed0001;
      std::vector<int64_t> counts(size_t(n_vocab), 0);
      for (int call = 0; call < n_calls; ++call)
        for (int32_t id : s.draw(p, fast)) {
          REQUIRE(id >= 0);
          REQUIRE(id < n_vocab);
          ++counts[size_t(id)];
        }
      const int32_t* win = penalty ? window.data() : nullptr;
      const auto want = reference::sample_reference(row.data(), n_vocab, test::ref_params(c.p), win);
      const auto wrong = reference::sample_reference(row.data(), n_vocab, test::ref_params(c.wrong), win);
      const reference::chi_square x2 = reference::chi_square_of(counts, want.prob);
      const reference::chi_square x2_wrong = reference::chi_square_of(counts, wrong.prob);
      const double crit = reference::chi_square_critical(x2.df, chi_square_z);
      const double crit_wrong = reference::chi_square_critical(x2_wrong.df, chi_square_z);
      MESSAGE(std::string(fast ? "" : "general path: "), std::string(c.name), ": chi2 = ", x2.statistic, " (df ", x2.df,
              ", critical ", crit, "); against the wrong filter ", x2_wrong.statistic, " (critical ", crit_wrong, ")");
      CHECK(x2.statistic < crit);
      CHECK(x2_wrong.statistic > 3.0 * crit_wrong);
    }
  }
}

TEST_CASE("the same seed and counter give the same ids; the counter moves on by one call" * test::needs_device()) {
  const int n_vocab = 64, n_rows = 50;
  const auto logits = repeat_rows(normal_logits(n_vocab, 1.0f, 5), n_rows);
  launch::sampling_params p{};
  p.top_k = 0, p.top_p = 1.0f, p.min_p = 0.0f, p.temperature = 1.0f, p.seed = 42;
  test::sampler a(logits, n_rows, n_vocab), b(logits, n_rows, n_vocab);
  const auto a1 = a.draw(p), a2 = a.draw(p);
  CHECK(a.counter_value() == uint64_t(2) << 32);
  const auto b1 = b.draw(p), b2 = b.draw(p);
  CHECK(a1 == b1);
  CHECK(a2 == b2);
  CHECK(a1 != a2);  // a new call draws new numbers (50 rows over a flat distribution)
  // rows draw from different streams
  int distinct = 0;
  for (int r = 1; r < n_rows; ++r) distinct += a1[size_t(r)] != a1[0];
  CHECK(distinct > 0);
  // another seed, another sequence; a counter set back replays
  launch::sampling_params q = p;
  q.seed = 43;
  test::sampler c(logits, n_rows, n_vocab);
  CHECK(c.draw(q) != a1);
  test::sampler d(logits, n_rows, n_vocab, {}, uint64_t(1) << 32);
  CHECK(d.draw(p) == a2);
  test::for_each_order([&] {
    test::sampler e(logits, n_rows, n_vocab);
    CHECK(e.draw(p) == a1);
  });
}

TEST_CASE("a 248,320-entry row: the greedy id and draws from the kept set" * test::needs_device()) {
  const int n_vocab = 248320, n_rows = 2;
  std::vector<float> logits = normal_logits(n_vocab * n_rows, 2.0f, 17);
  logits[size_t(n_vocab) + 200000] = 40.0f;  // row 1: one dominant id near the end
  test::sampler s(logits, n_rows, n_vocab);
  launch::sampling_params greedy{};
  greedy.temperature = 0.0f;
  const auto g = s.draw(greedy);
  for (int r = 0; r < n_rows; ++r) {
    const auto want =
        reference::sample_reference(logits.data() + size_t(r) * n_vocab, n_vocab, test::ref_params(greedy));
    CHECK(g[size_t(r)] == want.argmax);
  }
  CHECK(g[1] == 200000);
  for (const auto& [top_k, top_p] : {std::pair{40, 0.95f}, std::pair{0, 0.9f}}) {
    launch::sampling_params p{};
    p.top_k = top_k, p.top_p = top_p, p.seed = 7;
    for (int call = 0; call < 3; ++call) {
      const auto ids = s.draw(p);
      for (int r = 0; r < n_rows; ++r) {
        const auto want =
            reference::sample_reference(logits.data() + size_t(r) * n_vocab, n_vocab, test::ref_params(p));
        REQUIRE(ids[size_t(r)] >= 0);
        REQUIRE(ids[size_t(r)] < n_vocab);
        CHECK(want.kept[size_t(ids[size_t(r)])]);
      }
    }
  }
}

TEST_CASE("validate names the bad value") {
  const auto message = [](auto&& set) {
    launch::sample_args a;
    a.n_rows = 1, a.n_vocab = 10;
    a.logits = reinterpret_cast<const float*>(16);
    a.out_ids = reinterpret_cast<int32_t*>(16);
    a.rng_counter = reinterpret_cast<uint64_t*>(16);
    set(a);
    return launch::validate(a).message();
  };
  CHECK(message([](auto&) {}).empty());
  CHECK(message([](auto& a) { a.params.temperature = NAN; }) ==
        "launch::sample: temperature = nan is not a finite number");
  CHECK(message([](auto& a) { a.params.top_p = 0.0f; }).find("top_p = 0.000000 is outside (0, 1]") !=
        std::string::npos);
  CHECK(message([](auto& a) { a.params.top_p = 1.5f; }).find("top_p = 1.500000") != std::string::npos);
  CHECK(message([](auto& a) { a.params.top_p = NAN; }).find("top_p = nan") != std::string::npos);
  CHECK(message([](auto& a) { a.params.min_p = -0.1f; }).find("min_p = -0.100000 is outside [0, 1]") !=
        std::string::npos);
  CHECK(message([](auto& a) { a.params.min_p = NAN; }).find("min_p = nan") != std::string::npos);
  CHECK(message([](auto& a) { a.params.top_k = -1; }).find("top_k = -1 is negative") != std::string::npos);
  CHECK(message([](auto& a) { a.params.repeat_penalty = 0.0f; }).find("repeat_penalty = 0.000000") !=
        std::string::npos);
  CHECK(message([](auto& a) { a.params.repeat_penalty = -2.0f; }).find("repeat_penalty = -2.000000") !=
        std::string::npos);
  CHECK(message([](auto& a) { a.params.repeat_last_n = -1; }).find("repeat_last_n = -1") != std::string::npos);
  CHECK(message([](auto& a) { a.params.frequency_penalty = NAN; }) ==
        "launch::sample: frequency_penalty = nan is not a finite number (0 turns it off)");
  CHECK(message([](auto& a) { a.params.presence_penalty = INFINITY; }).find("presence_penalty = inf") !=
        std::string::npos);
  const auto recent = reinterpret_cast<const int32_t*>(16);
  CHECK(message([&](auto& a) {
          a.maybe_recent = recent, a.params.presence_penalty = 1.5f, a.params.repeat_last_n = 4097;
        }) == "launch::sample: repeat_last_n = 4097 exceeds 4096, the longest window the penalties read");
  CHECK(message([&](auto& a) {
          a.maybe_recent = recent, a.params.repeat_penalty = 1.1f, a.params.repeat_last_n = 4096;
        }).empty());
  CHECK(message([&](auto& a) { a.maybe_recent = recent, a.params.repeat_last_n = 100000; }).empty());  // no penalty on
  CHECK(message([](auto& a) {
          a.params.presence_penalty = 1.5f, a.params.repeat_last_n = 100000;
        }).empty());  // no window
  CHECK(message([](auto& a) { a.n_vocab = 262145; }).find("n_vocab = 262145 is outside 1..262144") !=
        std::string::npos);
  CHECK(message([](auto& a) { a.n_vocab = 0; }).find("n_vocab = 0") != std::string::npos);
  CHECK(message([](auto& a) { a.n_rows = -3; }).find("n_rows = -3 is negative") != std::string::npos);
  CHECK(message([](auto& a) { a.logits = nullptr; }).find("logits is null") != std::string::npos);
  CHECK(message([](auto& a) { a.out_ids = nullptr; }).find("out_ids is null") != std::string::npos);
  CHECK(message([](auto& a) { a.rng_counter = nullptr; }).find("rng_counter is null") != std::string::npos);
  CHECK(message([](auto& a) { a.rng_counter = nullptr, a.params.temperature = 0.0f; }).empty());  // greedy needs none
  CHECK(message([](auto& a) { a.n_rows = 0, a.logits = nullptr; }).empty());
  CHECK(launch::sample_workspace_bytes(4, 248320) == 0);
}

}  // namespace

namespace {

using namespace q35;

// Logits from a formula (the same on every host): row r, entry i.
std::vector<float> formula_logits(int n_rows, int n_vocab) {
  std::vector<float> v(static_cast<size_t>(n_rows) * size_t(n_vocab));
  for (int r = 0; r < n_rows; ++r)
    for (int i = 0; i < n_vocab; ++i)
      v[size_t(r) * size_t(n_vocab) + size_t(i)] = float(3.0 * std::sin(0.37 * i + 1.3 * r) + 0.001 * (i % 7));
  return v;
}

TEST_CASE("pinned ids: the same seed and logits give these ids on every backend" * test::needs_device()) {
  // Recorded on the sim. A mismatch on CUDA means the backends disagree (possible only when a draw or
  // a top-p cut falls within a few ulp of a boundary, about 1e-6 per id: not for these).
  launch::sampling_params p{};  // llama.cpp defaults
  p.seed = 1234;
  test::sampler small(formula_logits(16, 200), 16, 200);
  CHECK(small.draw(p) == std::vector<int32_t>{88, 171, 13, 12, 144, 3, 171, 183, 128, 42, 20, 117, 64, 78, 40, 138});
  CHECK(small.draw(p) == std::vector<int32_t>{123, 187, 33, 45, 40, 173, 1, 13, 112, 74, 139, 35, 13, 43, 40, 190});
  launch::sampling_params q = p;  // top-p over the whole row: the general path
  q.top_k = 0, q.top_p = 0.9f, q.min_p = 0.0f, q.temperature = 1.1f;
  test::sampler large(formula_logits(2, 248320), 2, 248320);
  CHECK(large.draw(p) == std::vector<int32_t>{32507, 124221});
  CHECK(large.draw(q) == std::vector<int32_t>{65993, 128584});
}

}  // namespace
