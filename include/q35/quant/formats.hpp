// Format traits of the GGUF types q35 supports, and the register-level dequantization every kernel
// shares (dequant kernel, GEMV, GEMM): `dequant_unit` turns 16 consecutive elements of a row into
// floats, bit-exact with ggml's reference dequantization (gguf.quants.dequantize).
//
// A row of a tensor is a sequence of blocks; unit u of a row covers its elements [16u, 16u + 16)
// (16 blocks of a plain type, or one sixteenth, half, ... of a quantized block). The math reads
// only the block bytes it is given, so it works on global memory, shared memory or host memory.
#pragma once

#include <concepts>
#include <cstdint>

#include "q35/arch/half_bits.hpp"
#include "q35/arch/rounded_math.hpp"
#include "q35/core/config.hpp"
#include "q35/core/numeric.hpp"
#include "q35/quant/blocks.hpp"
#include "q35/quant/scale_unpack.hpp"

namespace q35::quant {

// Elements produced by one dequant_unit call.
inline constexpr int unit_elems = 16;

// ggml_type ids (ggml.h) of the supported formats.
enum class type_id : uint32_t { f32 = 0, f16 = 1, q4_0 = 2, q8_0 = 8, q4_k = 12, q5_k = 13, q6_k = 14, bf16 = 30 };

// Shared members of every format: the block struct, its element/byte counts, id and name.
template <class Block, int BlockElems, type_id Id>
struct format_base {
  using block = Block;
  static constexpr int block_elems = BlockElems;
  static constexpr int block_bytes = int(sizeof(Block));
  static constexpr type_id id = Id;
  // Blocks spanned by one unit (plain types) or units per block (quantized types).
  static constexpr int blocks_per_unit = BlockElems >= unit_elems ? 1 : unit_elems / BlockElems;
  static constexpr int units_per_block = BlockElems >= unit_elems ? BlockElems / unit_elems : 1;
  // Bytes of weights per row of `cols` elements (cols a multiple of block_elems).
  static constexpr int64_t row_bytes(int64_t cols) { return cols / BlockElems * int64_t(sizeof(Block)); }
};

struct f32_format : format_base<block_f32, 1, type_id::f32> {
  static constexpr const char* name = "f32";
  static Q35_HOST_DEVICE float value(const block& b) { return bits_float(b.bits); }
  // w[i] = the float with bits b[i]
  static Q35_HOST_DEVICE void dequant_unit(const block* b, int, float (&w)[unit_elems]) {
    Q35_UNROLL
    for (int i = 0; i < unit_elems; ++i) w[i] = value(b[i]);
  }
};

struct f16_format : format_base<block_f16, 1, type_id::f16> {
  static constexpr const char* name = "f16";
  static Q35_HOST_DEVICE float value(const block& b) { return arch::f16_bits_to_float(b.bits); }
  // w[i] = binary16 b[i] widened (exact)
  static Q35_HOST_DEVICE void dequant_unit(const block* b, int, float (&w)[unit_elems]) {
    Q35_UNROLL
    for (int i = 0; i < unit_elems; ++i) w[i] = value(b[i]);
  }
};

struct bf16_format : format_base<block_bf16, 1, type_id::bf16> {
  static constexpr const char* name = "bf16";
  static Q35_HOST_DEVICE float value(const block& b) { return bf16_bits_to_float(b.bits); }
  // w[i] = bits << 16 (exact)
  static Q35_HOST_DEVICE void dequant_unit(const block* b, int, float (&w)[unit_elems]) {
    Q35_UNROLL
    for (int i = 0; i < unit_elems; ++i) w[i] = value(b[i]);
  }
};

struct q8_0_format : format_base<block_q8_0, 32, type_id::q8_0> {
  static constexpr const char* name = "q8_0";
  // unit k of 2: w[i] = q[16k + i] * d
  static Q35_HOST_DEVICE void dequant_unit(const block* b, int k, float (&w)[unit_elems]) {
    const float d = arch::f16_bits_to_float(b->d);
    Q35_UNROLL
    for (int i = 0; i < unit_elems; ++i) w[i] = arch::mul_rn(float(b->qs[16 * k + i]), d);
  }
};

struct q4_0_format : format_base<block_q4_0, 32, type_id::q4_0> {
  static constexpr const char* name = "q4_0";
  // unit k of 2: w[i] = d * (nibble k of qs[i] - 8)
  static Q35_HOST_DEVICE void dequant_unit(const block* b, int k, float (&w)[unit_elems]) {
    const float d = arch::f16_bits_to_float(b->d);
    Q35_UNROLL
    for (int i = 0; i < unit_elems; ++i) w[i] = arch::mul_rn(d, float(int((b->qs[i] >> (4 * k)) & 0xF) - 8));
  }
};

struct q4_k_format : format_base<block_q4_k, qk_k, type_id::q4_k> {
  static constexpr const char* name = "q4_K";
  // unit k of 16 = half k%2 of sub-block j = k/2:
  //   w[i] = (d * sc[j]) * q - (dmin * m[j]),  q = nibble j%2 of qs[32 (j/2) + 16 (k%2) + i]
  static Q35_HOST_DEVICE void dequant_unit(const block* b, int k, float (&w)[unit_elems]) {
    const int j = k / 2;
    const scale_min s = unpack_scale_min_k4(j, b->scales);
    const float d = arch::mul_rn(arch::f16_bits_to_float(b->d), float(s.sc));
    const float m = arch::mul_rn(arch::f16_bits_to_float(b->dmin), float(s.m));
    const uint8_t* q = b->qs + 32 * (j / 2) + 16 * (k % 2);
    const int shift = 4 * (j % 2);
    Q35_UNROLL
    for (int i = 0; i < unit_elems; ++i) w[i] = arch::sub_rn(arch::mul_rn(d, float((q[i] >> shift) & 0xF)), m);
  }
};

struct q5_k_format : format_base<block_q5_k, qk_k, type_id::q5_k> {
  static constexpr const char* name = "q5_K";
  // unit k of 16 = half k%2 of sub-block j = k/2, l = 16 (k%2) + i:
  //   w[i] = (d * sc[j]) * q - (dmin * m[j]),  q = nibble j%2 of qs[32 (j/2) + l] | ((qh[l] >> j) & 1) << 4
  static Q35_HOST_DEVICE void dequant_unit(const block* b, int k, float (&w)[unit_elems]) {
    const int j = k / 2;
    const scale_min s = unpack_scale_min_k4(j, b->scales);
    const float d = arch::mul_rn(arch::f16_bits_to_float(b->d), float(s.sc));
    const float m = arch::mul_rn(arch::f16_bits_to_float(b->dmin), float(s.m));
    const int l0 = 16 * (k % 2);
    const uint8_t* q = b->qs + 32 * (j / 2) + l0;
    const uint8_t* qh = b->qh + l0;
    const int shift = 4 * (j % 2);
    Q35_UNROLL
    for (int i = 0; i < unit_elems; ++i) {
      const int q5 = ((q[i] >> shift) & 0xF) | (((qh[i] >> j) & 1) << 4);
      w[i] = arch::sub_rn(arch::mul_rn(d, float(q5)), m);
    }
  }
};

struct q6_k_format : format_base<block_q6_k, qk_k, type_id::q6_k> {
  static constexpr const char* name = "q6_K";
  // unit g of 16 (one scale group): h = g / 8, c = (g % 8) / 2, l = 16 (g % 2) + i:
  //   w[i] = (d * scales[g]) * (q - 32),  q = (ql[64h + 32 (c%2) + l] >> 4 (c/2)) & 15 | ((qh[32h + l] >> 2c) & 3) << 4
  static Q35_HOST_DEVICE void dequant_unit(const block* b, int g, float (&w)[unit_elems]) {
    const int h = g / 8, c = (g % 8) / 2, l0 = 16 * (g % 2);
    const float d = arch::mul_rn(arch::f16_bits_to_float(b->d), float(b->scales[g]));
    const uint8_t* ql = b->ql + 64 * h + 32 * (c % 2) + l0;
    const uint8_t* qh = b->qh + 32 * h + l0;
    const int lo_shift = 4 * (c / 2), hi_shift = 2 * c;
    Q35_UNROLL
    for (int i = 0; i < unit_elems; ++i) {
      const int q6 = ((ql[i] >> lo_shift) & 0xF) | (((qh[i] >> hi_shift) & 3) << 4);
      w[i] = arch::mul_rn(d, float(q6 - 32));
    }
  }
};

// Elements [16u, 16u + 16) of a row whose first block is `row`.
template <class Format>
Q35_HOST_DEVICE void dequant_row_unit(const typename Format::block* row, int64_t u, float (&w)[unit_elems]) {
  if constexpr (Format::block_elems >= unit_elems) {
    Format::dequant_unit(row + u / Format::units_per_block, int(u % Format::units_per_block), w);
  } else {
    Format::dequant_unit(row + u * Format::blocks_per_unit, 0, w);
  }
}

template <class F>
concept weight_format = requires {
  typename F::block;
  { F::block_elems } -> std::convertible_to<int>;
  { F::block_bytes } -> std::convertible_to<int>;
  { F::name } -> std::convertible_to<const char*>;
}
&&F::block_bytes == int(sizeof(typename F::block)) &&
    (F::block_elems % unit_elems == 0 || unit_elems % F::block_elems == 0);

}  // namespace q35::quant
