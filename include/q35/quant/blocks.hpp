// GGUF block layouts (ggml-common.h) of the quantized types q35 reads, byte for byte. Scales are
// binary16 bit patterns (q35::half_bits_to_float); every struct's size is checked.
#pragma once

#include <cstdint>

namespace q35::quant {

// Elements per K-quant super-block (QK_K).
inline constexpr int qk_k = 256;
// Bytes of packed 6-bit scales and mins in Q4_K / Q5_K.
inline constexpr int k_scale_bytes = 12;

// One element of a plain type, as its bit pattern.
struct block_f32 {
  uint32_t bits;
};
struct block_f16 {
  uint16_t bits;
};
struct block_bf16 {
  uint16_t bits;
};

// 32 elements: w = d * q, q int8.
struct block_q8_0 {
  uint16_t d;     // f16 scale
  int8_t qs[32];  // quants
};

// 32 elements: w = d * (q - 8); element i < 16 in the low nibble of qs[i], i >= 16 in the high
// nibble of qs[i - 16].
struct block_q4_0 {
  uint16_t d;      // f16 scale
  uint8_t qs[16];  // nibbles
};

// 256 elements in 8 sub-blocks of 32: w = (d * sc[j]) * q - (dmin * m[j]), q in 0..15; sub-block
// 2c is the low nibble of qs[32c .. 32c+31], sub-block 2c+1 its high nibble.
struct block_q4_k {
  uint16_t d;                     // f16 super-block scale of the sub-block scales
  uint16_t dmin;                  // f16 super-block scale of the sub-block mins
  uint8_t scales[k_scale_bytes];  // 8 scales and 8 mins, 6 bits each (see unpack_scale_min_k4)
  uint8_t qs[qk_k / 2];           // nibbles
};

// As Q4_K with a fifth bit: q = nibble | ((qh[l] >> j) & 1) << 4 for element l of sub-block j.
struct block_q5_k {
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[k_scale_bytes];
  uint8_t qh[qk_k / 8];  // high bits, bit j of qh[l] belongs to sub-block j
  uint8_t qs[qk_k / 2];  // low nibbles
};

// 256 elements in 16 groups of 16: w = (d * scales[g]) * (q - 32), q 6 bits. Half h (128
// elements) element h*128 + 32k + l takes ql[64h + 32(k%2) + l] >> 4(k/2) (4 bits) and
// (qh[32h + l] >> 2k) & 3 (2 high bits).
struct block_q6_k {
  uint8_t ql[qk_k / 2];      // low 4 bits
  uint8_t qh[qk_k / 4];      // high 2 bits
  int8_t scales[qk_k / 16];  // int8 group scales
  uint16_t d;                // f16 super-block scale
};

static_assert(sizeof(block_f32) == 4 && sizeof(block_f16) == 2 && sizeof(block_bf16) == 2);
static_assert(sizeof(block_q8_0) == 34, "ggml block_q8_0 is 34 bytes");
static_assert(sizeof(block_q4_0) == 18, "ggml block_q4_0 is 18 bytes");
static_assert(sizeof(block_q4_k) == 144, "ggml block_q4_K is 144 bytes");
static_assert(sizeof(block_q5_k) == 176, "ggml block_q5_K is 176 bytes");
static_assert(sizeof(block_q6_k) == 210, "ggml block_q6_K is 210 bytes");

}  // namespace q35::quant
