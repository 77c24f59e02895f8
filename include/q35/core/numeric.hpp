// Reduced-precision scalars: q35::half (IEEE binary16) and q35::bf16 (bfloat16) on both backends.
//
// cuda: the CUDA types (__half, __nv_bfloat16). sim: 16-bit host structs with the same conversion
// semantics (round to nearest even, NaN stays NaN, overflow goes to infinity).
#pragma once

#include <cstdint>
#include <cstring>

#include "q35/core/config.hpp"

#if Q35_BACKEND_CUDA
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#endif

namespace q35 {

Q35_HOST_DEVICE uint32_t float_bits(float f) {
#if Q35_DEVICE_PASS
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
#endif
}

Q35_HOST_DEVICE float bits_float(uint32_t u) {
#if Q35_DEVICE_PASS
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, 4);
  return f;
#endif
}

namespace detail {

// binary16 bits -> float, exact (every half is a float).
Q35_HOST_DEVICE float half_bits_to_float(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t man = h & 0x3ffu;
  if (exp == 0x1f) return bits_float(sign | 0x7f800000u | (man << 13));  // inf / nan
  if (exp != 0) return bits_float(sign | ((exp + 112u) << 23) | (man << 13));
  // subnormal: man * 2^-24
  float v = float(man) * 5.9604644775390625e-08f;
  return sign ? -v : v;
}

// float -> binary16 bits, round to nearest even.
Q35_HOST_DEVICE uint16_t float_to_half_bits(float f) {
  const uint32_t u = float_bits(f);
  const uint16_t sign = uint16_t((u >> 16) & 0x8000u);
  const uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return uint16_t(sign | 0x7e00u | ((a >> 13) & 0x3ffu));  // nan, keep quiet
  if (a >= 0x477ff000u) return uint16_t(sign | 0x7c00u);                        // rounds to >= 65520: inf
  if (a >= 0x38800000u) {                                                       // normal half
    uint32_t m = a + 0xc8000fffu + ((a >> 13) & 1u);  // rebias exponent (-112 << 23) + rounding
    return uint16_t(sign | (m >> 13));
  }
  // subnormal half (or zero): value = a_float / 2^-24, rounded to nearest even integer
  const uint32_t e = a >> 23;
  if (e < 102) return sign;  // below half of the smallest subnormal: +-0
  const uint32_t mant = (a & 0x7fffffu) | 0x800000u;
  const uint32_t shift = 126u - e;  // 24-bit mantissa -> subnormal units of 2^-24
  uint32_t r = mant >> shift;
  const uint32_t rem = mant & ((1u << shift) - 1u);
  const uint32_t halfway = 1u << (shift - 1u);
  if (rem > halfway || (rem == halfway && (r & 1u))) ++r;
  return uint16_t(sign | r);
}

Q35_HOST_DEVICE float bf16_bits_to_float(uint16_t b) { return bits_float(uint32_t(b) << 16); }

// float -> bfloat16 bits, round to nearest even; NaN stays a quiet NaN.
Q35_HOST_DEVICE uint16_t float_to_bf16_bits(float f) {
  const uint32_t u = float_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40u);
  return uint16_t((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

}  // namespace detail

#if Q35_BACKEND_CUDA
using half = __half;
using bf16 = __nv_bfloat16;
#else
// Trivially constructible (like the CUDA types), so arrays of them can be copied as bytes.
struct half {
  uint16_t bits;
  half() = default;
  explicit half(float f) : bits(detail::float_to_half_bits(f)) {}
  operator float() const { return detail::half_bits_to_float(bits); }
};
struct bf16 {
  uint16_t bits;
  bf16() = default;
  explicit bf16(float f) : bits(detail::float_to_bf16_bits(f)) {}
  operator float() const { return detail::bf16_bits_to_float(bits); }
};
#endif
static_assert(sizeof(half) == 2 && sizeof(bf16) == 2);

// Conversions that read the same on both backends.
Q35_HOST_DEVICE float to_float(float v) { return v; }
Q35_HOST_DEVICE float to_float(half v) {
#if Q35_BACKEND_CUDA
  return __half2float(v);
#else
  return float(v);
#endif
}
Q35_HOST_DEVICE float to_float(bf16 v) {
#if Q35_BACKEND_CUDA
  return __bfloat162float(v);
#else
  return float(v);
#endif
}

template <class T>
Q35_HOST_DEVICE T from_float(float v);
template <>
Q35_HOST_DEVICE float from_float<float>(float v) {
  return v;
}
template <>
Q35_HOST_DEVICE half from_float<half>(float v) {
#if Q35_BACKEND_CUDA
  return __float2half_rn(v);
#else
  return half(v);
#endif
}
template <>
Q35_HOST_DEVICE bf16 from_float<bf16>(float v) {
#if Q35_BACKEND_CUDA
  return __float2bfloat16_rn(v);
#else
  return bf16(v);
#endif
}

// The 16 bits of a half or bf16 value.
template <class T>
Q35_HOST_DEVICE uint16_t to_bits(T v) {
  static_assert(sizeof(T) == 2, "to_bits: half or bf16");
  uint16_t b;
  std::memcpy(&b, &v, 2);
  return b;
}

// Raw 16-bit patterns (GGUF stores F16/BF16 as bits).
Q35_HOST_DEVICE float half_bits_to_float(uint16_t b) { return detail::half_bits_to_float(b); }
Q35_HOST_DEVICE float bf16_bits_to_float(uint16_t b) { return detail::bf16_bits_to_float(b); }

}  // namespace q35
