// ops::i8_stage<Format>: the weights of the int8 tensor-core GEMM (kernels/gemm_i8.hpp) as the GGUF
// integers themselves. One call covers 64 consecutive elements [e0, e0 + 64) of one weight row
// (e0 a multiple of 64): load() issues the global loads into registers (raw), unpack() turns them
// into 64 int8 quants (16 words, element 4k + i in byte i of word k) and the per-group factors
//   32-element groups (Q4_K, Q5_K, Q8_0, Q4_0):  w = d_g q - m_g   ->  f = {d_0, m_0, d_1, m_1}
//   16-element groups (Q6_K):                    w = d_g q         ->  f = {d_0, d_1, d_2, d_3}
// with q unsigned (Q4_K 0..15, Q5_K 0..31) or signed (Q8_0 -127..127, Q4_0 q - 8, Q6_K q - 32, the
// offsets removed in the integers). The factors are rounded as the GEMV computes them
// (d * sc, dmin * m with one rounding each), so each group's term equals the GEMV integer path's.
//
// Raw registers are all-zero for a group outside the matrix (load() not called or `inside` false
// for that 32-element half); every format unpacks zero raw words to factors 0 (a zero contribution).
// Alignment: Q4_K / Q5_K blocks are 16-byte aligned (16-byte loads); Q8_0, Q4_0 and Q6_K blocks only
// 2-byte aligned: 4-byte loads of the aligned words inside the bytes needed plus one 16-bit load, so
// no load reads outside the block.
#pragma once

#include <cstdint>

#include "q35/arch/dp2a.hpp"
#include "q35/arch/half_bits.hpp"
#include "q35/arch/rounded_math.hpp"
#include "q35/arch/vector_load.hpp"
#include "q35/core/config.hpp"
#include "q35/core/vec.hpp"
#include "q35/quant/blocks.hpp"
#include "q35/quant/dot16.hpp"
#include "q35/quant/formats.hpp"

