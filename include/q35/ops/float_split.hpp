// A float as the sum of 16-bit parts (f16 or bf16) for the fp32-grade tensor-core products
// (kernels/gemm_mma_float.hpp, kernels/attn_prefill_mma.hpp): p[0] is the part nearest v, p[i]
// the part nearest the remainder v - p[0] - ... - p[i-1], each remainder exact in fp32 (Sterbenz).
// The error bounds of 2 f16 / 3 bf16 parts are derived in those kernels' headers.
#pragma once

#include <cstdint>
#include <type_traits>

#include "q35/arch/half_bits.hpp"
#include "q35/core/config.hpp"
#include "q35/core/numeric.hpp"

namespace q35::ops {

// Whether float bits b are finite.
Q35_HOST_DEVICE constexpr bool finite_bits(uint32_t b) { return (b & 0x7f800000u) != 0x7f800000u; }

// The value of 16-bit part bits b.
template <class Part>
Q35_DEVICE float part_value(uint16_t b) {
  if constexpr (std::is_same_v<Part, half>)
    return arch::f16_bits_to_float(b);
  else
    return bf16_bits_to_float(b);
}

// v = p[0] + p[1] + ... (+ the rounding of the last part); a non-finite part zeroes the rest, so
// inf stays inf and NaN stays NaN.
template <class Part, int N>
Q35_DEVICE void split_float(float v, uint16_t (&p)[N]) {
  float r = v;
  Q35_UNROLL
  for (int i = 0; i < N; ++i) {
    p[i] = to_bits(from_float<Part>(r));
    const float pv = part_value<Part>(p[i]);
    r = finite_bits(float_bits(pv)) ? r - pv : 0.0f;  // exact (Sterbenz)
  }
}

// The power-of-two scale that brings a set of floats into f16's range for a hi + lo split: amax =
// the largest |v| bits of the set, e = its exponent clamped to [-100, 127]; mul = 2^(14 - e) (so
// |v mul| < 2^15: no f16 overflow) and unscale = 2^(e - 14), both normal floats, the products exact.
struct f16_range {
  float mul, unscale;
};
Q35_DEVICE f16_range f16_range_of(uint32_t amax) {
  int ex = int(amax >> 23) - 127;
  ex = ex < -100 ? -100 : ex > 127 ? 127 : ex;
  return {bits_float(uint32_t(127 + 14 - ex) << 23), bits_float(uint32_t(127 - 14 + ex) << 23)};
}
// max(amax, |v| bits).
Q35_DEVICE uint32_t abs_bits_max(uint32_t amax, float v) {
  const uint32_t b = float_bits(v) & 0x7fffffffu;
  return b > amax ? b : amax;
}

}  // namespace q35::ops
