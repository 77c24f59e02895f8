// ops/sampling_penalty.hpp: llama.cpp's penalties over a row's window of recent ids, as a table in
// shared memory: a bitmap of the window's distinct ids, and each one's id and count.
//
// For each distinct id of the window (ids outside [0, n_vocab) and -1 are skipped), with c its count:
//   l = l > 0 ? l / repeat : l * repeat                       (repetition penalty)
//   l = l - (c * frequency + presence)                        (frequency and presence penalties)
// each operation rounded to float on its own (no fused multiply-add), as llama.cpp's CPU sampler
// computes it; l / repeat as l * (1 / repeat), 1 / repeat rounded once on the host.
//
// A pass over the row (visit_entries) skips the entries whose bit is set, then visits the table's
// entries with their penalised logits: the passes' hot loop only tests a bit, so the 1024-thread
// sampler keeps its 64 registers without spills. Table layout (16-byte aligned, after the kernel's
// static shared storage):
//   sample_penalty header | bitmap [words] | entries [min(window, n_vocab)]: per set bit in id order,
//   id << 13 | count | pair ranks [ceil(words / 2)] (u16, set bits before each pair of words; only
//   while the table is built) | the block scan's warp totals [Threads / 32] (u64)
#pragma once

#include <cstddef>
#include <cstdint>

#include "q35/arch/atomic.hpp"
#include "q35/arch/bits.hpp"
#include "q35/arch/rounded_math.hpp"
#include "q35/arch/thread.hpp"
#include "q35/block/scan.hpp"
#include "q35/core/config.hpp"

namespace q35::ops {

// Longest window (repeat_last_n) a penalty reads: the table takes 4 B per id of the window plus 1.25
// bits per id of the vocabulary (4,096 ids over 262,144: 56 KB of shared memory); counts are 13-bit.
inline constexpr int sample_max_window = 4096;
inline constexpr int sample_penalty_count_bits = 13;
static_assert(sample_max_window < (1 << sample_penalty_count_bits));

// The penalties' settings as the device sees them (launch::sample_config_of derives them).
struct sample_penalty_config {
  float repeat = 1.0f;      // 1: off
  float inv_repeat = 1.0f;  // 1 / repeat, rounded once
  float frequency = 0.0f;   // 0: off
  float presence = 0.0f;    // 0: off
  Q35_HOST_DEVICE bool any() const { return repeat != 1.0f || frequency != 0.0f || presence != 0.0f; }
};

// The repetition-penalised logit: l / p for l > 0 (as l * (1 / p)), else l * p.
Q35_HOST_DEVICE float penalized(float l, float p, float inv_p) {
  return l > 0.0f ? arch::mul_rn(l, inv_p) : arch::mul_rn(l, p);
}

// The whole chain for an id of the window occurring `count` times.
Q35_HOST_DEVICE float penalized(float l, const sample_penalty_config& c, int count) {
  float v = penalized(l, c.repeat, c.inv_repeat);
  if (c.frequency != 0.0f || c.presence != 0.0f)
    v = arch::sub_rn(v, arch::add_rn(arch::mul_rn(float(count), c.frequency), c.presence));
  return v;
}

// Words of the bitmap for n_vocab ids.
Q35_HOST_DEVICE int penalty_words(int n_vocab) { return (n_vocab + 31) / 32; }

// The table's parts, in 4-byte words after the header.
struct sample_penalty_layout {
  int words, slots, rank_words;
  Q35_HOST_DEVICE sample_penalty_layout(int n_vocab, int window) {
    words = penalty_words(n_vocab);
    slots = window < n_vocab ? window : n_vocab;
    rank_words = (words + 3) / 4;
  }
};

struct alignas(16) sample_penalty {
  sample_penalty_config cfg;
  int words;  // of the bitmap
  int n_ids;  // distinct ids of the window: entries [0, n_ids)

  // Shared bytes of the table of a window for a block of Threads threads (0 when no penalty is on).
  template <int Threads>
  Q35_HOST_DEVICE static size_t bytes(int n_vocab, int window, const sample_penalty_config& c) {
    if (!c.any() || window <= 0) return 0;
    return scan_offset(sample_penalty_layout(n_vocab, window)) + sizeof(uint64_t) * size_t(Threads / warp_size);
  }
  // Offset of the block scan's warp totals: after the bitmap, the entries and the ranks.
  Q35_HOST_DEVICE static size_t scan_offset(const sample_penalty_layout& l) {
    return (sizeof(sample_penalty) + 4 * size_t(l.words + l.slots + l.rank_words) + 7) & ~size_t(7);
  }

