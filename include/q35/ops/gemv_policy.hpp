// How the weight-streaming GEMV engine runs (threads per block, load width), apart from the math
// (the weight format). Tests and benchmarks may pass their own policy.
#pragma once

#include "q35/quant/formats.hpp"

namespace q35::ops {

// Defaults for the Qwen3.5 decode shapes:
// - 4 warps per block, each on 32 / lanes rows (lanes per row from the row's item count): 4096 x
//   4096 Q4_K gives 2 rows per warp, 512 blocks. Blocks of 1 or 2 warps would spread the small
//   matrices over more SMs, but with them ptxas aims at a 64-register budget and spilled a few
//   bytes in Q8_0 8-token and swiglu expert instances (nvcc 13.0, sm_90); revisit with GPU timings.
//   No shared memory, so occupancy is set by registers.
// - 16-byte vector loads (the widest the GPU has), >= 6 per lane in flight on the integer path.
// Not yet measured on a GPU.
template <quant::weight_format Format>
struct gemv_policy {
  static constexpr int threads = 128;
  static constexpr int vector_bytes = 16;
};

}  // namespace q35::ops
