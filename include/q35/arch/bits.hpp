// arch/bits.hpp: bit counting on a 32-bit word (POPC / FLO on the GPU, compiler builtins on the sim).
#pragma once

#include <cstdint>

#include "q35/core/config.hpp"

namespace q35::arch {

// Set bits of x.
Q35_DEVICE int popcount(uint32_t x) {
#if Q35_DEVICE_PASS
  return __popc(x);
#else
  return __builtin_popcount(x);
#endif
}

// Index of the lowest set bit of x (x != 0).
Q35_DEVICE int lowest_set_bit(uint32_t x) {
#if Q35_DEVICE_PASS
  return __ffs(int(x)) - 1;
#else
  return __builtin_ctz(x);
#endif
}

}  // namespace q35::arch
