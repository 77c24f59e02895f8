// block::exclusive_sum: a prefix sum of one value per thread over a block, in thread order; the caller
// places the warps' totals in shared memory (as block::reduce's storage).
#pragma once

#include <cstdint>

#include "q35/arch/thread.hpp"
#include "q35/core/config.hpp"
#include "q35/warp/scan.hpp"

namespace q35::block {

// Exclusive and total sums of `own` over the Threads threads of the block (every thread calls it).
// warp_total: Threads / 32 entries of shared memory. Its one barrier comes after the warp totals are
// written; warp_total may be rewritten only past another barrier.
template <int Threads>
Q35_DEVICE void exclusive_sum(uint64_t own, uint64_t* warp_total, uint64_t& before, uint64_t& total) {
  static_assert(Threads % warp_size == 0 && Threads <= max_block_threads, "Threads: a multiple of 32, <= 1024");
  const uint64_t incl = warp::inclusive_sum(own);
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

}  // namespace q35::block
