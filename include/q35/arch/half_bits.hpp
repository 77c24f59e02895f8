// binary16 bit pattern -> float with the GPU's conversion instruction (one cvt.f32.f16, exact for every
// finite value, subnormals included); the sim uses q35's exact software conversion. NaN stays NaN
// (the GPU may return the canonical NaN rather than the input's payload).
#pragma once

#include <cstdint>

#include "q35/core/config.hpp"
#include "q35/core/numeric.hpp"

namespace q35::arch {

Q35_HOST_DEVICE float f16_bits_to_float(uint16_t bits) {
#if Q35_DEVICE_PASS
  return __half2float(__ushort_as_half(bits));
#else
  return half_bits_to_float(bits);
#endif
}

}  // namespace q35::arch
