// ops::dot16<Format, LoadBytes>: one lane's work item of the GEMV engine's integer path: a run of
// whole blocks of one weight row (item_bytes, a multiple of LoadBytes, loaded as independent loads of
// LoadBytes: 16 for every format; Q6_K also 8 and 4, for rows only that aligned) dotted with up to
// NTokens rows of 16-bit activations (quant/act16.hpp).
//
// Per 32-element activation group (16 for Q6_K's scales) the products are summed exactly in int32
// by dp2a, then scaled in fp32:  acc += scale_g * (d_sub * S_qx - m_sub * S_q)  (K-quant min), or
// acc += scale_g * d * (S_qx - zero * S_q)  (zero point folded into the integer sum, which starts
// from the group record's -32 S_q).
// Formats without a specialisation (f32, f16, bf16) take the engine's float path.
#pragma once

#include <cstdint>

#include "q35/arch/dp2a.hpp"
#include "q35/arch/half_bits.hpp"
#include "q35/arch/rounded_math.hpp"
#include "q35/arch/vector_load.hpp"
#include "q35/core/config.hpp"
#include "q35/core/numeric.hpp"
#include "q35/core/vec.hpp"
#include "q35/quant/act16.hpp"
#include "q35/quant/dot16.hpp"
#include "q35/quant/formats.hpp"

