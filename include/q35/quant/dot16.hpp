// Register-level math of the 16-bit-activation GEMV: unpacking 4/5/6-bit quants into bytes with
// masks and shifts (LOP3/SHF/PRMT on the GPU), the K-quant scale bytes, and exact int32 dot products
// of packed bytes with packed int16 activations through dp2a. No memory access: the engine loads
// the words (ops/gemv_dot16.hpp).
//
// Packing convention: a quant word holds 4 consecutive elements, element 4k + i in byte i of word k;
// an activation word holds 2 consecutive int16 elements, element 2k in the low half of word k.
#pragma once

#include <cstdint>

#include "q35/arch/dp2a.hpp"
#include "q35/core/config.hpp"

namespace q35::quant {

// c + sum_{i < 4N} b[i] * x[i]: N quant words of unsigned bytes against 2N activation words.
template <int N>
Q35_DEVICE int32_t dot_u8(const uint32_t* b, const uint32_t* x, int32_t c = 0) {
  Q35_UNROLL
  for (int k = 0; k < N; ++k) c = arch::dp2a_hi_su(x[2 * k + 1], b[k], arch::dp2a_lo_su(x[2 * k], b[k], c));
  return c;
}

// c + sum_{i < 4N} b[i] * x[i] with signed bytes (Q8_0).
template <int N>
Q35_DEVICE int32_t dot_s8(const uint32_t* b, const uint32_t* x, int32_t c = 0) {
  Q35_UNROLL
  for (int k = 0; k < N; ++k) c = arch::dp2a_hi_ss(x[2 * k + 1], b[k], arch::dp2a_lo_ss(x[2 * k], b[k], c));
  return c;
}

// Byte k of w as an int.
Q35_HOST_DEVICE int byte_of(uint32_t w, int k) { return int((w >> (8 * k)) & 0xffu); }

// The 8 scales and 8 mins (6 bits each) of Q4_K/Q5_K from the 12 packed bytes s[0..11] given as
// three words a = s[0..3], b = s[4..7], c = s[8..11]; byte j % 4 of sc_lo (j < 4) or sc_hi (j >= 4)
// is sub-block j's scale, likewise m_lo / m_hi (ggml's get_scale_min_k4, four at a time):
//   j < 4:  sc = s[j] & 63,                         m = s[j+4] & 63
//   j >= 4: sc = (s[j+4] & 15) | (s[j-4] >> 6) << 4, m = (s[j+4] >> 4) | (s[j] >> 6) << 4
struct k4_scale_bytes {
  uint32_t sc_lo, sc_hi, m_lo, m_hi;
};
Q35_HOST_DEVICE k4_scale_bytes unpack_k4_scale_bytes(uint32_t a, uint32_t b, uint32_t c) {
  return {a & 0x3f3f3f3fu, (c & 0x0f0f0f0fu) | ((a >> 2) & 0x30303030u), b & 0x3f3f3f3fu,
          ((c >> 4) & 0x0f0f0f0fu) | ((b >> 2) & 0x30303030u)};
}

// Q5_K: the 5-bit quants of 4 elements from their nibble word (low nibbles when Nibble == 0) and
// the high-bit word qh, bit `bit` of each byte: q = nibble | ((qh >> bit) & 1) << 4. Called with
// compile-time nibble and bit (unrolled loops), so the shifts are constants.
Q35_HOST_DEVICE uint32_t q5_word(int nibble, int bit, uint32_t qs, uint32_t qh) {
  const uint32_t hi = bit <= 4 ? (qh << (4 - bit)) : (qh >> (bit - 4));
  return ((qs >> (4 * nibble)) & 0x0f0f0f0fu) | (hi & 0x10101010u);
}

// Q6_K: the 6-bit quants (0..63, offset 32 not removed) of 4 elements of quarter k (0..3) of a
// half-block: q = (ql >> 4 (k / 2)) & 15 | ((qh >> 2k) & 3) << 4 (k a compile-time constant).
Q35_HOST_DEVICE uint32_t q6_word(int k, uint32_t ql, uint32_t qh) {
  const uint32_t hi = 2 * k <= 4 ? (qh << (4 - 2 * k)) : (qh >> (2 * k - 4));
  return ((ql >> (4 * (k / 2))) & 0x0f0f0f0fu) | (hi & 0x30303030u);
}

}  // namespace q35::quant