  Q35_DEVICE const uint32_t* bitmap() const { return reinterpret_cast<const uint32_t*>(this + 1); }
  Q35_DEVICE uint32_t* bitmap() { return reinterpret_cast<uint32_t*>(this + 1); }
  Q35_DEVICE const uint32_t* entries() const { return bitmap() + words; }

  // Whether id is in the window (its logit is then entry j's, for one j < n_ids).
  Q35_DEVICE bool has(int id) const { return bitmap()[id >> 5] >> (id & 31) & 1u; }
  Q35_DEVICE int id(int j) const { return int(entries()[j] >> sample_penalty_count_bits); }
  // Entry j's penalised logit, l_id its stored value.
  Q35_DEVICE float value(int j, float l_id) const {
    return penalized(l_id, cfg, int(entries()[j] & ((1u << sample_penalty_count_bits) - 1u)));
  }

  // Set bits before word w's (ranks: the pair ranks).
  Q35_DEVICE static int word_start(const uint32_t* bits, const uint16_t* ranks, int w) {
    const int r = int(ranks[w >> 1]);
    return (w & 1) ? r + arch::popcount(bits[w - 1]) : r;
  }
};

// Builds the table of recent[0, window) in `tail` (sample_penalty::bytes<Threads> of shared memory)
// with every thread of the block; ends with a block barrier. window <= sample_max_window (a count must
// fit its 13 bits; launch::validate checks it).
template <int Threads>
Q35_DEVICE const sample_penalty* build_penalty_table(void* tail, const int32_t* recent, int window, int n_vocab,
                                                     const sample_penalty_config& c) {
  auto* t = static_cast<sample_penalty*>(tail);
  const sample_penalty_layout l(n_vocab, window);
  uint32_t* bits = t->bitmap();
  uint32_t* entries = bits + l.words;
  auto* ranks = reinterpret_cast<uint16_t*>(entries + l.slots);
  const int tid = arch::thread_rank();
  for (int w = tid; w < l.words + l.slots; w += Threads) bits[w] = 0u;
  arch::sync_block();
  for (int i = tid; i < window; i += Threads) {
    const int32_t id = recent[i];
    if (id < 0 || id >= n_vocab) continue;
    // bits[id / 32] |= bit, as a compare-and-swap loop (duplicates set the bit once)
    const uint32_t bit = 1u << (id & 31);
    uint32_t old = 0u;
    while (!(old & bit)) {
      const uint32_t seen = arch::atomic_cas(bits + (id >> 5), old, old | bit);
      if (seen == old) break;
      old = seen;
    }
  }
  arch::sync_block();
  // pair ranks: thread tid sums the set bits of pairs [tid * per, (tid + 1) * per); a block scan places them
  const int pairs = (l.words + 1) / 2;
  const int per = (pairs + Threads - 1) / Threads;
  const int first = tid * per < pairs ? tid * per : pairs;
  const int last = first + per < pairs ? first + per : pairs;
  const int word_end = 2 * last < l.words ? 2 * last : l.words;
  uint64_t own = 0;
  for (int k = 2 * first; k < word_end; ++k) own += uint64_t(arch::popcount(bits[k]));
  uint64_t before = 0, total = 0;
  auto* warp_total = reinterpret_cast<uint64_t*>(static_cast<char*>(tail) + sample_penalty::scan_offset(l));
  block::exclusive_sum<Threads>(own, warp_total, before, total);
  if (tid == 0) t->cfg = c, t->words = l.words, t->n_ids = int(total);
  for (int k = 2 * first; k < word_end; ++k) {
    if (k % 2 == 0) ranks[k / 2] = uint16_t(before);  // <= window <= sample_max_window
    before += uint64_t(arch::popcount(bits[k]));
  }
  arch::sync_block();
  // counts: each id of the window adds 1 to its entry (its rank among the set bits)
  for (int i = tid; i < window; i += Threads) {
    const int32_t id = recent[i];
    if (id < 0 || id >= n_vocab) continue;
    const int j =
        sample_penalty::word_start(bits, ranks, id >> 5) + arch::popcount(bits[id >> 5] & ((1u << (id & 31)) - 1u));
    arch::atomic_add(entries + j, 1u);
  }
  arch::sync_block();
  // ids: the thread of word w tags the entries of its set bits
  for (int w = tid; w < l.words; w += Threads) {
    int j = sample_penalty::word_start(bits, ranks, w);
    for (uint32_t m = bits[w]; m; m &= m - 1u, ++j)
      entries[j] |= uint32_t(w * 32 + arch::lowest_set_bit(m)) << sample_penalty_count_bits;
  }
  arch::sync_block();
  return t;
}

}  // namespace q35::ops
