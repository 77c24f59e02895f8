// vec<T, N>: N elements of T held in registers, aligned for one vectorized access.
#pragma once

#include <cstddef>

#include "q35/core/config.hpp"

namespace q35 {

template <class T, int N>
struct alignas(sizeof(T) * N <= 16 ? sizeof(T) * N : 16) vec {
  static_assert(N > 0, "vec needs at least one element");
  static constexpr int size = N;
  T v[N];

  Q35_HOST_DEVICE T& operator[](int i) { return v[i]; }
  Q35_HOST_DEVICE const T& operator[](int i) const { return v[i]; }
};

// Elements of T that fit one 16-byte (128-bit) access.
template <class T>
inline constexpr int elems_per_16_bytes = int(16 / sizeof(T));

template <class T>
using vec16 = vec<T, elems_per_16_bytes<T>>;

// Integer helpers used for tiling.
template <class I>
Q35_HOST_DEVICE constexpr I ceil_div(I a, I b) {
  return (a + b - 1) / b;
}
template <class I>
Q35_HOST_DEVICE constexpr I round_up(I a, I b) {
  return ceil_div(a, b) * b;
}

}  // namespace q35
