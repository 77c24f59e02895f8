// ops::build_penalty_table and sample_row::value (through a probe kernel that writes every entry as
// the filters see it): bit for bit the float reference of llama.cpp's penalties (a plain count per
// id), for windows from 1 id to sample_max_window, duplicates, -1 and out-of-range ids,
// vocabularies of one warp's shape and of the 1024-thread shape up to the largest, on both block shapes.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "q35/kernels/sample.hpp"
#include "q35/launch/launch.hpp"
#include "q35/launch/sample.hpp"
#include "q35/ops/sampling.hpp"
#include "q35/ops/sampling_penalty.hpp"
#include "reference/sampling_reference.hpp"
#include "sample_case.hpp"
#include "test_util.hpp"

namespace {

using namespace q35;

// Writes every entry of every row as visit_entries presents it, and counts its visits.
template <int Threads>
struct penalty_probe_kernel {
  static constexpr int threads = Threads;
  struct params {
    const float* logits;
    const int32_t* recent;  // [n_rows, window]
    float* out;             // [n_rows, n_vocab]
    int32_t* visits;        // [n_rows, n_vocab], zeroed
    int64_t n_rows;
    int n_vocab;
    int window;
    ops::sample_config cfg;
  };
  struct shared_storage {
    int unused;
  };
  static dim3 grid(const params& p) { return dim3(unsigned(p.n_rows)); }
  static size_t dynamic_shared_bytes(const params& p) {
    return ops::sample_penalty::bytes<Threads>(p.n_vocab, p.window, p.cfg.penalty);
  }
  Q35_DEVICE void operator()(const params& p, shared_storage& s) const {
    const int64_t r = int64_t(arch::block_idx().x);
    const ops::sample_penalty* t = ops::build_penalty_table<Threads>(
        arch::shared_tail<ops::sample_penalty>(s), p.recent + r * p.window, p.window, p.n_vocab, p.cfg.penalty);
    const ops::sample_row row{p.logits + r * p.n_vocab, t, p.n_vocab};
    ops::for_each_entry<Threads>(row, [&](int i, float l) {
      p.out[r * p.n_vocab + i] = l;
      arch::atomic_add(p.visits + r * p.n_vocab + i, 1);
    });
  }
};

std::vector<float> probe_values(const std::vector<float>& logits, int n_rows, int n_vocab,
                                const launch::sampling_params& sp, const std::vector<int32_t>& recent) {
  auto d_logits = test::to_device(logits);
  auto d_recent = test::to_device(recent);
  auto out = test::poisoned<float>(size_t(n_rows) * size_t(n_vocab));
  auto visits = test::to_device(std::vector<int32_t>(size_t(n_rows) * size_t(n_vocab), 0));
  launch::with_sample_shape(n_vocab, [&](auto shape) {
    using kernel = penalty_probe_kernel<decltype(shape)::threads>;
    const typename kernel::params p{
        d_logits.data(), d_recent.data(), out.data(),       visits.data(),
        int64_t(n_rows), n_vocab,         sp.repeat_last_n, launch::sample_config_of(sp, n_vocab)};
    Q35_REQUIRE_OK(launch::launch<kernel>(p));
  });
  const auto n = test::to_host(visits);
  REQUIRE(std::all_of(n.begin(), n.end(), [](int32_t v) { return v == 1; }));  // every entry once
  return test::to_host(out);
}

// Logits of both signs, and with specials zeros of both signs, infinities and NaN.
std::vector<float> mixed_logits(int n_rows, int n_vocab, uint64_t seed, bool specials = true) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> nd(0.0f, 4.0f);
  std::vector<float> v(size_t(n_rows) * size_t(n_vocab));
  for (float& x : v) {
    const int c = specials ? int(rng() % 64) : 64;
    x = c == 0 ? 0.0f : c == 1 ? -0.0f : c == 2 ? -INFINITY : c == 3 ? INFINITY : c == 4 ? NAN : nd(rng);
  }
  return v;
}

// A window whose ids repeat: a pool of `distinct` ids spread over the vocabulary (so that set bits fall
// in many bitmap chunks), some drawn far more often than others, with -1 and out-of-range ids.
std::vector<int32_t> window_ids(int n_rows, int window, int n_vocab, int distinct, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<int32_t> pool(size_t(std::max(distinct, 1)));
  for (auto& id : pool) id = int32_t(rng() % uint64_t(n_vocab));
  pool.back() = n_vocab - 1;  // the last id (the bitmap's last word, the last chunk)
  pool.front() = 0;
  std::vector<int32_t> r(size_t(n_rows) * size_t(window));
  for (auto& id : r) {
    const int c = int(rng() % 20);
    if (c == 0) {
      id = -1;
    } else if (c == 1) {
      id = n_vocab + int(rng() % 3);
    } else if (c < 8) {
      id = pool[rng() % std::min<size_t>(pool.size(), 3)];  // a few very frequent ids
    } else {
      id = pool[rng() % pool.size()];
    }
  }
  return r;
}

