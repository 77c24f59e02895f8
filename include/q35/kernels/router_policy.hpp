// How the router kernel runs (threads, tokens and rows per block, loads in flight, warps per row),
// and the choice between the decode and the batch policy by token count.
#pragma once

#include <cstdint>

#include "q35/core/config.hpp"

namespace q35::kernels {

template <int Threads, int TokensPerBlock, int RowsPerBlock, int Unroll, int SplitK>
struct router_policy {
  static constexpr int threads = Threads;
  static constexpr int tokens_per_block = TokensPerBlock;  // one token tile
  static constexpr int rows_per_block = RowsPerBlock;      // weight rows (experts + shared gate) per block
  static constexpr int unroll = Unroll;                    // 16-byte weight loads in flight per lane
  static constexpr int split_k = SplitK;                   // warps that share one row (its columns)
  static_assert(Threads % warp_size == 0 && (Threads / warp_size) % SplitK == 0, "split_k divides the warps");
  static_assert(RowsPerBlock % (Threads / warp_size / SplitK) == 0, "rows_per_block: a multiple of the warp groups");
  static_assert(TokensPerBlock <= Threads / warp_size && TokensPerBlock <= warp_size,
                "one warp per token of a tile in the routing phase");
  static_assert(Unroll >= 1, "at least one load in flight");
};

// Both policies are estimates from bytes in flight, not yet measured on a GPU.
// Decode (few tokens): 4 warps split each row, one row per block: 257 blocks for E = 256 with the
// shared gate, 4 x 16 B in flight per lane, ~2 MB in flight in all (the whole of W_r at n_embd 2048).
using router_policy_decode = router_policy<128, 4, 1, 4, 4>;
// Batch: 8 tokens and 16 rows per block, so W_r is re-read once per 8 tokens and x once per 16 rows.
using router_policy_batch = router_policy<256, 8, 16, 2, 1>;

// Token counts up to which launch::router uses router_policy_decode.
inline constexpr int64_t router_decode_max_tokens = 8;

// Tag: let launch::router pick the decode or the batch policy by token count.
struct router_policy_auto {};

}  // namespace q35::kernels
