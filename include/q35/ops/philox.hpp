// ops::philox4x32: the counter-based random generator of Salmon et al. (SC'11, "Parallel random
// numbers: as easy as 1, 2, 3"): 10 rounds, four 32-bit words out per (counter, key), the same bits on
// the GPU and the host, no state but the counter.
#pragma once

#include <cstdint>

#include "q35/core/config.hpp"

namespace q35::ops {

struct philox_words {
  uint32_t w[4];
};

namespace detail {

inline constexpr uint32_t philox_m0 = 0xD2511F53u;  // round multipliers
inline constexpr uint32_t philox_m1 = 0xCD9E8D57u;
inline constexpr uint32_t philox_w0 = 0x9E3779B9u;  // key increments (golden ratio, sqrt(3) - 1)
inline constexpr uint32_t philox_w1 = 0xBB67AE85u;

Q35_HOST_DEVICE uint32_t mul_hi_32(uint32_t a, uint32_t b) {
#if Q35_DEVICE_PASS
  return __umulhi(a, b);
#else
  return uint32_t((uint64_t(a) * uint64_t(b)) >> 32);
#endif
}

}  // namespace detail

// Philox4x32-10 of counter c under key k.
Q35_HOST_DEVICE philox_words philox4x32(philox_words c, uint32_t k0, uint32_t k1) {
  Q35_UNROLL
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      k0 += detail::philox_w0;
      k1 += detail::philox_w1;
    }
    // (c0, c1, c2, c3) <- (hi(m1 c2) ^ c1 ^ k0, lo(m1 c2), hi(m0 c0) ^ c3 ^ k1, lo(m0 c0))
    const uint32_t hi0 = detail::mul_hi_32(detail::philox_m0, c.w[0]), lo0 = detail::philox_m0 * c.w[0];
    const uint32_t hi1 = detail::mul_hi_32(detail::philox_m1, c.w[2]), lo1 = detail::philox_m1 * c.w[2];
    c = philox_words{{hi1 ^ c.w[1] ^ k0, lo1, hi0 ^ c.w[3] ^ k1, lo0}};
  }
  return c;
}

// floor(a * b / 2^64): maps a uniform 64-bit a onto [0, b).
Q35_HOST_DEVICE uint64_t mul_hi_64(uint64_t a, uint64_t b) {
#if Q35_DEVICE_PASS
  return __umul64hi(a, b);
#else
  // schoolbook on 32-bit halves: a b = ah bh 2^64 + (ah bl + al bh) 2^32 + al bl
  const uint64_t al = a & 0xffffffffu, ah = a >> 32, bl = b & 0xffffffffu, bh = b >> 32;
  const uint64_t ll = al * bl, lh = al * bh, hl = ah * bl, hh = ah * bh;
  const uint64_t mid = (ll >> 32) + (lh & 0xffffffffu) + (hl & 0xffffffffu);
  return hh + (lh >> 32) + (hl >> 32) + (mid >> 32);
#endif
}

}  // namespace q35::ops
