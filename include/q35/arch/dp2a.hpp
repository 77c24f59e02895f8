// Integer dot-product steps of the 16-bit-activation GEMV: dp2a (two 16 x 8-bit products added to a
// 32-bit sum, one DP2A on the GPU), the 4-byte window at a byte offset of two words (PRMT/SHF), and
// float -> int rounding to nearest even. The sim implementations are exact (int32 wrap-around).
#pragma once

#include <cmath>
#include <cstdint>

#include "q35/core/config.hpp"

namespace q35::arch {

namespace detail {
// Signed 16-bit half h (0, 1) of a, and byte k (0..3) of b, signed or unsigned.
Q35_HOST_DEVICE int32_t half_s16(uint32_t a, int h) { return int32_t(int16_t(uint16_t(a >> (16 * h)))); }
Q35_HOST_DEVICE int32_t byte_u8(uint32_t b, int k) { return int32_t((b >> (8 * k)) & 0xffu); }
Q35_HOST_DEVICE int32_t byte_s8(uint32_t b, int k) { return int32_t(int8_t(uint8_t(b >> (8 * k)))); }
// c + p0 + p1 with int32 wrap-around (as the hardware adds)
Q35_HOST_DEVICE int32_t wrap_add(int32_t c, int32_t p0, int32_t p1) {
  return int32_t(uint32_t(c) + uint32_t(p0) + uint32_t(p1));
}
}  // namespace detail

// c + a.s16[0] * b.u8[0] + a.s16[1] * b.u8[1]   (a: two signed 16-bit values, b: unsigned bytes)
Q35_DEVICE int32_t dp2a_lo_su(uint32_t a, uint32_t b, int32_t c) {
#if Q35_DEVICE_PASS
  int32_t d;
  asm("dp2a.lo.s32.u32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
  return d;
#else
  return detail::wrap_add(c, detail::half_s16(a, 0) * detail::byte_u8(b, 0),
                          detail::half_s16(a, 1) * detail::byte_u8(b, 1));
#endif
}

// c + a.s16[0] * b.u8[2] + a.s16[1] * b.u8[3]
Q35_DEVICE int32_t dp2a_hi_su(uint32_t a, uint32_t b, int32_t c) {
#if Q35_DEVICE_PASS
  int32_t d;
  asm("dp2a.hi.s32.u32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
  return d;
#else
  return detail::wrap_add(c, detail::half_s16(a, 0) * detail::byte_u8(b, 2),
                          detail::half_s16(a, 1) * detail::byte_u8(b, 3));
#endif
}

// c + a.s16[0] * b.s8[0] + a.s16[1] * b.s8[1]   (b: signed bytes)
Q35_DEVICE int32_t dp2a_lo_ss(uint32_t a, uint32_t b, int32_t c) {
#if Q35_DEVICE_PASS
  int32_t d;
  asm("dp2a.lo.s32.s32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
  return d;
#else
  return detail::wrap_add(c, detail::half_s16(a, 0) * detail::byte_s8(b, 0),
                          detail::half_s16(a, 1) * detail::byte_s8(b, 1));
#endif
}

// c + a.s16[0] * b.s8[2] + a.s16[1] * b.s8[3]
Q35_DEVICE int32_t dp2a_hi_ss(uint32_t a, uint32_t b, int32_t c) {
#if Q35_DEVICE_PASS
  int32_t d;
  asm("dp2a.hi.s32.s32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
  return d;
#else
  return detail::wrap_add(c, detail::half_s16(a, 0) * detail::byte_s8(b, 2),
                          detail::half_s16(a, 1) * detail::byte_s8(b, 3));
#endif
}

// The 4 bytes starting at byte `shift_bytes` (0..3) of the 8-byte value hi:lo (lo first in memory).
Q35_HOST_DEVICE uint32_t byte_window(uint32_t lo, uint32_t hi, int shift_bytes) {
  return shift_bytes == 0 ? lo : uint32_t(((uint64_t(hi) << 32) | lo) >> (8 * shift_bytes));
}

// x rounded to the nearest integer, ties to even (|x| < 2^31).
Q35_HOST_DEVICE int32_t float_to_int_rn(float x) {
#if Q35_DEVICE_PASS
  return __float2int_rn(x);
#else
  return int32_t(std::nearbyint(x));
#endif
}

// float(v), rounded to nearest even.
Q35_HOST_DEVICE float int_to_float_rn(int32_t v) {
#if Q35_DEVICE_PASS
  return __int2float_rn(v);
#else
  return float(v);
#endif
}

}  // namespace q35::arch
