// ops::draw_kept: one block draws an id from the kept entries of a row with probability
// proportional to exp((l - m) / T), from one 64-bit uniform number, exactly (integer weights).
#pragma once

#include <cstdint>

#include "q35/arch/thread.hpp"
#include "q35/core/config.hpp"
#include "q35/ops/philox.hpp"
#include "q35/ops/sampling.hpp"
#include "q35/ops/sampling_select.hpp"
#include "q35/warp/scan.hpp"

namespace q35::ops {

template <int Threads>
struct sample_draw_storage {
  uint64_t warp_total[Threads / warp_size];  // [warp]: kept weight of the warp's entries
};

// The 64 random bits of `row` in call `call` of the stream `seed` (Philox4x32-10 of the counter
// (call, row) under the key seed).
Q35_DEVICE uint64_t sample_random_bits(uint32_t seed_lo, uint32_t seed_hi, uint64_t call, uint64_t row) {
  const philox_words r = philox4x32(
      philox_words{{uint32_t(call), uint32_t(call >> 32), uint32_t(row), uint32_t(row >> 32)}}, seed_lo, seed_hi);
  return uint64_t(r.w[0]) | uint64_t(r.w[1]) << 32;
}

// The entries are laid end to end in the thread-major order of for_each_entry (thread 0's entries,
// then thread 1's, ...), each as long as its integer weight; target = floor(bits * Z / 2^64) in
// [0, Z) picks the entry under it. Returns that id on the one thread that owns it, -1 elsewhere.
template <int Threads>
Q35_DEVICE int draw_kept(const sample_row& row, const sample_selection& sel, uint64_t bits,
                         sample_draw_storage<Threads>& s) {
  uint64_t own = 0;  // kept weight of this thread's entries
  for_each_entry<Threads>(row, [&](int i, float l) {
    if (sel.kept(l, i)) own += sel.weight(l);
  });
  // before = kept weight of the threads ranked below this one; z = of all
  const uint64_t incl = warp::inclusive_sum(own);
  if (arch::lane_id() == warp_size - 1) s.warp_total[arch::warp_id()] = incl;
  arch::sync_block();
  uint64_t before = incl - own, z = 0;
  Q35_UNROLL
  for (int w = 0; w < Threads / warp_size; ++w) {
    if (w < arch::warp_id()) before += s.warp_total[w];
    z += s.warp_total[w];
  }
  // z >= 2^40: the largest entry is always kept, with weight exp(0)
  const uint64_t target = mul_hi_64(bits, z);
  if (own == 0 || target < before || target - before >= own) return -1;
  uint64_t acc = before;
  int id = -1;
  for_each_entry<Threads>(row, [&](int i, float l) {
    if (id >= 0 || !sel.kept(l, i)) return;
    acc += sel.weight(l);
    if (target < acc) id = i;
  });
  return id;
}

}  // namespace q35::ops
