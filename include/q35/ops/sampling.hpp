// ops/sampling.hpp: the pieces every sampling step shares: the filter settings as the device sees
// them, the total order of a row's entries (a 50-bit key), fixed-point weights, the repetition
// penalty through a shared bitmap, and the block's walk over a row.
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
  float inv_temperature = 1.0f;  // 1 / temperature, rounded once (the device multiplies: no division)
  float penalty = 1.0f;          // repeat penalty (1: off)
  float inv_penalty = 1.0f;      // 1 / penalty, rounded once
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

// The penalised logit: l / p for l > 0 (as l * (1 / p), 1 / p rounded to float once), else l * p
// (llama.cpp's repetition penalty).
Q35_HOST_DEVICE float penalized(float l, float p, float inv_p) { return l > 0.0f ? l * inv_p : l * p; }

// One row's logits as the filters see them: the stored value, penalised for the ids set in the
// shared bitmap (bit i % 32 of word i / 32), when there is one.
struct sample_row {
  const float* logits;              // [n_vocab]
  const uint32_t* maybe_penalized;  // [ceil(n_vocab / 32)] shared bitmap, or null
  int n_vocab;
  float penalty, inv_penalty;

  // Entry i whose stored value is l.
  Q35_DEVICE float value(int i, float l) const {
    if (maybe_penalized && (maybe_penalized[i >> 5] >> (i & 31) & 1u)) return penalized(l, penalty, inv_penalty);
    return l;
  }
  Q35_DEVICE float logit(int i) const { return value(i, logits[i]); }
};

// 16-byte groups of a row each thread loads before using any: 4 x 16 B x 1024 threads = 64 KB in
// flight per block, enough to stream a row from L2 at a few hundred GB/s with one block.
inline constexpr int sample_groups_in_flight = 4;

// Visits every entry of the row, f(i, l, valid), with the same number of calls on every thread
// (f may use warp collectives; entries with valid = false are padding, i and l meaningless).
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
      Q35_UNROLL
      for (int e = 0; e < 4; ++e) {
        if (e >= width) break;
        const int i = g * width + e;
        const bool valid = g < n_groups;
        f(i, valid ? row.value(i, v[u][e]) : 0.0f, valid);
      }
    }
  }
  if (n_groups * width < row.n_vocab) {  // the same on every thread: < 4 entries left
    const int i = n_groups * width + t;
    const bool valid = i < row.n_vocab;
    f(i, valid ? row.logit(i) : 0.0f, valid);
  }
}

// Visits the entries a thread owns, f(i, l), in visit_entries' order.
template <int Threads, class F>
Q35_DEVICE void for_each_entry(const sample_row& row, F&& f) {
  visit_entries<Threads>(row, [&](int i, float l, bool valid) {
    if (valid) f(i, l);
  });
}

// Words of the penalty bitmap for n_vocab ids.
Q35_HOST_DEVICE int penalty_words(int n_vocab) { return (n_vocab + 31) / 32; }

// Builds the bitmap of the distinct ids in recent[0, window) (ids outside [0, n_vocab) and -1 are
// skipped). Ends with a block barrier.
template <int Threads>
Q35_DEVICE void build_penalty_bitmap(uint32_t* bitmap, const int32_t* recent, int window, int n_vocab) {
  const int words = penalty_words(n_vocab);
  for (int w = arch::thread_rank(); w < words; w += Threads) bitmap[w] = 0u;
  arch::sync_block();
  for (int t = arch::thread_rank(); t < window; t += Threads) {
    const int32_t id = recent[t];
    if (id < 0 || id >= n_vocab) continue;
    // bitmap[id / 32] |= bit, as a compare-and-swap loop (duplicates set the bit once)
    const uint32_t bit = 1u << (id & 31);
    uint32_t old = 0u;
    while (!(old & bit)) {
      const uint32_t seen = arch::atomic_cas(bitmap + (id >> 5), old, old | bit);
      if (seen == old) break;
      old = seen;
    }
  }
  arch::sync_block();
}

}  // namespace q35::ops
