// warp::reduce: butterfly reductions over a warp (or a power-of-two segment of one); every lane of
// the segment gets the same, bit-identical result.
#pragma once

#include <cmath>
#include <cstdint>

#include "q35/arch/shuffle.hpp"
#include "q35/core/config.hpp"

namespace q35::warp {

struct sum_op {
  template <class T>
  Q35_DEVICE T operator()(T a, T b) const {
    return a + b;
  }
};
// max/min ignore NaN (fmax semantics) so one NaN lane does not poison the reduction.
struct max_op {
  Q35_DEVICE float operator()(float a, float b) const { return fmaxf(a, b); }
  template <class T>
  Q35_DEVICE T operator()(T a, T b) const {
    return a < b ? b : a;
  }
};
struct min_op {
  Q35_DEVICE float operator()(float a, float b) const { return fminf(a, b); }
  template <class T>
  Q35_DEVICE T operator()(T a, T b) const {
    return b < a ? b : a;
  }
};

// op-reduction of v over each Width-lane segment; Op must be commutative and associative enough
// for the caller (the butterfly order is fixed, so results are deterministic).
template <int Width = warp_size, class T, class Op>
Q35_DEVICE T reduce(T v, Op op) {
  static_assert(Width >= 1 && Width <= warp_size && (Width & (Width - 1)) == 0, "Width: power of two <= 32");
  Q35_UNROLL
  for (int offset = Width / 2; offset > 0; offset /= 2) v = op(v, arch::shfl_xor(v, offset, Width));
  return v;
}

template <int Width = warp_size, class T>
Q35_DEVICE T reduce_sum(T v) {
  return reduce<Width>(v, sum_op{});
}
template <int Width = warp_size, class T>
Q35_DEVICE T reduce_max(T v) {
  return reduce<Width>(v, max_op{});
}
template <int Width = warp_size, class T>
Q35_DEVICE T reduce_min(T v) {
  return reduce<Width>(v, min_op{});
}

// A value with the index it came from.
struct arg_value {
  float value;
  int index;
};

// Total order used by argmax: larger value first; equal values: lower index first; NaN after every
// number (it wins only when all candidates are NaN, and then the lowest index wins).
Q35_DEVICE bool precedes(const arg_value& a, const arg_value& b) {
  const bool a_nan = a.value != a.value, b_nan = b.value != b.value;
  if (a_nan != b_nan) return b_nan;
  if (!a_nan && a.value != b.value) return a.value > b.value;
  return a.index < b.index;
}

struct argmax_op {
  Q35_DEVICE arg_value operator()(const arg_value& a, const arg_value& b) const { return precedes(b, a) ? b : a; }
};

// The (value, index) pair that comes first under `precedes` across each Width-lane segment.
template <int Width = warp_size>
Q35_DEVICE arg_value argmax(float value, int index) {
  return reduce<Width>(arg_value{value, index}, argmax_op{});
}

}  // namespace q35::warp
