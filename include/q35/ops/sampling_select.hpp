// ops::select_kept: one block finds the entries of a row that top-k, top-p and min-p keep, without
// sorting the row: the kept set is a prefix of the row's total order (larger logit first, lower id
// on ties), found by radix selection on the 50-bit sort key with count and mass histograms.
#pragma once

#include <cmath>
#include <cstdint>

#include "q35/arch/atomic.hpp"
#include "q35/arch/bits.hpp"
#include "q35/arch/shuffle.hpp"
#include "q35/arch/thread.hpp"
#include "q35/block/reduce.hpp"
#include "q35/core/config.hpp"
#include "q35/ops/sampling.hpp"
#include "q35/warp/reduce.hpp"
#include "q35/warp/scan.hpp"
#include "q35/warp/top_k.hpp"

namespace q35::ops {

// Radix selection: 11 key bits per pass (digits 11, 11, 11, 11, 6 of the 50-bit key).
inline constexpr int sample_digit_bits = 11;
inline constexpr int sample_bins = 1 << sample_digit_bits;
// Warp 0 scans the bins from the top, 64 consecutive digits per lane.
inline constexpr int sample_bins_per_lane = sample_bins / warp_size;

// The smallest fixed-point mass that reaches the fraction p of z: ceil(p z), within [1, z].
Q35_HOST_DEVICE uint64_t mass_target(float p, uint64_t z) {
  const double t = ceil(double(p) * double(z));
  const uint64_t u = t < 1.0 ? uint64_t(1) : uint64_t(t);
  return u > z ? z : u;
}

// A prefix of the row's order: the entries whose sort_key >= threshold.
struct sample_prefix {
  uint64_t threshold;
  uint32_t count;  // entries in it
  uint64_t mass;   // sum of fixed_weight(l - m) over it (when the search kept masses)
};

// What the prefix must reach: count >= count_target, or mass >= ceil(p * z) where z = 0 stands for
// the mass of the whole row.
struct prefix_goal {
  bool by_mass;
  uint32_t count_target;
  float p;
  uint64_t z;
};

struct sample_search_storage {
  uint32_t count[sample_bins];                 // [digit]: entries of the current prefix bin with this next digit
  uint64_t mass[sample_bins];                  // [digit]: their fixed-point weights
  uint64_t above_mass, bin_mass, mass_target;  // the crossing digit, as warp 0 found it
  uint32_t above_count, bin_count;
  int digit;
};

namespace detail {

// Warp 0: the digit (scanning from the largest) at which base + cumulative histogram first
// reaches the goal; the totals above that digit and in its bin go to the storage.
Q35_DEVICE void find_crossing_digit(sample_search_storage& s, const prefix_goal& g, uint32_t base_count,
                                    uint64_t base_mass, uint64_t target, bool first_pass) {
  const int lane = arch::lane_id();
  const int top = sample_bins - 1 - lane * sample_bins_per_lane;  // this lane's digits: top, top-1, ...
  uint32_t c = 0;
  uint64_t w = 0;
  for (int k = 0; k < sample_bins_per_lane; ++k) {
    c += s.count[top - k];
    w += s.mass[top - k];
  }
  const uint32_t c_incl = warp::inclusive_sum(c);
  const uint64_t w_incl = warp::inclusive_sum(w);
  if (g.by_mass && g.z == 0 && first_pass) target = mass_target(g.p, arch::shfl_idx(w_incl, warp_size - 1));
  const auto reached = [&](uint32_t cc, uint64_t ww) {
    return g.by_mass ? base_mass + ww >= target : base_count + cc >= g.count_target;
  };
  const uint32_t lanes = arch::ballot(reached(c_incl, w_incl));
  // Some lane always reaches the goal (the goal never exceeds the prefix bin's totals).
  if (lane != (lanes ? arch::lowest_set_bit(lanes) : warp_size - 1)) return;
  uint32_t cc = c_incl - c;
  uint64_t ww = w_incl - w;
  int digit = top - sample_bins_per_lane + 1;
  for (int k = 0; k < sample_bins_per_lane; ++k) {
    const int d = top - k;
    if (s.count[d] == 0) continue;
    digit = d;
    if (reached(cc + s.count[d], ww + s.mass[d])) break;
    cc += s.count[d];
    ww += s.mass[d];
  }
  s.digit = digit;
  s.above_count = cc;
  s.above_mass = ww;
  s.bin_count = s.count[digit];
  s.bin_mass = s.mass[digit];
  s.mass_target = target;
}

}  // namespace detail

// The shortest prefix of the row's order that reaches the goal. m: the row's largest logit (for
// the weights exp(l - m)); with_mass: keep masses (always for a mass goal). One pass over the row
// per 11-bit digit, stopping once the crossing bin holds one entry (or, for a count goal, ends
// exactly at the target). Every thread of the block calls it; it ends after a block barrier.
template <int Threads>
Q35_DEVICE sample_prefix find_prefix(const sample_row& row, float m, const prefix_goal& g, bool with_mass,
                                     sample_search_storage& s) {
  with_mass = with_mass || g.by_mass;
  uint64_t prefix = 0;  // the key bits above `shift` of the bin being refined
  int shift = sample_key_bits;
  uint32_t base_count = 0;  // entries before the bin (larger keys)
  uint64_t base_mass = 0;
  uint64_t target = g.by_mass && g.z != 0 ? mass_target(g.p, g.z) : 0;
  for (bool first = true;; first = false) {
    const int bits = shift < sample_digit_bits ? shift : sample_digit_bits;
    const int high = shift;
    shift -= bits;
    for (int b = arch::thread_rank(); b < sample_bins; b += Threads) {
      s.count[b] = 0u;
      s.mass[b] = 0u;
    }
    arch::sync_block();
    // histogram of the next digit over the entries in the bin: count, and sum of exp(l - m)
    for_each_entry<Threads>(row, [&](int i, float l) {
      const uint64_t key = sort_key(l, i);
      if ((key >> high) != prefix) return;
      const int d = int(key >> shift) & (sample_bins - 1);
      arch::atomic_add(s.count + d, 1u);
      if (with_mass) arch::atomic_add(s.mass + d, fixed_weight(l - m));
    });
    arch::sync_block();
    if (arch::warp_id() == 0) detail::find_crossing_digit(s, g, base_count, base_mass, target, first);
    arch::sync_block();
    base_count += s.above_count;
    base_mass += s.above_mass;
    target = s.mass_target;
    prefix = prefix << bits | uint64_t(s.digit);
    const uint32_t bin_count = s.bin_count;
    if (bin_count <= 1 || shift == 0 || (!g.by_mass && base_count + bin_count == g.count_target))
      return sample_prefix{prefix << shift, base_count + bin_count, base_mass + s.bin_mass};
    // (the next pass rewrites only count/mass, which no thread reads past the barrier above;
    //  s.digit and the totals are rewritten after two more barriers)
  }
}

// What a row's filters decided.
struct sample_selection {
  float m;             // largest logit, NaN counted as -inf
  int argmax;          // the greedy id (warp::precedes order: NaN last, lowest id on ties)
  uint64_t threshold;  // kept: sort_key >= threshold (top-k and top-p) ...
  bool use_min_p;      // ... and l - m >= log_min_p (min-p)
  float log_min_p;
  float inv_temperature;

