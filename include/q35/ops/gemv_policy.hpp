// How the weight-streaming GEMV engine runs (threads per block, load width), apart from the math
// (the weight format). Tests and benchmarks may pass their own policy.
#pragma once

#include "q35/quant/formats.hpp"

namespace q35::ops {

// Defaults for the Qwen3.5 decode shapes:
// - 128 threads = 4 warps per block, each warp on 32 / lanes rows (lanes per row from the row's
//   item count): 4096 -> 4096 Q4_K gives 2 rows per warp, 512 blocks; 2048-column expert rows give
//   4 rows per warp. No shared memory, so occupancy is set by registers alone.
// - 16-byte vector loads (the widest the GPU has), >= 9 per lane in flight on the integer path.
// Not yet measured on a GPU.
template <quant::weight_format Format>
struct gemv_policy {
  static constexpr int threads = 128;
  static constexpr int vector_bytes = 16;
};

}  // namespace q35::ops
