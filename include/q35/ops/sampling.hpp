// ops/sampling.hpp: the pieces every sampling step shares: the filter settings as the device sees
// them, the total order of a row's entries (a 50-bit key), fixed-point weights, the row as the
// filters see it (penalised through the shared table of sampling_penalty.hpp), and the block's walk
// over a row.
#pragma once

#include <cmath>
#include <cstdint>

#include "q35/arch/atomic.hpp"
#include "q35/arch/math.hpp"
#include "q35/arch/thread.hpp"
#include "q35/arch/vector_load.hpp"
#include "q35/core/config.hpp"
#include "q35/core/numeric.hpp"
#include "q35/core/vec.hpp"
#include "q35/ops/sampling_penalty.hpp"

namespace q35::ops {

// Largest vocabulary: ids fit in sample_id_bits bits of the key (Qwen3.5 has 248,320).
inline constexpr int sample_id_bits = 18;
inline constexpr int sample_max_vocab = 1 << sample_id_bits;
// Key = 32-bit order of the value, then the inverted id: unique per entry of a row.
inline constexpr int sample_key_bits = 32 + sample_id_bits;
// Weights exp(x) <= 1 are integers in units of 2^-40: sums over a row (< 2^58) are exact, so their
// order of summation cannot change a result. Weights below 2^-40 (x < -27.7) count as 0.
inline constexpr int sample_fixed_bits = 40;
inline constexpr float sample_fixed_one = float(uint64_t(1) << sample_fixed_bits);

// The sampling settings of one launch, as derived on the host from launch::sampling_params.
struct sample_config {
  bool greedy = true;      // temperature <= 0: argmax
  int top_k = 0;           // entries kept by top-k (n_vocab when off)
  float top_p = 1.0f;      // 1: off
  bool use_min_p = false;  // min_p > 0
  float log_min_p = 0.0f;  // log(min_p), rounded once on the host
  float temperature = 1.0f;
  float inv_temperature = 1.0f;   // 1 / temperature, rounded once (the device multiplies: no division)
  sample_penalty_config penalty;  // repetition, frequency and presence penalties
  uint32_t seed_lo = 0, seed_hi = 0;
};

// Order key of a value: a larger value has a larger key; NaN counts as -inf and -0 as +0.
Q35_HOST_DEVICE uint32_t order_key(float v) {
  if (v != v) v = -INFINITY;
  if (v == 0.0f) v = 0.0f;
  const uint32_t b = float_bits(v);
  return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}

// Position of entry `id` in the row's total order: larger value first, then lower id.
Q35_HOST_DEVICE uint64_t sort_key(float v, int id) {
  return uint64_t(order_key(v)) << sample_id_bits | uint64_t(sample_max_vocab - 1 - id);
}

// floor(exp(x) * 2^40) for x <= 0 (NaN and -inf give 0).
Q35_DEVICE uint64_t fixed_weight(float x) {
  const float e = arch::fast_exp(x);
  return e > 0.0f ? uint64_t(e * sample_fixed_one) : uint64_t(0);
}

// One row's logits as the filters see them: the stored values, and for the ids of the shared penalty
// table, when there is one, their penalised values instead.
struct sample_row {
  const float* logits;                  // [n_vocab]
  const sample_penalty* maybe_penalty;  // shared table (build_penalty_table), or null
  int n_vocab;

  // Whether entry i's value comes from the penalty table (visit_entries visits it there).
  Q35_DEVICE bool in_table(int i) const { return maybe_penalty && maybe_penalty->has(i); }
};

// 16-byte groups of a row each thread loads before using any: 4 x 16 B x 1024 threads = 64 KB in
// flight per block, enough to stream a row from L2 at a few hundred GB/s with one block.
inline constexpr int sample_groups_in_flight = 4;

// Visits every entry of the row, f(i, l, valid), with the same number of calls on every thread
// (f may use warp collectives; entries with valid = false are padding, i and l meaningless). Entries
// of the penalty table are skipped in the pass over the row and visited after it with their penalised
// values.
// Thread t owns groups of 4 entries g = t + Threads * j (16-byte loads when the row is 16-byte
// aligned; single entries otherwise), then the last n_vocab % 4 entries; each thread sees its
// entries in one fixed order, the order in which the draw accumulates weights.
template <int Threads, class F>
Q35_DEVICE void visit_entries(const sample_row& row, F&& f) {
  constexpr int u_max = sample_groups_in_flight;
  const int t = arch::thread_rank();
  const bool vector = (reinterpret_cast<uintptr_t>(row.logits) & 15u) == 0;
  const int width = vector ? 4 : 1;  // entries per group
  const int n_groups = vector ? row.n_vocab >> 2 : row.n_vocab;
  const uint32_t* bits = row.maybe_penalty ? row.maybe_penalty->bitmap() : nullptr;
  for (int base = 0; base < n_groups; base += u_max * Threads) {
    vec<float, 4> v[u_max] = {};
    Q35_UNROLL
    for (int u = 0; u < u_max; ++u) {
      const int g = base + u * Threads + t;
      if (g >= n_groups) continue;
      if (vector) {
        v[u] = arch::load_16(row.logits + 4 * int64_t(g));
      } else {
        v[u][0] = row.logits[g];
      }
    }
    Q35_UNROLL
    for (int u = 0; u < u_max; ++u) {
      if (base + u * Threads >= n_groups) break;  // the same on every thread
      const int g = base + u * Threads + t;
      // the group's bits of the penalty table (one word holds them: a group is 1 or 4 entries from a
      // multiple of 4): its entries there are visited after the row
      const uint32_t in_table = bits && g < n_groups ? bits[(g * width) >> 5] >> ((g * width) & 31) : 0u;
      Q35_UNROLL
      for (int e = 0; e < 4; ++e) {
        if (e >= width) break;
        const int i = g * width + e;
        const bool valid = g < n_groups && !(in_table >> e & 1u);
        f(i, valid ? v[u][e] : 0.0f, valid);
      }
    }
  }
  if (n_groups * width < row.n_vocab) {  // the same on every thread: < 4 entries left
    const int i = n_groups * width + t;
    const bool valid = i < row.n_vocab && !row.in_table(i);
    f(i, valid ? row.logits[i] : 0.0f, valid);
  }
  if (row.maybe_penalty) {  // the penalised entries: thread t takes entries t, t + Threads, ...
    const sample_penalty& p = *row.maybe_penalty;
    for (int j0 = 0; j0 < p.n_ids; j0 += Threads) {  // the same on every thread
      const int j = j0 + t;
      const bool valid = j < p.n_ids;
      const int i = valid ? p.id(j) : 0;
      f(i, valid ? p.value(j, row.logits[i]) : 0.0f, valid);
    }
  }
}

// Visits the entries a thread owns, f(i, l), in visit_entries' order.
template <int Threads, class F>
Q35_DEVICE void for_each_entry(const sample_row& row, F&& f) {
  visit_entries<Threads>(row, [&](int i, float l, bool valid) {
    if (valid) f(i, l);
  });
}

}  // namespace q35::ops
