// How the MoE decode kernels run (threads per block), apart from the math.
#pragma once

#include "q35/core/config.hpp"

namespace q35::kernels {

template <int Threads>
struct moe_policy {
  static constexpr int threads = Threads;
  static_assert(Threads % warp_size == 0 && Threads <= 1024, "whole warps");
};

// Decode: 8 warps. A 35B-A3B layer at batch 1 (n_embd 2048, expert width 512, Q4_K: 8 lanes per
// gate/up row, 2 per down row) gives (8 + 1) x 16 gate/up blocks of 32 rows (one pass, each lane 2
// items = 18 16-byte loads in flight) and 128 down blocks of 16 rows whose 8 warps take the 8
// experts at once (the shared expert second on warp 0). An estimate from the grid and the loads in
// flight, not yet measured on a GPU.
using moe_policy_decode = moe_policy<256>;

}  // namespace q35::kernels
