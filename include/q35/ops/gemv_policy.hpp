// How the weight-streaming GEMV engine runs (threads per block, load width), apart from the math
// (the weight format). Tests and benchmarks may pass their own policy.
#pragma once

#include "q35/quant/formats.hpp"

namespace q35::ops {

// Defaults for the Qwen3.5 decode shapes:
// - one warp per block, on 32 / lanes rows (lanes per row from the row's item count): the small
//   matrices still spread over many SMs (Q6_K 1024 x 4096, 2 lanes per row: 64 blocks; 4 warps per
//   block gave 16), and with ~48-96 registers at most 20-32 warps fit an SM either way. (With 2
//   warps per block ptxas put 8 bytes of the Q8_0 swiglu expert instance on the stack.) No shared
//   memory, so occupancy is set by registers and the 32-blocks-per-SM limit.
// - 16-byte vector loads (the widest the GPU has), >= 6 per lane in flight on the integer path.
// Not yet measured on a GPU.
template <quant::weight_format Format>
struct gemv_policy {
  static constexpr int threads = 32;
  static constexpr int vector_bytes = 16;
};

}  // namespace q35::ops