void check_values(int n_vocab, int window, int distinct, const launch::sampling_params& base) {
  CAPTURE(n_vocab);
  CAPTURE(window);
  CAPTURE(distinct);
  launch::sampling_params sp = base;
  sp.repeat_last_n = window;
  const int n_rows = 2;
  const uint64_t seed = uint64_t(n_vocab) * 7 + uint64_t(window) * 13 + uint64_t(distinct);
  const auto logits = mixed_logits(n_rows, n_vocab, seed);
  const auto recent = window_ids(n_rows, window, n_vocab, distinct, seed + 1);
  const auto got = probe_values(logits, n_rows, n_vocab, sp, recent);
  int penalised = 0, max_count = 0;
  for (int r = 0; r < n_rows; ++r) {
    CAPTURE(r);
    const float* row = logits.data() + size_t(r) * size_t(n_vocab);
    const int32_t* win = recent.data() + size_t(r) * size_t(window);
    const std::vector<float> want = reference::penalized_logits(row, n_vocab, test::ref_params(sp), win);
    std::vector<int> count(size_t(n_vocab), 0);
    for (int t = 0; t < window; ++t)
      if (win[t] >= 0 && win[t] < n_vocab) max_count = std::max(max_count, ++count[size_t(win[t])]);
    int mismatches = 0;
    for (int i = 0; i < n_vocab; ++i) {
      const float g = got[size_t(r) * size_t(n_vocab) + size_t(i)];
      penalised += count[size_t(i)] > 0;
      // bit for bit (NaN stays NaN: compare the bits of both)
      if (std::memcmp(&g, &want[size_t(i)], 4) != 0 && ++mismatches <= 5)
        FAIL_CHECK("id " << i << " (count " << count[size_t(i)] << "): " << g << ", reference " << want[size_t(i)]);
    }
    REQUIRE(mismatches == 0);
  }
  CHECK(penalised > 0);
  if (window >= 64) CHECK(max_count > 2);  // the counts matter
}

TEST_CASE("penalty table: every entry bit for bit the reference, counts across the bitmap's chunks" *
          test::needs_device()) {
  std::vector<launch::sampling_params> settings;
  auto add = [&](float repeat, float frequency, float presence) {
    launch::sampling_params p = test::plain_params();
    p.repeat_penalty = repeat, p.frequency_penalty = frequency, p.presence_penalty = presence;
    settings.push_back(p);
  };
  add(1.3f, 0.0f, 0.0f);    // repetition alone
  add(1.0f, 0.0f, 1.5f);    // presence alone (Qwen3.5's recommendation)
  add(1.0f, 0.7f, 0.0f);    // frequency alone
  add(0.8f, -0.35f, 0.6f);  // all three, a negative frequency
  for (const auto& sp : settings) {
    CAPTURE(sp.repeat_penalty);
    CAPTURE(sp.frequency_penalty);
    CAPTURE(sp.presence_penalty);
    check_values(37, 1, 1, sp);
    check_values(1000, 64, 30, sp);  // one warp per row
    check_values(1025, 200, 150, sp);
    check_values(5000, 3000, 2500, sp);  // thousands of distinct ids over 20 chunks
  }
}

TEST_CASE("penalty table: the longest window with the largest vocabulary fits the smallest GPU" *
          test::needs_device()) {
  launch::sampling_params sp = test::plain_params();
  sp.repeat_penalty = 1.1f, sp.frequency_penalty = 0.25f, sp.presence_penalty = 0.5f;
  // the table at its largest, with the sampler's static storage, within the smallest GPU's shared memory
  using kernel = kernels::sample_kernel<launch::sample_shape_large::threads, launch::sample_shape_large::capacity>;
  const kernel::params kp{nullptr,
                          nullptr,
                          reinterpret_cast<const int32_t*>(16),
                          nullptr,
                          1,
                          ops::sample_max_vocab,
                          ops::sample_max_window,
                          launch::sample_config_of(sp, ops::sample_max_vocab)};
  const size_t table = kernel::dynamic_shared_bytes(kp), total = launch::shared_bytes<kernel>(kp);
  MESSAGE("penalty table of 4,096 ids over 262,144: ", table, " bytes; the block's shared memory: ", total);
  CHECK(total <= launch::smallest_max_shared_bytes);
  check_values(ops::sample_max_vocab, ops::sample_max_window, ops::sample_max_window, sp);
  check_values(248320, 2048, 700, sp);
  // and the sampler itself launches with it (its static storage plus this table)
  const auto logits = mixed_logits(1, ops::sample_max_vocab, 3, false);
  auto recent = window_ids(1, ops::sample_max_window, ops::sample_max_vocab, 5000, 4);
  test::sampler s(logits, 1, ops::sample_max_vocab, recent);
  sp.repeat_last_n = ops::sample_max_window, sp.seed = 9;
  const int32_t id = s.draw(sp)[0];
  CHECK(id >= 0);
  CHECK(id < ops::sample_max_vocab);
}

TEST_CASE("penalty table under every sim thread order" * test::needs_device()) {
  launch::sampling_params sp = test::plain_params();
  sp.repeat_penalty = 1.2f, sp.frequency_penalty = 0.3f, sp.presence_penalty = 0.2f;
  test::for_each_order([&] {
    check_values(300, 100, 40, sp);
    check_values(3000, 500, 300, sp);
  });
}

}  // namespace
