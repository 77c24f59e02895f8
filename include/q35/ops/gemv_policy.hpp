// How the weight-streaming GEMV kernels run (threads, rows per block, staged bytes), apart from the
// math (the weight format). Tests and benchmarks may pass their own policy.
#pragma once

#include <numeric>

#include "q35/core/config.hpp"
#include "q35/quant/formats.hpp"

namespace q35::ops {

// Defaults for the Qwen3.5 decode shapes (4096 -> 12288 / 8192 / 248320, 12288 -> 4096):
// - 128 threads = 4 warps, 2 rows per warp, 8 rows per block: 12288 rows give 1536 blocks and even
//   248320 rows stay far under the grid limit; x (16-64 KB) is reused from L1 by the 2 rows a warp holds.
// - ~2 KB of each row staged per step (16 KB per block, 33 KB for gate+up): with several blocks
//   resident per SM that keeps >= 32 KB of weight loads in flight per SM, above the ~22 KB per SM
//   that 4.8 TB/s x ~600 ns of HBM latency needs on an H200 (132 SMs). Not yet measured on a GPU.
// - 16-byte vector loads (the widest the GPU has).
template <quant::weight_format Format>
struct gemv_policy {
  static constexpr int threads = 128;
  static constexpr int rows_per_block = 8;
  static constexpr int vector_bytes = 16;
  static constexpr int segment_budget_bytes = 2048;
};

// Blocks per staged segment of a row: a whole number of 16-byte-aligned groups of blocks (so a row
// that starts aligned keeps every segment aligned) and of 16-element units, within the budget.
template <quant::weight_format Format, class Policy>
inline constexpr int segment_blocks = [] {
  const int align_group = std::lcm(Format::block_bytes, Policy::vector_bytes) / Format::block_bytes;
  const int group = std::lcm(align_group, Format::blocks_per_unit);
  const int n = Policy::segment_budget_bytes / Format::block_bytes / group * group;
  return n > group ? n : group;
}();

}  // namespace q35::ops
