// warp::inclusive_sum: a prefix sum over the lanes of a warp (shfl_up ladder, log2(32) steps).
#pragma once

#include "q35/arch/shuffle.hpp"
#include "q35/arch/thread.hpp"
#include "q35/core/config.hpp"

namespace q35::warp {

// Sum of v over lanes 0..lane; every lane of the warp must call it.
template <class T>
Q35_DEVICE T inclusive_sum(T v) {
  const int lane = arch::lane_id();
  Q35_UNROLL
  for (int d = 1; d < warp_size; d *= 2) {
    const T u = arch::shfl_up(v, d);
    if (lane >= d) v += u;
  }
  return v;
}

}  // namespace q35::warp