  Q35_DEVICE bool kept(float l, int i) const {
    return sort_key(l, i) >= threshold && (!use_min_p || l - m >= log_min_p);
  }
  // Draw weight exp((l - m) / T) in units of 2^-40, as (l - m) * (1 / T).
  Q35_DEVICE uint64_t weight(float l) const { return fixed_weight((l - m) * inv_temperature); }
  // Whether the row is sampled (else argmax is the answer): not greedy and a finite maximum.
  Q35_DEVICE bool sampled(const sample_config& c) const { return !c.greedy && m > -INFINITY && m < INFINITY; }
};

// The row's greedy id and value (warp::precedes: larger first, lowest id on ties, NaN last).
template <int Threads>
Q35_DEVICE warp::arg_value row_argmax(const sample_row& row,
                                      typename block::reduce<warp::arg_value, Threads>::storage& s) {
  warp::arg_value best{NAN, warp::no_index};
  for_each_entry<Threads>(row, [&](int i, float l) {
    const warp::arg_value v{l, i};
    if (warp::precedes(v, best)) best = v;
  });
  return block::reduce<warp::arg_value, Threads>::all(best, s, warp::argmax_op{});
}

Q35_DEVICE sample_selection selection_of(const warp::arg_value& best, const sample_config& c) {
  return sample_selection{
      best.value != best.value ? -INFINITY : best.value, best.index, 0, c.use_min_p, c.log_min_p, c.inv_temperature};
}

// The general path: top-k (a count goal) and top-p (a mass goal over the top-k set at temperature 1)
// by radix selection over the row; min-p stays a per-entry test. For a sampled selection `sel`
// (from selection_of); every thread gets the same threshold.
template <int Threads>
Q35_DEVICE void select_kept(const sample_row& row, const sample_config& c, sample_selection& sel,
                            sample_search_storage& s) {
  const bool top_k = c.top_k < row.n_vocab, top_p = c.top_p < 1.0f;
  uint64_t z = 0;  // mass of the top-k set (0: the whole row)
  if (top_k) {
    const sample_prefix k = find_prefix<Threads>(row, sel.m, prefix_goal{false, uint32_t(c.top_k), 1.0f, 0}, top_p, s);
    sel.threshold = k.threshold;
    z = k.mass;
  }
  if (top_p) sel.threshold = find_prefix<Threads>(row, sel.m, prefix_goal{true, 0, c.top_p, z}, true, s).threshold;
}

}  // namespace q35::ops
