// Helpers of the sampling tests: run launch::sample on host data, probe the kept set the kernel's
// selection computes, and the reference parameters matching a launch::sampling_params.
#pragma once

#include <cstdint>
#include <vector>

#include "q35/arch/thread.hpp"
#include "q35/launch/launch.hpp"
#include "q35/launch/sample.hpp"
#include "q35/ops/sampling.hpp"
#include "q35/ops/sampling_candidates.hpp"
#include "q35/ops/sampling_select.hpp"
#include "reference/sampling_reference.hpp"
#include "test_util.hpp"

namespace q35::test {

inline reference::sample_ref_params ref_params(const launch::sampling_params& p) {
  reference::sample_ref_params r;
  r.temperature = p.temperature;
  r.top_k = p.top_k;
  r.top_p = p.top_p;
  r.min_p = p.min_p;
  r.repeat_penalty = p.repeat_penalty;
  r.frequency_penalty = p.frequency_penalty;
  r.presence_penalty = p.presence_penalty;
  r.repeat_last_n = p.repeat_last_n;
  return r;
}

// Sampling parameters with every filter off (temperature 1).
inline launch::sampling_params plain_params() {
  launch::sampling_params p;
  p.temperature = 1.0f;
  p.top_k = 0;
  p.top_p = 1.0f;
  p.min_p = 0.0f;
  return p;
}

// The device state of repeated sampling calls over fixed logits: ids come back poisoned first.
struct sampler {
  device_buffer<float> logits;
  device_buffer<int32_t> recent;
  device_buffer<uint64_t> counter;
  device_buffer<int32_t> ids;
  int n_rows, n_vocab;

  sampler(const std::vector<float>& h_logits, int rows, int vocab, const std::vector<int32_t>& h_recent = {},
          uint64_t counter_start = 0)
      : logits(to_device(h_logits)),
        counter(to_device(std::vector<uint64_t>{counter_start})),
        n_rows(rows),
        n_vocab(vocab) {
    if (!h_recent.empty()) recent = to_device(h_recent);
  }

  launch::sample_args args(const launch::sampling_params& p) {
    launch::sample_args a;
    a.logits = logits.data();
    a.n_rows = n_rows;
    a.n_vocab = n_vocab;
    a.params = p;
    a.maybe_recent = recent.size() ? recent.data() : nullptr;
    a.rng_counter = counter.data();
    a.out_ids = ids.data();
    return a;
  }

