// Prefill grouping of (token, slot) pairs by expert: the sorted pair list, each expert's first
// sorted index and first GEMM tile. On the CUDA backend launch::moe_group sorts with CUB's radix
// sort between moe_keys_kernel and moe_offsets_kernel; moe_group_kernel is the same stable grouping
// as one q35 kernel (the sim backend's path, and a cross-check on the GPU).
#pragma once

#include <cstdint>

#include "q35/arch/atomic.hpp"
#include "q35/arch/thread.hpp"
#include "q35/core/dim3.hpp"
#include "q35/core/vec.hpp"
#include "q35/ops/router.hpp"

namespace q35::kernels {

// Sorted pairs per grouped-GEMM tile (kernels/gemm_rows.hpp: the tensor-core GEMMs' grouped tile).
inline constexpr int moe_group_tile = 32;

namespace detail {
// Expert e's key, or n_experts (after every expert: the pair is in no group) for an empty slot
// (ops::router_empty_slot) or an invalid id (which sets the flag).
Q35_DEVICE int32_t moe_key(int32_t id, int n_experts, int* error_flag) {
  if (id >= 0 && id < n_experts) return id;
  if (id != ops::router_empty_slot) arch::raise_flag(error_flag);
  return n_experts;
}

// tile_starts[e] = sum_{e' < e} ceil(count_e' / tile), from offsets [n_experts + 1]; one thread.
Q35_DEVICE void moe_tile_starts(const int32_t* offsets, int32_t* tile_starts, int n_experts) {
  int32_t tiles = 0;
  for (int e = 0; e < n_experts; ++e) {
    tile_starts[e] = tiles;
    tiles += (offsets[e + 1] - offsets[e] + moe_group_tile - 1) / moe_group_tile;
  }
  tile_starts[n_experts] = tiles;
}
}  // namespace detail

struct moe_group_params {
  const int32_t* ids;          // [n_pairs] expert of each (token, slot) pair, device-resident
  int32_t* keys;               // [n_pairs] moe_keys_kernel: the sort keys (invalid ids -> n_experts)
  int32_t* values;             // [n_pairs] moe_keys_kernel: 0 .. n_pairs - 1
  const int32_t* sorted_keys;  // [n_pairs] moe_offsets_kernel: keys in ascending order
  int32_t* sorted_pairs;       // [n_pairs] moe_group_kernel: pair indices grouped by expert, ascending within a group
  int32_t* offsets;            // [n_experts + 1]: expert e's pairs are sorted_pairs[offsets[e], offsets[e + 1])
  int32_t* tile_starts;        // [n_experts + 1]: expert e's first tile of moe_group_tile pairs; [n_experts]: all tiles
  int32_t n_pairs;
  int n_experts;
  int* error_flag;  // set to 1 on an id outside [0, n_experts) other than -1 (an empty slot)
};

// keys[p] = ids[p] (n_experts when invalid), values[p] = p: the radix sort's input. One thread per pair.
struct moe_keys_kernel {
  using params = moe_group_params;
  static constexpr int threads = 256;
  struct shared_storage {};
  static dim3 grid(const params& p) { return dim3(unsigned(ceil_div<int32_t>(p.n_pairs, threads))); }
  Q35_DEVICE void operator()(const params& p, shared_storage&) const {
    const int32_t i = int32_t(arch::block_idx().x) * threads + arch::thread_rank();
    if (i >= p.n_pairs) return;
    p.keys[i] = detail::moe_key(p.ids[i], p.n_experts, p.error_flag);
    p.values[i] = i;
  }
};

// offsets[e] = first i with sorted_keys[i] >= e (binary search, one thread per expert), then the
// tile starts. One block.
struct moe_offsets_kernel {
  using params = moe_group_params;
  static constexpr int threads = 512;
  struct shared_storage {};
  static dim3 grid(const params&) { return dim3(1); }
  Q35_DEVICE void operator()(const params& p, shared_storage&) const {
    for (int e = arch::thread_rank(); e <= p.n_experts; e += threads) {
      int32_t lo = 0, hi = p.n_pairs;  // lower_bound(sorted_keys, e)
      while (lo < hi) {
        const int32_t mid = lo + (hi - lo) / 2;
        if (p.sorted_keys[mid] < e)
          lo = mid + 1;
        else
          hi = mid;
      }
      p.offsets[e] = lo;
    }
    arch::sync_block();
    if (arch::thread_rank() == 0) detail::moe_tile_starts(p.offsets, p.tile_starts, p.n_experts);
  }
};

// The whole grouping in one block: thread e counts expert e's pairs, thread 0 turns the counts into
// offsets and tile starts, thread e writes its pairs in ascending order (a stable counting sort).
// O(n_experts x n_pairs / threads) reads: meant for the sim and tests, CUB serves large prefills.
struct moe_group_kernel {
  using params = moe_group_params;
  static constexpr int threads = 512;
  struct shared_storage {};
  static dim3 grid(const params&) { return dim3(1); }
  Q35_DEVICE void operator()(const params& p, shared_storage&) const {
    const int t = arch::thread_rank();
    // count_e = |{p : key_p = e}|, stored at offsets[e + 1]
    for (int e = t; e < p.n_experts; e += threads) {
      int32_t n = 0;
      for (int32_t i = 0; i < p.n_pairs; ++i) n += detail::moe_key(p.ids[i], p.n_experts, p.error_flag) == e;
      p.offsets[e + 1] = n;
    }
    arch::sync_block();
    if (t == 0) {
      // offsets = exclusive prefix sum of the counts
      p.offsets[0] = 0;
      for (int e = 0; e < p.n_experts; ++e) p.offsets[e + 1] += p.offsets[e];
      detail::moe_tile_starts(p.offsets, p.tile_starts, p.n_experts);
    }
    arch::sync_block();
    for (int e = t; e < p.n_experts; e += threads) {
      int32_t at = p.offsets[e];
      for (int32_t i = 0; i < p.n_pairs; ++i)
        if (detail::moe_key(p.ids[i], p.n_experts, p.error_flag) == e) p.sorted_pairs[at++] = i;
    }
  }
};

}  // namespace q35::kernels