namespace q35::ops {

// The quantized activations one pass reads: token t's elements at q + t * cols, groups at
// groups + t * cols / 32 (expert mode: the pair's activation row).
struct act16_in {
  const int16_t* q;
  const quant::act16_group* groups;
  int64_t cols;
};

namespace detail {

// N 16-byte words at p (16-byte aligned) into 4N registers; every load is issued before any use.
template <int N>
Q35_DEVICE void load_words(const uint8_t* p, uint32_t (&w)[4 * N]) {
  Q35_UNROLL
  for (int k = 0; k < N; ++k) {
    const vec16<uint32_t> v = arch::load_16(reinterpret_cast<const uint32_t*>(p) + 4 * k);
    Q35_UNROLL
    for (int i = 0; i < 4; ++i) w[4 * k + i] = v[i];
  }
}

// Activation group g0 + gi (elements 32 (g0 + gi) ...) of token t: 16 words and the group record.
// gi is a compile-time constant after unrolling, so it folds into the loads' immediate offsets.
Q35_DEVICE void load_group(const act16_in& in, int t, int64_t g0, int gi, uint32_t (&x)[16], quant::act16_group& g) {
  const int64_t row_groups = in.cols / quant::act16_group_elems;
  const auto* q = reinterpret_cast<const uint32_t*>(in.q) + (t * row_groups + g0) * 16 + gi * 16;
  Q35_UNROLL
  for (int k = 0; k < 4; ++k) {
    const vec16<uint32_t> v = arch::load_16(q + 4 * k);
    Q35_UNROLL
    for (int i = 0; i < 4; ++i) x[4 * k + i] = v[i];
  }
  const vec16<uint32_t> r = arch::load_16(reinterpret_cast<const uint32_t*>(in.groups + (t * row_groups + g0) + gi));
  g.scale = bits_float(r[0]);
  g.sum = bits_float(r[1]);
  g.neg32_sum_lo = int32_t(r[2]);
  g.neg32_sum_hi = int32_t(r[3]);
}

// NWords words at p through loads of LoadBytes (16, 8 or 4; p LoadBytes-aligned, NWords a multiple of
// LoadBytes / 4); every load is issued before any use.
template <int LoadBytes, int NWords>
Q35_DEVICE void load_span(const uint8_t* p, uint32_t (&w)[NWords]) {
  static_assert(NWords % (LoadBytes / 4) == 0, "whole loads");
  const auto* q = reinterpret_cast<const uint32_t*>(p);
  if constexpr (LoadBytes == 16) {
    load_words<NWords / 4>(p, w);
  } else if constexpr (LoadBytes == 8) {
    Q35_UNROLL
    for (int k = 0; k < NWords / 2; ++k) {
      const vec<uint32_t, 2> v = arch::load_8(q + 2 * k);
      w[2 * k] = v[0], w[2 * k + 1] = v[1];
    }
  } else {
    static_assert(LoadBytes == 4, "16-, 8- or 4-byte loads");
    Q35_UNROLL
    for (int k = 0; k < NWords; ++k) w[k] = arch::load_4(q + k);
  }
}

// The 4 bytes at byte offset `b` (a compile-time constant after unrolling) of words u.
template <int N>
Q35_DEVICE uint32_t word_at(const uint32_t (&u)[N], int b) {
  const int i = b / 4, next = i + 1 < N ? i + 1 : i;  // `next` is read only when b % 4 != 0 (then i + 1 < N)
  return b % 4 == 0 ? u[i] : arch::byte_window(u[i], u[next], b % 4);
}
// The binary16 at byte offset b (even) of words u, widened to float.
template <int N>
Q35_DEVICE float half_at(const uint32_t (&u)[N], int b) {
  return arch::f16_bits_to_float(uint16_t(u[b / 4] >> (8 * (b % 4))));
}

}  // namespace detail

// Specialised for the formats with an integer path; LoadBytes is the width of the item's loads
// (16 for every format; Q6_K also has 8 and 4, for rows its 16-byte item does not tile).
template <class Format, int LoadBytes = 16>
struct dot16;

template <class Format>
concept has_dot16 = requires {
  dot16<Format>::item_elems;
};
template <class Format, int LoadBytes>
concept has_dot16_loads = requires {
  dot16<Format, LoadBytes>::item_elems;
};

// Q4_K: an item is one block (144 bytes = 9 loads, 256 weights). Sub-block 2c is the low nibbles of
// qs[32c .. 32c + 31], 2c + 1 the high nibbles; the high ones are used in place (16 q, 1/16 folded
// into the scale) so each quant word costs one LOP3.
template <>
struct dot16<quant::q4_k_format> {
  static constexpr int item_blocks = 1, item_elems = 256, item_bytes = 144;
  template <int NTokens>
  static Q35_DEVICE void dot(const uint8_t* item, const act16_in& in, int64_t g0, int n_tok, float (&acc)[NTokens]) {
    uint32_t w[36];  // d | dmin << 16, scales[12], qs[128]
    detail::load_words<9>(item, w);
    const float d = detail::half_at(w, 0), dmin = detail::half_at(w, 2);
    const quant::k4_scale_bytes s = quant::unpack_k4_scale_bytes(w[1], w[2], w[3]);
    Q35_UNROLL
    for (int c = 0; c < 4; ++c) {
      uint32_t lo[8], hi[8];
      Q35_UNROLL
      for (int i = 0; i < 8; ++i) lo[i] = w[4 + 8 * c + i] & 0x0f0f0f0fu, hi[i] = w[4 + 8 * c + i] & 0xf0f0f0f0u;
      const uint32_t sc = c < 2 ? s.sc_lo : s.sc_hi, m = c < 2 ? s.m_lo : s.m_hi;
      // d_j = d * sc_j, m_j = dmin * m_j (rounded as ggml does; exact for f16 d and 6-bit sc)
      const float d0 = arch::mul_rn(d, float(quant::byte_of(sc, (2 * c) % 4)));
      const float m0 = arch::mul_rn(dmin, float(quant::byte_of(m, (2 * c) % 4)));
      const float d1 = arch::mul_rn(d, float(quant::byte_of(sc, (2 * c + 1) % 4))) * 0.0625f;
      const float m1 = arch::mul_rn(dmin, float(quant::byte_of(m, (2 * c + 1) % 4)));
      Q35_UNROLL
      for (int t = 0; t < NTokens; ++t) {
        if (t >= n_tok) break;
        uint32_t x[16];
        quant::act16_group g;
        detail::load_group(in, t, g0, 2 * c, x, g);
        // acc += scale * (d_j * sum q x - m_j * sum x)
        acc[t] += g.scale * (d0 * arch::int_to_float_rn(quant::dot_u8<8>(lo, x)) - m0 * g.sum);
        detail::load_group(in, t, g0, 2 * c + 1, x, g);
        acc[t] += g.scale * (d1 * arch::int_to_float_rn(quant::dot_u8<8>(hi, x)) - m1 * g.sum);
      }
    }
  }
};

// Q5_K: one block (176 bytes = 11 loads): as Q4_K with the fifth bit of element l of sub-block j
// in bit j of qh[l].
template <>
struct dot16<quant::q5_k_format> {
  static constexpr int item_blocks = 1, item_elems = 256, item_bytes = 176;
  template <int NTokens>
  static Q35_DEVICE void dot(const uint8_t* item, const act16_in& in, int64_t g0, int n_tok, float (&acc)[NTokens]) {
    uint32_t w[44];  // d | dmin << 16, scales[12], qh[32], qs[128]
    detail::load_words<11>(item, w);
    const float d = detail::half_at(w, 0), dmin = detail::half_at(w, 2);
    const quant::k4_scale_bytes s = quant::unpack_k4_scale_bytes(w[1], w[2], w[3]);
    Q35_UNROLL
    for (int c = 0; c < 4; ++c) {
      uint32_t lo[8], hi[8];
      Q35_UNROLL
      for (int i = 0; i < 8; ++i) {
        lo[i] = quant::q5_word(0, 2 * c, w[12 + 8 * c + i], w[4 + i]);
        hi[i] = quant::q5_word(1, 2 * c + 1, w[12 + 8 * c + i], w[4 + i]);
      }
      const uint32_t sc = c < 2 ? s.sc_lo : s.sc_hi, m = c < 2 ? s.m_lo : s.m_hi;
      const float d0 = arch::mul_rn(d, float(quant::byte_of(sc, (2 * c) % 4)));
      const float m0 = arch::mul_rn(dmin, float(quant::byte_of(m, (2 * c) % 4)));
      const float d1 = arch::mul_rn(d, float(quant::byte_of(sc, (2 * c + 1) % 4)));
      const float m1 = arch::mul_rn(dmin, float(quant::byte_of(m, (2 * c + 1) % 4)));
      Q35_UNROLL
      for (int t = 0; t < NTokens; ++t) {
        if (t >= n_tok) break;
        uint32_t x[16];
        quant::act16_group g;
        detail::load_group(in, t, g0, 2 * c, x, g);
        acc[t] += g.scale * (d0 * arch::int_to_float_rn(quant::dot_u8<8>(lo, x)) - m0 * g.sum);
        detail::load_group(in, t, g0, 2 * c + 1, x, g);
        acc[t] += g.scale * (d1 * arch::int_to_float_rn(quant::dot_u8<8>(hi, x)) - m1 * g.sum);
      }
    }
  }
};

// Q6_K: an item is LoadBytes / 2 blocks read as 105 loads of LoadBytes: 8 blocks (1680 bytes, 2048
// weights) in 16-byte loads where rows are a multiple of 2048 weights; for the other widths of
// Qwen3.5 files (1024, 2560, 3584, 5120, 9216, 17408: rows of 210 n bytes are then only 8- or
// 4-byte aligned) 4 blocks in 8-byte loads (rows a multiple of 1024) or 2 blocks in 4-byte loads
// (rows a multiple of 512). Block j starts at byte 210 j = 208 j + 2 j of the item: its loads cover
// bytes [208 j, 208 j + 4 span_words) (every LoadBytes-aligned) and the block sits at the
// compile-time phase 2 j in them; blocks go one at a time. The offset 32 is removed in the integer
// sum: S = sum q x - 32 sum x.
//
// dot_rows<BlocksPerRow> reads the same blocks as item_blocks / BlocksPerRow consecutive rows of
// BlocksPerRow blocks each (16-byte loads: rows of 512 or 1024 weights, e.g. the 35B-A3B expert down
// projection: 4 rows of 420 bytes are one 16-byte aligned item): block j adds to acc[j / BlocksPerRow]
// with the activation groups of its place in its row.
template <int LoadBytes>
requires(LoadBytes == 16 || LoadBytes == 8 || LoadBytes == 4) struct dot16<quant::q6_k_format, LoadBytes> {
  static constexpr int item_blocks = LoadBytes / 2, item_elems = 256 * item_blocks, item_bytes = 210 * item_blocks;
  static_assert(item_bytes == 105 * LoadBytes, "105 loads per item");
  // Words of one block's loads: the block's 210 bytes after its phase 2 j <= 2 (item_blocks - 1),
  // rounded up to whole loads (56 / 54 / 53 words for 16 / 8 / 4-byte loads).
  static constexpr int span_words = (2 * (item_blocks - 1) + 210 + LoadBytes - 1) / LoadBytes * (LoadBytes / 4);
  static_assert(208 * (item_blocks - 1) + 4 * span_words == item_bytes, "the last block's loads end at the item's end");

  template <int NTokens>
  static Q35_DEVICE void dot(const uint8_t* item, const act16_in& in, int64_t g0, int n_tok, float (&acc)[NTokens]) {
    dot_rows<item_blocks, NTokens>(item, in, g0, n_tok, reinterpret_cast<float(&)[1][NTokens]>(acc));
  }

  template <int BlocksPerRow, int NTokens>
  static Q35_DEVICE void dot_rows(const uint8_t* item, const act16_in& in, int64_t g0, int n_tok,
                                  float (&acc)[item_blocks / BlocksPerRow][NTokens]) {
    static_assert(BlocksPerRow >= 2 && item_blocks % BlocksPerRow == 0, "whole rows in one item");
    Q35_UNROLL
    for (int j = 0; j < item_blocks; ++j) {
      const int row = j / BlocksPerRow, jr = j % BlocksPerRow;  // the block's row and place in it
      uint32_t u[span_words];  // bytes [208 j, 208 j + 4 span_words) of the item; block j starts at byte 2 j of them
      detail::load_span<LoadBytes>(item + 16 * 13 * j, u);
      const int ph = 2 * j;
      const float d = detail::half_at(u, ph + 208);
      float ds[16];  // d * scales[g] (exact: 11 x 8 bits)
      Q35_UNROLL
      for (int k = 0; k < 4; ++k) {
        const uint32_t sw = detail::word_at(u, ph + 192 + 4 * k);
        Q35_UNROLL
        for (int i = 0; i < 4; ++i) ds[4 * k + i] = arch::mul_rn(d, float(int8_t(uint8_t(sw >> (8 * i)))));
      }
      Q35_UNROLL
      for (int h = 0; h < 2; ++h) {
        Q35_UNROLL
        for (int k = 0; k < 4; ++k) {
          // elements 128 h + 32 k + l: ql[64 h + 32 (k % 2) + l] >> 4 (k / 2), qh[32 h + l] >> 2 k (for odd j
          // each word is a funnel shift of two loaded words, which ptxas merges with the nibble shift)
          uint32_t q[8];
          Q35_UNROLL
          for (int i = 0; i < 8; ++i)
            q[i] = quant::q6_word(k, detail::word_at(u, ph + 64 * h + 32 * (k % 2) + 4 * i),
                                  detail::word_at(u, ph + 128 + 32 * h + 4 * i));
          const int sg = 8 * h + 2 * k;  // scale group of elements l < 16; sg + 1 for l >= 16
          Q35_UNROLL
          for (int t = 0; t < NTokens; ++t) {
            if (t >= n_tok) break;
            uint32_t x[16];
            quant::act16_group g;
            detail::load_group(in, t, g0, 8 * jr + 4 * h + k, x, g);
            const int32_t s0 = quant::dot_u8<4>(q, x, g.neg32_sum_lo);
            const int32_t s1 = quant::dot_u8<4>(q + 4, x + 8, g.neg32_sum_hi);
            // acc += scale * (d sc_a * sum (q - 32) x + d sc_b * ...)
            acc[row][t] += g.scale * (ds[sg] * arch::int_to_float_rn(s0) + ds[sg + 1] * arch::int_to_float_rn(s1));
          }
        }
      }
    }
  }
};

// Q8_0: an item is 8 blocks (272 bytes = 17 loads, 256 weights); block j at byte 34 j.
template <>
struct dot16<quant::q8_0_format> {
  static constexpr int item_blocks = 8, item_elems = 256, item_bytes = 272;
  template <int NTokens>
  static Q35_DEVICE void dot(const uint8_t* item, const act16_in& in, int64_t g0, int n_tok, float (&acc)[NTokens]) {
    uint32_t u[68];
    detail::load_words<17>(item, u);
    Q35_UNROLL
    for (int j = 0; j < 8; ++j) {
      const float d = detail::half_at(u, 34 * j);
      uint32_t q[8];
      Q35_UNROLL
      for (int i = 0; i < 8; ++i) q[i] = detail::word_at(u, 34 * j + 2 + 4 * i);
      Q35_UNROLL
      for (int t = 0; t < NTokens; ++t) {
        if (t >= n_tok) break;
        uint32_t x[16];
        quant::act16_group g;
        detail::load_group(in, t, g0, j, x, g);
        // acc += scale * d * sum q x
        acc[t] += g.scale * (d * arch::int_to_float_rn(quant::dot_s8<8>(q, x)));
      }
    }
  }
};

// Q4_0: an item is 8 blocks (144 bytes = 9 loads, 256 weights); block j at byte 18 j; element
// i < 16 in the low nibble of qs[i], i >= 16 in the high nibble of qs[i - 16]; S = sum q x - 8 sum x.
template <>
struct dot16<quant::q4_0_format> {
  static constexpr int item_blocks = 8, item_elems = 256, item_bytes = 144;
  template <int NTokens>
  static Q35_DEVICE void dot(const uint8_t* item, const act16_in& in, int64_t g0, int n_tok, float (&acc)[NTokens]) {
    uint32_t u[36];
    detail::load_words<9>(item, u);
    Q35_UNROLL
    for (int j = 0; j < 8; ++j) {
      const float d = detail::half_at(u, 18 * j);
      uint32_t q[8];
      Q35_UNROLL
      for (int i = 0; i < 4; ++i) {
        const uint32_t qs = detail::word_at(u, 18 * j + 2 + 4 * i);
        q[i] = qs & 0x0f0f0f0fu, q[4 + i] = (qs >> 4) & 0x0f0f0f0fu;
      }
      Q35_UNROLL
      for (int t = 0; t < NTokens; ++t) {
        if (t >= n_tok) break;
        uint32_t x[16];
        quant::act16_group g;
        detail::load_group(in, t, g0, j, x, g);
        const int32_t s = quant::dot_u8<8>(q, x, (g.neg32_sum_lo + g.neg32_sum_hi) >> 2);  // -8 sum q (exact)
        acc[t] += g.scale * (d * arch::int_to_float_rn(s));
      }
    }
  }
};

}  // namespace q35::ops