  // fast = false: the kernel restricted to its general path (launch::sample chooses per row).
  std::vector<int32_t> draw(const launch::sampling_params& p, bool fast = true) {
    ids = poisoned<int32_t>(size_t(n_rows));
    const launch::sample_args a = args(p);
    if (fast) {
      Q35_REQUIRE_OK(launch::sample(a));
    } else {
      Q35_REQUIRE_OK(launch::validate(a));
      Q35_REQUIRE_OK(launch::with_sample_shape(
          n_vocab, [&](auto shape) { return launch::detail::run_sample<decltype(shape), false>(a, nullptr); }));
    }
    return to_host(ids);
  }
  uint64_t counter_value() { return to_host(counter)[0]; }
};

// The probes' penalty table in the shared tail after s (null without a window).
template <int Threads, class P, class S>
Q35_DEVICE const ops::sample_penalty* penalty_of(const P& p, S& s, int64_t r) {
  if (!p.maybe_recent) return nullptr;
  return ops::build_penalty_table<Threads>(arch::shared_tail<ops::sample_penalty>(s), p.maybe_recent + r * p.window,
                                           p.window, p.n_vocab, p.cfg.penalty);
}

// Test kernel: what the kernel's selection decides for each entry (kept, and the draw weight), on
// the fast path (when it applies) or, with Fast = false, always on the general path.
template <int Threads, int Capacity, bool Fast>
struct kept_probe_kernel {
  static constexpr int threads = Threads;
  static constexpr int capacity = Capacity;
  struct params {
    const float* logits;          // [n_rows, n_vocab]
    const int32_t* maybe_recent;  // [n_rows, window] or null
    uint8_t* kept;                // [n_rows, n_vocab]
    uint64_t* weight;             // [n_rows, n_vocab]: fixed-point draw weight of kept entries, else 0
    int32_t* argmax;              // [n_rows]
    int32_t* sampled;             // [n_rows]: 1 when the row is sampled
    int32_t* fast;                // [n_rows]: 1 when the fast path decided
    int64_t n_rows;
    int n_vocab;
    int window;
    ops::sample_config cfg;
  };
  struct shared_storage {
    typename block::reduce<warp::arg_value, Threads>::storage argmax;
    union {
      ops::sample_candidate_storage<Threads, capacity> candidates;
      ops::sample_search_storage search;
    } path;
  };
  static dim3 grid(const params& p) { return dim3(unsigned(p.n_rows)); }
  static size_t dynamic_shared_bytes(const params& p) {
    return p.maybe_recent ? ops::sample_penalty::bytes<Threads>(p.n_vocab, p.window, p.cfg.penalty) : 0;
  }
  Q35_DEVICE void operator()(const params& p, shared_storage& s) const {
    const int64_t r = int64_t(arch::block_idx().x);
    const ops::sample_row row{p.logits + r * p.n_vocab, penalty_of<Threads>(p, s, r), p.n_vocab};
    ops::sample_selection sel = ops::selection_of(ops::row_argmax<Threads>(row, s.argmax), p.cfg);
    const bool sampled = sel.sampled(p.cfg);
    ops::for_each_entry<Threads>(row, [&](int i, float) {
      p.kept[r * p.n_vocab + i] = 0;
      p.weight[r * p.n_vocab + i] = 0;
    });
    if (arch::thread_rank() == 0) {
      p.argmax[r] = sel.argmax;
      p.sampled[r] = sampled ? 1 : 0;
      p.fast[r] = 0;
    }
    if (!sampled) return;
    if (Fast) {
      const ops::candidate_selection cs =
          ops::select_candidates<Threads, capacity>(row, p.cfg, sel.m, s.path.candidates);
      if (cs.ok) {
        // (the zeroing above is ordered before these writes by the barriers of select_candidates)
        constexpr int per_thread = capacity / Threads;
        for (int j = arch::thread_rank() * per_thread; j < (arch::thread_rank() + 1) * per_thread && j < cs.n; ++j) {
          const uint64_t key = s.path.candidates.keys[j];
          const int id = ops::sort_key_id(key);
          p.kept[r * p.n_vocab + id] = 1;
          p.weight[r * p.n_vocab + id] = sel.weight(ops::sort_key_value(key));
        }
        if (arch::thread_rank() == 0) p.fast[r] = 1;
        return;
      }
      arch::sync_block();
    }
    ops::select_kept<Threads>(row, p.cfg, sel, s.path.search);
    ops::for_each_entry<Threads>(row, [&](int i, float l) {
      const bool k = sel.kept(l, i);
      p.kept[r * p.n_vocab + i] = k ? 1 : 0;
      p.weight[r * p.n_vocab + i] = k ? sel.weight(l) : 0;
    });
  }
};

struct probe_result {
  std::vector<uint8_t> kept;
  std::vector<uint64_t> weight;
  std::vector<int32_t> argmax, sampled, fast;
};

// Runs the probe on the block shape launch::sample would use for n_vocab.
template <bool Fast>
probe_result probe_kept(const std::vector<float>& h_logits, int n_rows, int n_vocab, const launch::sampling_params& sp,
                        const std::vector<int32_t>& h_recent = {}) {
  auto logits = to_device(h_logits);
  device_buffer<int32_t> recent;
  const bool penalize = !h_recent.empty() && launch::penalizes(sp);
  if (penalize) recent = to_device(h_recent);
  auto kept = poisoned<uint8_t>(size_t(n_rows) * size_t(n_vocab));
  auto weight = poisoned<uint64_t>(size_t(n_rows) * size_t(n_vocab));
  auto argmax = poisoned<int32_t>(size_t(n_rows));
  auto sampled = poisoned<int32_t>(size_t(n_rows));
  auto fast = poisoned<int32_t>(size_t(n_rows));
  launch::with_sample_shape(n_vocab, [&](auto shape) {
    using kernel = kept_probe_kernel<decltype(shape)::threads, decltype(shape)::capacity, Fast>;
    const typename kernel::params p{logits.data(),
                                    penalize ? recent.data() : nullptr,
                                    kept.data(),
                                    weight.data(),
                                    argmax.data(),
                                    sampled.data(),
                                    fast.data(),
                                    int64_t(n_rows),
                                    n_vocab,
                                    sp.repeat_last_n,
                                    launch::sample_config_of(sp, n_vocab)};
    Q35_REQUIRE_OK(launch::launch<kernel>(p));
  });
  return probe_result{to_host(kept), to_host(weight), to_host(argmax), to_host(sampled), to_host(fast)};
}

}  // namespace q35::test
