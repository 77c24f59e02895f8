// ops/sampling_scan.hpp: the sampler's warp and block prefix sums, and bit counting.
#pragma once

#include <cstdint>

#include "q35/arch/shuffle.hpp"
#include "q35/arch/thread.hpp"
#include "q35/core/config.hpp"

namespace q35::ops {

Q35_DEVICE int popcount(uint32_t x) {
#if Q35_DEVICE_PASS
  return __popc(x);
#else
  return __builtin_popcount(x);
#endif
}

Q35_DEVICE int lowest_set_bit(uint32_t x) {  // x != 0
#if Q35_DEVICE_PASS
  return __ffs(int(x)) - 1;
#else
  return __builtin_ctz(x);
#endif
}

// Sum of v over lanes 0..lane (shfl_up ladder).
template <class T>
Q35_DEVICE T warp_inclusive_sum(T v) {
  const int lane = arch::lane_id();
  Q35_UNROLL
  for (int d = 1; d < warp_size; d *= 2) {
    const T u = arch::shfl_up(v, d);
    if (lane >= d) v += u;
  }
  return v;
}

// Exclusive and total sums of `own` over the threads of the block, in thread order. Ends with a
// barrier after which warp_total may be rewritten only past another barrier.
template <int Threads>
Q35_DEVICE void block_exclusive_sum(uint64_t own, uint64_t* warp_total, uint64_t& before, uint64_t& total) {
  const uint64_t incl = warp_inclusive_sum(own);
  if (arch::lane_id() == warp_size - 1) warp_total[arch::warp_id()] = incl;
  arch::sync_block();
  before = incl - own;
  total = 0;
  Q35_UNROLL
  for (int w = 0; w < Threads / warp_size; ++w) {
    if (w < arch::warp_id()) before += warp_total[w];
    total += warp_total[w];
  }
}

}  // namespace q35::ops
