// How the MoE expert kernels run (threads, rows per warp, experts per step), apart from the math.
#pragma once

#include "q35/core/config.hpp"

namespace q35::kernels {

template <int Threads, int RowsPerWarp, int ExpertsPerStep>
struct moe_policy {
  static constexpr int threads = Threads;
  static constexpr int rows_per_warp = RowsPerWarp;        // weight rows one warp computes (gate+up: 2 each)
  static constexpr int experts_per_step = ExpertsPerStep;  // down: experts whose rows a warp loads at once
  static constexpr int rows_per_block = Threads / warp_size * RowsPerWarp;
  static_assert(Threads % warp_size == 0 && RowsPerWarp >= 1 && ExpertsPerStep >= 1, "whole warps, >= 1 row");
};

// Decode: 4 warps x 2 rows. A 35B-A3B layer at batch 1 gives (8 + 1) x 512 / 8 = 576 gate/up blocks
// and 2048 / 8 = 256 down blocks of 128 threads: 2-4 blocks per SM of an H200. Each warp keeps 4
// rows' unit loads in flight (gate+up of 2 rows; down: 4 experts of a row). An estimate from the
// grid and the loads in flight, not yet measured on a GPU.
using moe_policy_decode = moe_policy<128, 2, 4>;

}  // namespace q35::kernels
