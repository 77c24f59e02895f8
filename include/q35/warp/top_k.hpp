// warp::top_k: the k first of up to 32 * ItemsPerLane values held by a warp, ranked by
// warp::precedes (larger value first, lower index on ties, NaN after every number).
#pragma once

#include <climits>
#include <cmath>
#include <cstdint>

#include "q35/arch/thread.hpp"
#include "q35/core/config.hpp"
#include "q35/warp/reduce.hpp"

namespace q35::warp {

// Item j of lane l is element l + 32 * j: lane-strided, so a warp loads a row with coalesced reads.
Q35_DEVICE constexpr int strided_index(int lane, int j) { return lane + warp_size * j; }

// Index of "no item": ranks after every real item, NaN ones included.
inline constexpr int no_index = INT_MAX;

// Selects the k first elements (under `precedes`) among the elements with index < n. Lane r < k
// receives the element of rank r as {value, index}; lanes r >= k (and ranks past n) receive
// {NaN, no_index}. Ids are distinct and < n whatever the values are (NaN and +-inf included).
// Every lane of the warp calls it with the same n (<= 32 * ItemsPerLane) and k (0 <= k <= 32).
//
// k rounds of: each lane's first not-yet-taken item, then a butterfly argmax over the warp; the
// owner lane marks the winner as taken (a bit, so the values themselves are never overwritten).
template <int ItemsPerLane>
Q35_DEVICE arg_value top_k(const float (&values)[ItemsPerLane], int n, int k) {
  static_assert(ItemsPerLane >= 1 && ItemsPerLane <= 32, "ItemsPerLane: 1..32 (up to 1024 elements)");
  const int lane = arch::lane_id();
  uint32_t taken = 0;  // bit j: item j of this lane is out (index >= n, or already selected)
  Q35_UNROLL
  for (int j = 0; j < ItemsPerLane; ++j)
    if (strided_index(lane, j) >= n) taken |= 1u << j;

  arg_value mine{NAN, no_index};
  for (int r = 0; r < k; ++r) {
    arg_value best{NAN, no_index};
    Q35_UNROLL
    for (int j = 0; j < ItemsPerLane; ++j) {
      const arg_value c{values[j], strided_index(lane, j)};
      if (!(taken >> j & 1u) && precedes(c, best)) best = c;
    }
    best = reduce(best, argmax_op{});
    if (lane == r) mine = best;
    if (best.index != no_index && best.index % warp_size == lane) taken |= 1u << (best.index / warp_size);
  }
  return mine;
}

}  // namespace q35::warp