namespace q35::ops {

template <class Format>
struct i8_stage;

template <class Format>
concept has_i8_stage = requires {
  i8_stage<Format>::group_elems;
};

namespace detail {

// A 2-byte aligned block of 2 + 4 NQ bytes whose first two are a binary16 scale (Q8_0: NQ = 8,
// Q4_0: NQ = 4), read as NQ aligned words plus one 16-bit load: at a 4-aligned start the words are
// bytes [0, 4 NQ) and the half is bytes [4 NQ, 4 NQ + 2), else the half is bytes [0, 2) and the
// words bytes [2, 2 + 4 NQ).
template <int NQ>
struct d16_block_raw {
  uint32_t w[NQ];
  uint32_t h;        // the 16-bit load, zero-extended
  uint32_t aligned;  // 1 when the block starts 4-aligned
  Q35_DEVICE void load(const uint8_t* b) {
    aligned = (reinterpret_cast<uintptr_t>(b) & 3u) == 0 ? 1u : 0u;
    const auto* words = reinterpret_cast<const uint32_t*>(b + (aligned ? 0 : 2));
    Q35_UNROLL
    for (int i = 0; i < NQ; ++i) w[i] = arch::load_4(words + i);
    h = *reinterpret_cast<const uint16_t*>(b + (aligned ? 4 * NQ : 0));
  }
  Q35_DEVICE void zero() {
    Q35_UNROLL
    for (int i = 0; i < NQ; ++i) w[i] = 0;
    h = 0, aligned = 1;
  }
  // The scale's bits and the NQ quant words (bytes 2 .. 2 + 4 NQ of the block).
  Q35_DEVICE uint32_t d_bits() const { return aligned ? (w[0] & 0xffffu) : h; }
  Q35_DEVICE uint32_t q_word(int i) const {
    if (!aligned) return w[i];
    return i + 1 < NQ ? arch::byte_window(w[i], w[i + 1], 2) : (w[i] >> 16) | (h << 16);
  }
};

}  // namespace detail

// Q4_K: the 64 elements are sub-blocks 2c and 2c + 1 (c = (e0 % 256) / 64): the low and high nibbles
// of qs[32c .. 32c + 31].
template <>
struct i8_stage<quant::q4_k_format> {
  static constexpr int group_elems = 32;
  static constexpr bool q_signed = false, has_min = true;
  struct raw {
    uint32_t head[4];  // d | dmin << 16, scales[12]
    uint32_t qs[8];
    int c;
  };
  static Q35_DEVICE void zero(raw& r) {
    Q35_UNROLL
    for (int i = 0; i < 4; ++i) r.head[i] = 0;
    Q35_UNROLL
    for (int i = 0; i < 8; ++i) r.qs[i] = 0;
    r.c = 0;
  }
  static Q35_DEVICE void load(raw& r, const uint8_t* row, int64_t e0, bool inside_lo, bool inside_hi) {
    if (!(inside_lo && inside_hi)) return zero(r);  // a Q4_K row has whole blocks: both or neither
    const uint8_t* b = row + (e0 / 256) * 144;
    r.c = int((e0 % 256) / 64);
    const vec16<uint32_t> h = arch::load_16(reinterpret_cast<const uint32_t*>(b));
    const vec16<uint32_t> q0 = arch::load_16(reinterpret_cast<const uint32_t*>(b + 16 + 32 * r.c));
    const vec16<uint32_t> q1 = arch::load_16(reinterpret_cast<const uint32_t*>(b + 32 + 32 * r.c));
    Q35_UNROLL
    for (int i = 0; i < 4; ++i) r.head[i] = h[i], r.qs[i] = q0[i], r.qs[4 + i] = q1[i];
  }
  static Q35_DEVICE void unpack(const raw& r, uint32_t (&q)[16], float (&f)[4]) {
    Q35_UNROLL
    for (int i = 0; i < 8; ++i) q[i] = r.qs[i] & 0x0f0f0f0fu, q[8 + i] = (r.qs[i] >> 4) & 0x0f0f0f0fu;
    const float d = arch::f16_bits_to_float(uint16_t(r.head[0])),
                dmin = arch::f16_bits_to_float(uint16_t(r.head[0] >> 16));
    const quant::k4_scale_bytes s = quant::unpack_k4_scale_bytes(r.head[1], r.head[2], r.head[3]);
    const uint32_t sc = r.c < 2 ? s.sc_lo : s.sc_hi, m = r.c < 2 ? s.m_lo : s.m_hi;
    const int j = (2 * r.c) % 4;
    f[0] = arch::mul_rn(d, float(quant::byte_of(sc, j)));
    f[1] = arch::mul_rn(dmin, float(quant::byte_of(m, j)));
    f[2] = arch::mul_rn(d, float(quant::byte_of(sc, j + 1)));
    f[3] = arch::mul_rn(dmin, float(quant::byte_of(m, j + 1)));
  }
};

// Q5_K: as Q4_K with the fifth bit of element l of sub-block j in bit j of qh[l].
template <>
struct i8_stage<quant::q5_k_format> {
  static constexpr int group_elems = 32;
  static constexpr bool q_signed = false, has_min = true;
  struct raw {
    uint32_t head[4];
    uint32_t qh[8];
    uint32_t qs[8];
    int c;
  };
  static Q35_DEVICE void zero(raw& r) {
    Q35_UNROLL
    for (int i = 0; i < 4; ++i) r.head[i] = 0;
    Q35_UNROLL
    for (int i = 0; i < 8; ++i) r.qh[i] = 0, r.qs[i] = 0;
    r.c = 0;
  }
  static Q35_DEVICE void load(raw& r, const uint8_t* row, int64_t e0, bool inside_lo, bool inside_hi) {
    if (!(inside_lo && inside_hi)) return zero(r);
    const uint8_t* b = row + (e0 / 256) * 176;
    r.c = int((e0 % 256) / 64);
    const auto* w = reinterpret_cast<const uint32_t*>(b);
    const vec16<uint32_t> h = arch::load_16(w);
    const vec16<uint32_t> qh0 = arch::load_16(w + 4), qh1 = arch::load_16(w + 8);
    const vec16<uint32_t> q0 = arch::load_16(w + 12 + 8 * r.c), q1 = arch::load_16(w + 16 + 8 * r.c);
    Q35_UNROLL
    for (int i = 0; i < 4; ++i) {
      r.head[i] = h[i], r.qh[i] = qh0[i], r.qh[4 + i] = qh1[i];
      r.qs[i] = q0[i], r.qs[4 + i] = q1[i];
    }
  }
  static Q35_DEVICE void unpack(const raw& r, uint32_t (&q)[16], float (&f)[4]) {
    Q35_UNROLL
    for (int i = 0; i < 8; ++i) {
      q[i] = quant::q5_word(0, 2 * r.c, r.qs[i], r.qh[i]);
      q[8 + i] = quant::q5_word(1, 2 * r.c + 1, r.qs[i], r.qh[i]);
    }
    const float d = arch::f16_bits_to_float(uint16_t(r.head[0])),
                dmin = arch::f16_bits_to_float(uint16_t(r.head[0] >> 16));
    const quant::k4_scale_bytes s = quant::unpack_k4_scale_bytes(r.head[1], r.head[2], r.head[3]);
    const uint32_t sc = r.c < 2 ? s.sc_lo : s.sc_hi, m = r.c < 2 ? s.m_lo : s.m_hi;
    const int j = (2 * r.c) % 4;
    f[0] = arch::mul_rn(d, float(quant::byte_of(sc, j)));
    f[1] = arch::mul_rn(dmin, float(quant::byte_of(m, j)));
    f[2] = arch::mul_rn(d, float(quant::byte_of(sc, j + 1)));
    f[3] = arch::mul_rn(dmin, float(quant::byte_of(m, j + 1)));
  }
};

// Q8_0: two blocks of 32 (34 bytes each, 2-byte aligned).
template <>
struct i8_stage<quant::q8_0_format> {
  static constexpr int group_elems = 32;
  static constexpr bool q_signed = true, has_min = false;
  struct raw {
    detail::d16_block_raw<8> b[2];
  };
  static Q35_DEVICE void zero(raw& r) { r.b[0].zero(), r.b[1].zero(); }
  static Q35_DEVICE void load(raw& r, const uint8_t* row, int64_t e0, bool inside_lo, bool inside_hi) {
    const uint8_t* b = row + (e0 / 32) * 34;
    if (inside_lo)
      r.b[0].load(b);
    else
      r.b[0].zero();
    if (inside_hi)
      r.b[1].load(b + 34);
    else
      r.b[1].zero();
  }
  static Q35_DEVICE void unpack(const raw& r, uint32_t (&q)[16], float (&f)[4]) {
    Q35_UNROLL
    for (int j = 0; j < 2; ++j) {
      Q35_UNROLL
      for (int i = 0; i < 8; ++i) q[8 * j + i] = r.b[j].q_word(i);
      f[2 * j] = arch::f16_bits_to_float(uint16_t(r.b[j].d_bits()));
      f[2 * j + 1] = 0.0f;
    }
  }
};

// Q4_0: two blocks of 32 (18 bytes each): element i < 16 in the low nibble of qs[i], i >= 16 in the
// high nibble of qs[i - 16]; q - 8 as a signed byte (exact: -8..7).
template <>
struct i8_stage<quant::q4_0_format> {
  static constexpr int group_elems = 32;
  static constexpr bool q_signed = true, has_min = false;
  struct raw {
    detail::d16_block_raw<4> b[2];
  };
  static Q35_DEVICE void zero(raw& r) { r.b[0].zero(), r.b[1].zero(); }
  static Q35_DEVICE void load(raw& r, const uint8_t* row, int64_t e0, bool inside_lo, bool inside_hi) {
    const uint8_t* b = row + (e0 / 32) * 18;
    if (inside_lo)
      r.b[0].load(b);
    else
      r.b[0].zero();
    if (inside_hi)
      r.b[1].load(b + 18);
    else
      r.b[1].zero();
  }
  static Q35_DEVICE void unpack(const raw& r, uint32_t (&q)[16], float (&f)[4]) {
    Q35_UNROLL
    for (int j = 0; j < 2; ++j) {
      Q35_UNROLL
      for (int i = 0; i < 4; ++i) {
        const uint32_t w = r.b[j].q_word(i);
        q[8 * j + i] = q4_0_signed(w & 0x0f0f0f0fu);
        q[8 * j + 4 + i] = q4_0_signed((w >> 4) & 0x0f0f0f0fu);
      }
      f[2 * j] = arch::f16_bits_to_float(uint16_t(r.b[j].d_bits()));
      f[2 * j + 1] = 0.0f;
    }
  }
  // Bytes n (0..15) to the two's complement bytes of n - 8 = n + 0xf8 (mod 256), without carries
  // between bytes: n + 0x78 <= 0x87, then flipping bit 7 adds 0x80 (mod 256).
  static Q35_DEVICE uint32_t q4_0_signed(uint32_t n) { return (n + 0x78787878u) ^ 0x80808080u; }
};

// Q6_K: 64 elements of half h = (e0 % 256) / 128, quarters kk and kk + 1 (kk = 2 ((e0 % 128) / 64)):
// element 32 k + l of the half takes ql[64 h + 32 (k % 2) + l] >> 4 (k / 2) and (qh[32 h + l] >> 2k) & 3;
// q - 32 as a signed byte (exact: -32..31); groups of 16 with factors d * scales[g].
template <>
struct i8_stage<quant::q6_k_format> {
  static constexpr int group_elems = 16;
  static constexpr bool q_signed = true, has_min = false;
  struct raw {
    uint32_t ql[17];  // aligned words from the one containing ql[64 h] (one more when misaligned)
    uint32_t qh[9];
    uint32_t sc[2];  // scales[e0 % 256 / 16 ..] as two 16-bit loads
    uint32_t d;
    int kk;
    uint32_t shift;  // 0 or 2: the block's byte phase in its aligned words
  };
  static Q35_DEVICE void zero(raw& r) {
    Q35_UNROLL
    for (int i = 0; i < 17; ++i) r.ql[i] = 0;
    Q35_UNROLL
    for (int i = 0; i < 9; ++i) r.qh[i] = 0;
    r.sc[0] = r.sc[1] = 0, r.d = 0, r.kk = 0, r.shift = 0;
  }
  static Q35_DEVICE void load(raw& r, const uint8_t* row, int64_t e0, bool inside_lo, bool inside_hi) {
    if (!(inside_lo && inside_hi)) return zero(r);
    const uint8_t* b = row + (e0 / 256) * 210;
    const int o = int(e0 % 256), h = o / 128;
    r.kk = 2 * ((o % 128) / 64);
    r.shift = uint32_t(reinterpret_cast<uintptr_t>(b) & 3u);  // 0 or 2
    const auto* base = reinterpret_cast<const uint32_t*>(b - r.shift);
    // bytes [64 h, 64 h + 64) and [128 + 32 h, 160 + 32 h) of the block: words from the aligned one
    // at or below, one more word only when misaligned (it ends inside the block)
    const int n_ql = r.shift ? 17 : 16, n_qh = r.shift ? 9 : 8;
    Q35_UNROLL
    for (int i = 0; i < 17; ++i) r.ql[i] = i < n_ql ? arch::load_4(base + 16 * h + i) : 0u;
    Q35_UNROLL
    for (int i = 0; i < 9; ++i) r.qh[i] = i < n_qh ? arch::load_4(base + 32 + 8 * h + i) : 0u;
    const auto* s16 = reinterpret_cast<const uint16_t*>(b + 192 + o / 16);
    r.sc[0] = s16[0], r.sc[1] = s16[1];
    r.d = *reinterpret_cast<const uint16_t*>(b + 208);
  }
  static Q35_DEVICE void unpack(const raw& r, uint32_t (&q)[16], float (&f)[4]) {
    const int s = int(r.shift);
    Q35_UNROLL
    for (int j = 0; j < 2; ++j) {
      const int k = r.kk + j;  // quarter of the half
      Q35_UNROLL
      for (int i = 0; i < 8; ++i) {
        const uint32_t ql = arch::byte_window(r.ql[8 * j + i], r.ql[8 * j + i + 1], s);
        const uint32_t qh = arch::byte_window(r.qh[i], r.qh[i + 1], s);
        const uint32_t lo4 = (ql >> (4 * (k / 2))) & 0x0f0f0f0fu;  // nibble k / 2
        const uint32_t hi2 = ((qh >> (2 * k)) & 0x03030303u) << 4;
        q[8 * j + i] = q6_signed(lo4 | hi2);
      }
    }
    const float d = arch::f16_bits_to_float(uint16_t(r.d));
    const uint32_t sc = r.sc[0] | (r.sc[1] << 16);
    Q35_UNROLL
    for (int g = 0; g < 4; ++g) f[g] = arch::mul_rn(d, float(int8_t(uint8_t(sc >> (8 * g)))));
  }
  // Bytes n (0..63) to the two's complement bytes of n - 32: (n + 0x60) ^ 0x80 (no carries, as above).
  static Q35_DEVICE uint32_t q6_signed(uint32_t n) { return (n + 0x60606060u) ^ 0x80808080u; }
};

}  // namespace q35::ops
