// How the MoE expert kernels run (threads, rows per warp), apart from the math.
#pragma once

#include "q35/core/config.hpp"

namespace q35::kernels {

template <int Threads, int RowsPerWarp>
struct moe_policy {
  static constexpr int threads = Threads;
  static constexpr int rows_per_warp = RowsPerWarp;  // weight rows one warp computes, one after another
  static constexpr int rows_per_block = Threads / warp_size * RowsPerWarp;
  static_assert(Threads % warp_size == 0 && RowsPerWarp >= 1, "whole warps, at least one row each");
};

// Decode: 4 warps x 2 rows. A 35B-A3B layer at batch 1 gives (8 + 1) x 512 / 8 = 576 gate/up blocks
// and 2048 / 8 = 256 down blocks of 128 threads: 2-4 blocks per SM of an H200. An estimate from
// the grid, not yet measured on a GPU.
using moe_policy_decode = moe_policy<128, 2>;

}  // namespace q35::kernels
