// q35::dim3: grid/block extents, the CUDA type on nvcc and an identical host struct on sim.
#pragma once

#include <cstdint>

#include "q35/core/config.hpp"

#if Q35_BACKEND_CUDA
#include <vector_types.h>
#endif

namespace q35 {

#if Q35_BACKEND_CUDA
using dim3 = ::dim3;
#else
struct dim3 {
  unsigned x = 1, y = 1, z = 1;
  constexpr dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};
#endif

// x * y * z, as a 64-bit count.
Q35_HOST_DEVICE int64_t volume(const dim3& d) { return int64_t(d.x) * d.y * d.z; }

}  // namespace q35
