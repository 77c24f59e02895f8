// ops::select_candidates: the fast path of a sampled row. One pass histograms the entries within
// sample_span nats of the maximum; the smallest window that must hold the kept set (top-k's count,
// top-p's mass, or min-p's bound) is compacted into shared memory, sorted there by the row's key,
// and top-k, top-p, min-p and the draw become scans over that short sorted list. When no filter
// bounds the kept set, or the window holds more than Capacity entries, the caller takes the
// general path (sampling_select.hpp, sampling_draw.hpp) instead.
#pragma once

#include <cstdint>

#include "q35/arch/atomic.hpp"
#include "q35/arch/bits.hpp"
#include "q35/arch/shuffle.hpp"
#include "q35/arch/thread.hpp"
#include "q35/block/scan.hpp"
#include "q35/core/config.hpp"
#include "q35/core/numeric.hpp"
#include "q35/ops/philox.hpp"
#include "q35/ops/sampling.hpp"
#include "q35/ops/sampling_select.hpp"
#include "q35/warp/scan.hpp"

namespace q35::ops {

// The window histogram: bins of 1/32 nat over d = m - l in [0, 16) (entries further down cost no
// atomic; the 40th-largest logit of an LLM row is typically 5-10 nats below the largest).
inline constexpr int sample_window_bins = 512;
inline constexpr float sample_window_bins_per_nat = 32.0f;
inline constexpr float sample_span = float(sample_window_bins) / sample_window_bins_per_nat;

// Bin of d = m - l (>= 0), or sample_window_bins when d >= sample_span, NaN or +inf.
Q35_DEVICE int window_bin(float d) {
  return d < sample_span ? int(d * sample_window_bins_per_nat) : sample_window_bins;
}

// The value of an order key (inverse of order_key; NaN came in as -inf).
Q35_DEVICE float key_value(uint32_t k) { return bits_float((k & 0x80000000u) ? (k & 0x7fffffffu) : ~k); }
Q35_DEVICE float sort_key_value(uint64_t key) { return key_value(uint32_t(key >> sample_id_bits)); }
Q35_DEVICE int sort_key_id(uint64_t key) { return sample_max_vocab - 1 - int(key & (sample_max_vocab - 1)); }

template <int Threads, int Capacity>
struct sample_candidate_storage {
  static_assert((Capacity & (Capacity - 1)) == 0 && Capacity % Threads == 0, "Capacity: a power of two, >= Threads");
  uint64_t keys[Capacity];                   // sorted candidates (sort_key, larger first), then 0
  uint32_t count[sample_window_bins];        // [bin]: entries with window_bin(m - l) == bin
  uint64_t mass[sample_window_bins];         // [bin]: their fixed_weight(l - m), for a top-p bound
  uint64_t warp_total[Threads / warp_size];  // block scans
  uint64_t row_mass;                         // sum of fixed_weight(l - m) over the whole row
  int n_bins;                                // the window: bins [0, n_bins)
  int n_candidates;                          // entries in it (may exceed Capacity: no fast path)
  int n_filled;                              // compaction cursor
  int cut;                                   // a crossing found by a scan
};

namespace detail {

// Warp 0: the window. Bins [0, b) hold the kept set when b >= b_k (their count reaches k), when
// b >= b_p (their mass reaches top-p's target, for top-k off) or when b > bin of -log(min_p).
// top-p over a top-k set needs the whole top-k set (its mass is top-p's reference): then b_k.
template <int Threads, int Capacity>
Q35_DEVICE void choose_window(sample_candidate_storage<Threads, Capacity>& s, const sample_config& c, int n_vocab) {
  constexpr int per_lane = sample_window_bins / warp_size;
  const int lane = arch::lane_id();
  const bool top_k = c.top_k < n_vocab, top_p = c.top_p < 1.0f;
  const uint64_t target = top_p && !top_k ? mass_target(c.top_p, s.row_mass) : 0;
  uint32_t cnt = 0;
  uint64_t w = 0;
  for (int k = 0; k < per_lane; ++k) {
    cnt += s.count[lane * per_lane + k];
    w += s.mass[lane * per_lane + k];
  }
  const uint32_t cnt_incl = warp::inclusive_sum(cnt);
  const uint64_t w_incl = warp::inclusive_sum(w);
  // first bin (walking up) whose inclusive count / mass reaches the goal, + 1; none: no bound
  int b_k = sample_window_bins + 1, b_p = sample_window_bins + 1;
  const uint32_t k_lanes = arch::ballot(top_k && cnt_incl >= uint32_t(c.top_k));
  const uint32_t p_lanes = arch::ballot(top_p && !top_k && w_incl >= target);
  uint32_t cc = cnt_incl - cnt;
  uint64_t ww = w_incl - w;
  int found_k = sample_window_bins + 1, found_p = sample_window_bins + 1;
  for (int k = 0; k < per_lane; ++k) {
    const int b = lane * per_lane + k;
    cc += s.count[b];
    ww += s.mass[b];
    if (found_k > sample_window_bins && k_lanes && lane == arch::lowest_set_bit(k_lanes) && cc >= uint32_t(c.top_k))
      found_k = b + 1;
    if (found_p > sample_window_bins && p_lanes && lane == arch::lowest_set_bit(p_lanes) && ww >= target)
      found_p = b + 1;
  }
  if (k_lanes) b_k = arch::shfl_idx(found_k, arch::lowest_set_bit(k_lanes));
  if (p_lanes) b_p = arch::shfl_idx(found_p, arch::lowest_set_bit(p_lanes));
  // min-p keeps l - m >= log(min_p), i.e. d <= -log(min_p): bins up to window_bin(-log(min_p))
  const int b_m = c.use_min_p ? window_bin(-c.log_min_p) + 1 : sample_window_bins + 1;
  int b = top_p && top_k ? b_k : (b_k < b_p ? b_k : b_p);
  if (!(top_p && top_k) && b_m < b) b = b_m;
  // entries in bins [0, b)
  uint32_t n = 0;
  for (int k = 0; k < per_lane; ++k)
    if (lane * per_lane + k < b) n += s.count[lane * per_lane + k];
  n = warp::reduce_sum(n);
  if (lane == 0) {
    // no bound within the span: the whole row (window_bin's "beyond" bin included), if it fits
    s.n_bins = b > sample_window_bins ? sample_window_bins + 1 : b;
    s.n_candidates = b > sample_window_bins ? n_vocab : int(n);
    s.n_filled = 0;
    s.cut = 0;
  }
}

}  // namespace detail

// The kept set as a prefix of the sorted candidate list.
struct candidate_selection {
  bool ok;  // false: take the general path
  int n;    // kept: keys[0, n)
};

// Pass over the row: window histogram (and the row's mass when top-p has no top-k set); choose the
// window; compact and sort it; cut it by top-k, top-p and min-p. Every thread calls it with the
// same m (finite) and gets the same result; ends with a barrier.
template <int Threads, int Capacity>
Q35_DEVICE candidate_selection select_candidates(const sample_row& row, const sample_config& c, float m,
                                                 sample_candidate_storage<Threads, Capacity>& s) {
  const bool top_k = c.top_k < row.n_vocab, top_p = c.top_p < 1.0f;
  if (!top_k && !top_p && !c.use_min_p) return candidate_selection{false, 0};  // the whole row is kept
  const bool p_bound = top_p && !top_k;  // top-p over the whole row: bin masses and the row's mass
  for (int b = arch::thread_rank(); b < sample_window_bins; b += Threads) {
    s.count[b] = 0u;
    s.mass[b] = 0u;
  }
  arch::sync_block();
  uint64_t own_mass = 0;
  for_each_entry<Threads>(row, [&](int, float l) {
    const int b = window_bin(m - l);
    if (p_bound) {
      const uint64_t w = fixed_weight(l - m);
      own_mass += w;
      if (b < sample_window_bins) arch::atomic_add(s.mass + b, w);
    }
    if (b < sample_window_bins) arch::atomic_add(s.count + b, 1u);
  });
  if (p_bound) {
    uint64_t before = 0, total = 0;
    block::exclusive_sum<Threads>(own_mass, s.warp_total, before, total);
    if (arch::thread_rank() == 0) s.row_mass = total;
  }
  arch::sync_block();
  if (arch::warp_id() == 0) detail::choose_window(s, c, row.n_vocab);
  arch::sync_block();
  const int n_bins = s.n_bins, n_cand = s.n_candidates;
  if (n_cand > Capacity) return candidate_selection{false, 0};

  // Compaction: one slot per entry in bins [0, n_bins), a warp-aggregated cursor (the order of
  // arrival does not matter: the list is sorted next). visit_entries keeps the warp converged.
  visit_entries<Threads>(row, [&](int i, float l, bool valid) {
    const bool take = valid && window_bin(m - l) < n_bins;
    const uint32_t lanes = arch::ballot(take);
    int base = 0;
    if (arch::lane_id() == 0 && lanes) base = arch::atomic_add(&s.n_filled, arch::popcount(lanes));
    base = arch::shfl_idx(base, 0);
    if (take) s.keys[base + arch::popcount(lanes & ((1u << arch::lane_id()) - 1u))] = sort_key(l, i);
  });
  int size = 1;  // the sort's width: the next power of two >= n_cand
  while (size < n_cand) size *= 2;
  // n = min(top-k, top-p prefix, min-p prefix), lowered by atomic_min below
  const int n_k = top_k && c.top_k < n_cand ? c.top_k : n_cand;
  if (arch::thread_rank() == 0) s.cut = n_k;
  for (int j = n_cand + arch::thread_rank(); j < size; j += Threads) s.keys[j] = 0;  // below every real key
  arch::sync_block();
  // Bitonic sort of keys[0, size), larger first.
  for (int k = 2; k <= size; k *= 2) {
    for (int j = k / 2; j > 0; j /= 2) {
      for (int i = arch::thread_rank(); i < size; i += Threads) {
        const int partner = i ^ j;
        if (partner <= i) continue;
        const uint64_t a = s.keys[i], b = s.keys[partner];
        const bool larger_first = (i & k) == 0;
        if (larger_first ? a < b : a > b) {
          s.keys[i] = b;
          s.keys[partner] = a;
        }
      }
      arch::sync_block();
    }
  }

  // The cut: n = min(top-k, top-p prefix, min-p prefix). Thread t holds list items [t E, t E + E).
  constexpr int per_thread = Capacity / Threads;
  const int first = arch::thread_rank() * per_thread;
  int n = n_k;
  if (c.use_min_p) {
    // min-p: the first item with l - m < log(min_p) ends the list (one thread sees the step)
    for (int j = first; j < first + per_thread && j < n; ++j) {
      const bool in = sort_key_value(s.keys[j]) - m >= c.log_min_p;
      if (!in && (j == 0 || sort_key_value(s.keys[j - 1]) - m >= c.log_min_p)) arch::atomic_min(&s.cut, j);
    }
    arch::sync_block();
    n = s.cut;
  }
  if (top_p) {
    // top-p: the first item whose cumulative mass reaches ceil(p z), z = mass of the top-k set
    // (the list's first k items) or of the row
    uint64_t own = 0;
    const int k_end = n_k;
    for (int j = first; j < first + per_thread && j < k_end; ++j) own += fixed_weight(sort_key_value(s.keys[j]) - m);
    uint64_t before = 0, total = 0;
    block::exclusive_sum<Threads>(own, s.warp_total, before, total);
    const uint64_t target = mass_target(c.top_p, top_k ? total : s.row_mass);
    if (before < target && target <= before + own) {
      uint64_t acc = before;
      for (int j = first; j < first + per_thread && j < k_end; ++j) {
        acc += fixed_weight(sort_key_value(s.keys[j]) - m);
        if (acc >= target) {
          arch::atomic_min(&s.cut, j + 1);
          break;
        }
      }
    }
    arch::sync_block();
    n = s.cut;
  }
  return candidate_selection{true, n};
}

// Draws from keys[0, n) with weights exp((l - m) / T), in list order, from 64 random bits. Returns
// the id on the one thread that finds it, -1 elsewhere.
template <int Threads, int Capacity>
Q35_DEVICE int draw_candidates(const sample_config& c, float m, int n, uint64_t bits,
                               sample_candidate_storage<Threads, Capacity>& s) {
  constexpr int per_thread = Capacity / Threads;
  const int first = arch::thread_rank() * per_thread;
  const auto weight = [&](int j) { return fixed_weight((sort_key_value(s.keys[j]) - m) * c.inv_temperature); };
  uint64_t own = 0;
  for (int j = first; j < first + per_thread && j < n; ++j) own += weight(j);
  uint64_t before = 0, total = 0;
  block::exclusive_sum<Threads>(own, s.warp_total, before, total);
  const uint64_t target = mul_hi_64(bits, total);  // total >= 2^40: keys[0] is the maximum, weight 1
  if (own == 0 || target < before || target - before >= own) return -1;
  uint64_t acc = before;
  for (int j = first; j < first + per_thread && j < n; ++j) {
    acc += weight(j);
    if (target < acc) return sort_key_id(s.keys[j]);
  }
  return -1;
}

}  // namespace q35::ops
