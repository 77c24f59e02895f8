// Warp-level tensor-core matrix multiply-accumulate (mma.sync, PTX ISA "Warp-level matrix multiply-
// accumulate instructions"): D (16x8) = A (16xK, row) * B (Kx8, col) + C for
//   m16n8k16 f16 / bf16 inputs, f32 accumulators;  m16n8k32 and m16n8k16 s8/u8 inputs, s32 accumulators.
//
// Fragments are the per-lane registers the PTX ISA defines ("Matrix Fragments for mma.m16n8k16 /
// m16n8k32"); each type's coord(lane, i) gives the (row, col) of its element i held by `lane`, so
// kernels and tests never hand-code a layout. Element i of a 16-bit fragment is half (i % 2) of r[i / 2]
// (low half first); of an 8-bit fragment, byte (i % 4) of r[i / 4]; of an accumulator, r[i].
//
// All 32 lanes must call an mma together (the sim checks it). Numerics: the integer variants are exact
// (s32 wrap-around, no .satfinite). f16/bf16 on the sim: each product a*b is exact (formed in double,
// rounded to float, which is exact except a bf16 product outside the float range), the products are
// summed in float in k order starting from 0, then d = sum + c, so the sim is deterministic; tensor
// cores add in another order with truncation, so results differ in the last bits (tests bound it).
#pragma once

#include <cstdint>

#include "q35/core/config.hpp"

#if Q35_BACKEND_SIM
#include "q35/arch/shuffle.hpp"
#include "q35/arch/thread.hpp"
#include "q35/core/numeric.hpp"
#include "q35/sim/device_api.hpp"
#endif

namespace q35::arch {

// Position of one fragment element in its matrix.
struct mma_coord {
  int row, col;
  friend constexpr bool operator==(const mma_coord&, const mma_coord&) = default;
};

namespace detail {
Q35_HOST_DEVICE constexpr int mma_group(int lane) { return lane >> 2; }  // groupID
Q35_HOST_DEVICE constexpr int mma_thread(int lane) { return lane & 3; }  // threadID_in_group
}  // namespace detail

// m16n8k16 A, f16 or bf16: 16x16, 8 elements in 4 registers.
//   row = groupID (+8 for a2,a3,a6,a7), col = threadID_in_group * 2 + (i & 1) (+8 for a4..a7)
struct mma_a_f16_16x16 {
  static constexpr int rows = 16, cols = 16, n_elements = 8, element_bits = 16;
  uint32_t r[4];
  static constexpr mma_coord coord(int lane, int i) {
    return {detail::mma_group(lane) + 8 * ((i >> 1) & 1), detail::mma_thread(lane) * 2 + (i & 1) + 8 * (i >> 2)};
  }
};
// m16n8k16 B, f16 or bf16: 16x8 (k x n), 4 elements in 2 registers.
//   row = threadID_in_group * 2 + (i & 1) (+8 for b2,b3), col = groupID
struct mma_b_f16_16x8 {
  static constexpr int rows = 16, cols = 8, n_elements = 4, element_bits = 16;
  uint32_t r[2];
  static constexpr mma_coord coord(int lane, int i) {
    return {detail::mma_thread(lane) * 2 + (i & 1) + 8 * (i >> 1), detail::mma_group(lane)};
  }
};
using mma_a_bf16_16x16 = mma_a_f16_16x16;  // same registers and layout
using mma_b_bf16_16x8 = mma_b_f16_16x8;

// m16n8k32 A, s8 or u8: 16x32, 16 elements in 4 registers.
//   row = groupID (+8 for a4..a7, a12..a15), col = threadID_in_group * 4 + (i & 3) (+16 for a8..a15)
struct mma_a_i8_16x32 {
  static constexpr int rows = 16, cols = 32, n_elements = 16, element_bits = 8;
  uint32_t r[4];
  static constexpr mma_coord coord(int lane, int i) {
    return {detail::mma_group(lane) + 8 * ((i >> 2) & 1), detail::mma_thread(lane) * 4 + (i & 3) + 16 * (i >> 3)};
  }
};
// m16n8k32 B, s8 or u8: 32x8, 8 elements in 2 registers.
//   row = threadID_in_group * 4 + (i & 3) (+16 for b4..b7), col = groupID
struct mma_b_i8_32x8 {
  static constexpr int rows = 32, cols = 8, n_elements = 8, element_bits = 8;
  uint32_t r[2];
  static constexpr mma_coord coord(int lane, int i) {
    return {detail::mma_thread(lane) * 4 + (i & 3) + 16 * (i >> 2), detail::mma_group(lane)};
  }
};
// m16n8k16 A, s8 or u8: 16x16, 8 elements in 2 registers.
//   row = groupID (+8 for a4..a7), col = threadID_in_group * 4 + (i & 3)
struct mma_a_i8_16x16 {
  static constexpr int rows = 16, cols = 16, n_elements = 8, element_bits = 8;
  uint32_t r[2];
  static constexpr mma_coord coord(int lane, int i) {
    return {detail::mma_group(lane) + 8 * (i >> 2), detail::mma_thread(lane) * 4 + (i & 3)};
  }
};
// m16n8k16 B, s8 or u8: 16x8, 4 elements in 1 register.
//   row = threadID_in_group * 4 + i, col = groupID
struct mma_b_i8_16x8 {
  static constexpr int rows = 16, cols = 8, n_elements = 4, element_bits = 8;
  uint32_t r[1];
  static constexpr mma_coord coord(int lane, int i) {
    return {detail::mma_thread(lane) * 4 + i, detail::mma_group(lane)};
  }
};

// C and D, 16x8, 4 elements: row = groupID (+8 for c2,c3), col = threadID_in_group * 2 + (i & 1).
template <class T>
struct mma_c_16x8 {
  static constexpr int rows = 16, cols = 8, n_elements = 4, element_bits = 32;
  T r[4];
  static constexpr mma_coord coord(int lane, int i) {
    return {detail::mma_group(lane) + 8 * (i >> 1), detail::mma_thread(lane) * 2 + (i & 1)};
  }
};
using mma_c_f32_16x8 = mma_c_16x8<float>;
using mma_c_s32_16x8 = mma_c_16x8<int32_t>;

// Bits of element i of a 16- or 8-bit operand fragment (zero-extended), and setting them.
template <class Frag>
Q35_HOST_DEVICE uint32_t mma_element_bits(const Frag& f, int i) {
  constexpr int per_reg = 32 / Frag::element_bits;
  return (f.r[i / per_reg] >> (Frag::element_bits * (i % per_reg))) & ((1u << Frag::element_bits) - 1u);
}
template <class Frag>
Q35_HOST_DEVICE void mma_set_element_bits(Frag& f, int i, uint32_t bits) {
  constexpr int per_reg = 32 / Frag::element_bits;
  constexpr uint32_t ones = (1u << Frag::element_bits) - 1u;
  const int shift = Frag::element_bits * (i % per_reg);
  f.r[i / per_reg] = (f.r[i / per_reg] & ~(ones << shift)) | ((bits & ones) << shift);
}

// Signedness of an 8-bit mma operand; A and B choose independently.
enum class int8_type { s8, u8 };

#if Q35_BACKEND_SIM
namespace detail {

// Where lane l finds the A rows and B columns of its accumulator elements once every lane has published
// its A registers at words [0, na) and its B registers at [na, na + nb) of its scratch row: for row
// h (accumulator rows l/4 + 8 h) and k, the flat scratch word (lane * 16 + word) and the element's bit
// shift in it; likewise for column h (accumulator columns 2 (l%4) + h). Built once per fragment pair
// from the coord helpers.
template <class A, class B>
struct sim_operand_plan {
  static constexpr int na = int(sizeof(A::r) / sizeof(A::r[0])), k = A::cols;
  uint16_t a_word[warp_size][2][k], b_word[warp_size][2][k];
  uint8_t a_shift[warp_size][2][k], b_shift[warp_size][2][k];
  sim_operand_plan() {
    for (int from = 0; from < warp_size; ++from) {
      for (int i = 0; i < A::n_elements; ++i) {
        const mma_coord at = A::coord(from, i);
        constexpr int per_reg = 32 / A::element_bits;
        for (int l = 0; l < warp_size; ++l)
          for (int h = 0; h < 2; ++h)
            if (mma_c_16x8<float>::coord(l, 2 * h).row == at.row) {
              a_word[l][h][at.col] = uint16_t(from * 16 + i / per_reg);
              a_shift[l][h][at.col] = uint8_t(A::element_bits * (i % per_reg));
            }
      }
      for (int i = 0; i < B::n_elements; ++i) {
        const mma_coord at = B::coord(from, i);
        constexpr int per_reg = 32 / B::element_bits;
        for (int l = 0; l < warp_size; ++l)
          for (int h = 0; h < 2; ++h)
            if (mma_c_16x8<float>::coord(l, h).col == at.col) {
              b_word[l][h][at.row] = uint16_t(from * 16 + na + i / per_reg);
              b_shift[l][h][at.row] = uint8_t(B::element_bits * (i % per_reg));
            }
      }
    }
  }
};

// d = a * b + c for this lane's accumulator elements (see the file header for the order). The lanes
// publish their A and B registers in the warp's scratch and meet in a sync_warp over the full warp
// (so a partial warp is reported); each lane then reads the A rows and B columns of its accumulator
// elements, and a second sync_warp keeps the scratch until every lane has read it.
template <class A, class B, class Acc, class Decode, class Dot>
void sim_mma(mma_c_16x8<Acc>& d, const A& a, const B& b, const mma_c_16x8<Acc>& c, Decode decode_a, Decode decode_b,
             Dot dot) {
  static_assert(A::cols == B::rows && A::rows == 16 && B::cols == 8);
  using plan_t = sim_operand_plan<A, B>;
  constexpr int na = plan_t::na, nb = int(sizeof(b.r) / sizeof(b.r[0])), K = A::cols;
  static_assert(na + nb <= 16, "fragments fit the scratch row");
  static const plan_t plan;
  uint32_t(&scratch)[32][16] = sim::warp_scratch();
  const uint32_t* flat = &scratch[0][0];
  const int lane = lane_id();
  for (int i = 0; i < na; ++i) scratch[lane][i] = a.r[i];
  for (int i = 0; i < nb; ++i) scratch[lane][na + i] = b.r[i];
  sync_warp();
  using V = decltype(decode_a(0u));
  constexpr uint32_t a_ones = (1u << A::element_bits) - 1u, b_ones = (1u << B::element_bits) - 1u;
  // rows[h] = A row l/4 + 8 h; bm's columns 2 (l%4) + h (the only ones dot reads)
  V rows[2][K], bm[K][8];
  for (int h = 0; h < 2; ++h)
    for (int k = 0; k < K; ++k) {
      rows[h][k] = decode_a((flat[plan.a_word[lane][h][k]] >> plan.a_shift[lane][h][k]) & a_ones);
      bm[k][2 * (lane % 4) + h] = decode_b((flat[plan.b_word[lane][h][k]] >> plan.b_shift[lane][h][k]) & b_ones);
    }
  mma_c_16x8<Acc> r;
  for (int i = 0; i < 4; ++i) r.r[i] = dot(rows[i / 2], bm, mma_c_16x8<Acc>::coord(lane, i).col, c.r[i]);
  sync_warp();
  d = r;
}

template <int K>
float sim_dot_f32(const double (&arow)[K], const double (&bm)[K][8], int col, float c) {
  float sum = 0.0f;
  for (int k = 0; k < K; ++k) sum += float(arow[k] * bm[k][col]);
  return sum + c;
}

template <int K>
int32_t sim_dot_s32(const int32_t (&arow)[K], const int32_t (&bm)[K][8], int col, int32_t c) {
  uint32_t sum = uint32_t(c);  // s32 wrap-around
  for (int k = 0; k < K; ++k) sum += uint32_t(arow[k] * bm[k][col]);
  return int32_t(sum);
}

template <int8_type T>
inline int32_t sim_decode_i8(uint32_t bits) {
  return T == int8_type::s8 ? int32_t(int8_t(uint8_t(bits))) : int32_t(bits);
}

}  // namespace detail
#endif

// d = a * b + c, f16 inputs, f32 accumulators (d may be c).
Q35_DEVICE void mma_m16n8k16_f16(mma_c_f32_16x8& d, const mma_a_f16_16x16& a, const mma_b_f16_16x8& b,
                                 const mma_c_f32_16x8& c) {
#if Q35_BACKEND_CUDA
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%10,%11,%12,%13};\n"
      : "=f"(d.r[0]), "=f"(d.r[1]), "=f"(d.r[2]), "=f"(d.r[3])
      : "r"(a.r[0]), "r"(a.r[1]), "r"(a.r[2]), "r"(a.r[3]), "r"(b.r[0]), "r"(b.r[1]), "f"(c.r[0]), "f"(c.r[1]),
        "f"(c.r[2]), "f"(c.r[3]));
#else
  auto decode = [](uint32_t bits) { return double(half_bits_to_float(uint16_t(bits))); };
  detail::sim_mma(d, a, b, c, decode, decode,
                  [](auto& ar, auto& bm, int col, float cv) { return detail::sim_dot_f32<16>(ar, bm, col, cv); });
#endif
}

// d = a * b + c, bf16 inputs, f32 accumulators (d may be c).
Q35_DEVICE void mma_m16n8k16_bf16(mma_c_f32_16x8& d, const mma_a_bf16_16x16& a, const mma_b_bf16_16x8& b,
                                  const mma_c_f32_16x8& c) {
#if Q35_BACKEND_CUDA
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%10,%11,%12,%13};\n"
      : "=f"(d.r[0]), "=f"(d.r[1]), "=f"(d.r[2]), "=f"(d.r[3])
      : "r"(a.r[0]), "r"(a.r[1]), "r"(a.r[2]), "r"(a.r[3]), "r"(b.r[0]), "r"(b.r[1]), "f"(c.r[0]), "f"(c.r[1]),
        "f"(c.r[2]), "f"(c.r[3]));
#else
  auto decode = [](uint32_t bits) { return double(bf16_bits_to_float(uint16_t(bits))); };
  detail::sim_mma(d, a, b, c, decode, decode,
                  [](auto& ar, auto& bm, int col, float cv) { return detail::sim_dot_f32<16>(ar, bm, col, cv); });
#endif
}

#if Q35_BACKEND_CUDA
// One integer mma instruction: shape, A type, B type; operands as in the functions below.
#define Q35_MMA_I8_K32(AT, BT)                                                                              \
  asm volatile("mma.sync.aligned.m16n8k32.row.col.s32." AT "." BT                                           \
               ".s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%10,%11,%12,%13};\n"                           \
               : "=r"(d.r[0]), "=r"(d.r[1]), "=r"(d.r[2]), "=r"(d.r[3])                                     \
               : "r"(a.r[0]), "r"(a.r[1]), "r"(a.r[2]), "r"(a.r[3]), "r"(b.r[0]), "r"(b.r[1]), "r"(c.r[0]), \
                 "r"(c.r[1]), "r"(c.r[2]), "r"(c.r[3]))
#define Q35_MMA_I8_K16(AT, BT)                                          \
  asm volatile("mma.sync.aligned.m16n8k16.row.col.s32." AT "." BT       \
               ".s32 {%0,%1,%2,%3}, {%4,%5}, {%6}, {%7,%8,%9,%10};\n"   \
               : "=r"(d.r[0]), "=r"(d.r[1]), "=r"(d.r[2]), "=r"(d.r[3]) \
               : "r"(a.r[0]), "r"(a.r[1]), "r"(b.r[0]), "r"(c.r[0]), "r"(c.r[1]), "r"(c.r[2]), "r"(c.r[3]))
#endif

// d = a * b + c, 8-bit inputs of signedness A and B, s32 accumulators (wrap-around; d may be c).
template <int8_type AType, int8_type BType>
Q35_DEVICE void mma_m16n8k32_i8(mma_c_s32_16x8& d, const mma_a_i8_16x32& a, const mma_b_i8_32x8& b,
                                const mma_c_s32_16x8& c) {
#if Q35_BACKEND_CUDA
  constexpr bool as = AType == int8_type::s8, bs = BType == int8_type::s8;
  if constexpr (as && bs) Q35_MMA_I8_K32("s8", "s8");
  if constexpr (as && !bs) Q35_MMA_I8_K32("s8", "u8");
  if constexpr (!as && bs) Q35_MMA_I8_K32("u8", "s8");
  if constexpr (!as && !bs) Q35_MMA_I8_K32("u8", "u8");
#else
  detail::sim_mma(d, a, b, c, detail::sim_decode_i8<AType>, detail::sim_decode_i8<BType>,
                  [](auto& ar, auto& bm, int col, int32_t cv) { return detail::sim_dot_s32<32>(ar, bm, col, cv); });
#endif
}

// d = a * b + c, m16n8k16, 8-bit inputs of signedness A and B, s32 accumulators.
template <int8_type AType, int8_type BType>
Q35_DEVICE void mma_m16n8k16_i8(mma_c_s32_16x8& d, const mma_a_i8_16x16& a, const mma_b_i8_16x8& b,
                                const mma_c_s32_16x8& c) {
#if Q35_BACKEND_CUDA
  constexpr bool as = AType == int8_type::s8, bs = BType == int8_type::s8;
  if constexpr (as && bs) Q35_MMA_I8_K16("s8", "s8");
  if constexpr (as && !bs) Q35_MMA_I8_K16("s8", "u8");
  if constexpr (!as && bs) Q35_MMA_I8_K16("u8", "s8");
  if constexpr (!as && !bs) Q35_MMA_I8_K16("u8", "u8");
#else
  detail::sim_mma(d, a, b, c, detail::sim_decode_i8<AType>, detail::sim_decode_i8<BType>,
                  [](auto& ar, auto& bm, int col, int32_t cv) { return detail::sim_dot_s32<16>(ar, bm, col, cv); });
#endif
}

#if Q35_BACKEND_CUDA
#undef Q35_MMA_I8_K32
#undef Q35_MMA_I8_K16
#endif

// The four sign combinations by name (GGUF quants are u8 or s8; activation halves s8 (hi), u8 (lo)).
Q35_DEVICE void mma_m16n8k32_s8s8(mma_c_s32_16x8& d, const mma_a_i8_16x32& a, const mma_b_i8_32x8& b,
                                  const mma_c_s32_16x8& c) {
  mma_m16n8k32_i8<int8_type::s8, int8_type::s8>(d, a, b, c);
}
Q35_DEVICE void mma_m16n8k32_s8u8(mma_c_s32_16x8& d, const mma_a_i8_16x32& a, const mma_b_i8_32x8& b,
                                  const mma_c_s32_16x8& c) {
  mma_m16n8k32_i8<int8_type::s8, int8_type::u8>(d, a, b, c);
}
Q35_DEVICE void mma_m16n8k32_u8s8(mma_c_s32_16x8& d, const mma_a_i8_16x32& a, const mma_b_i8_32x8& b,
                                  const mma_c_s32_16x8& c) {
  mma_m16n8k32_i8<int8_type::u8, int8_type::s8>(d, a, b, c);
}
Q35_DEVICE void mma_m16n8k32_u8u8(mma_c_s32_16x8& d, const mma_a_i8_16x32& a, const mma_b_i8_32x8& b,
                                  const mma_c_s32_16x8& c) {
  mma_m16n8k32_i8<int8_type::u8, int8_type::u8>(d, a, b, c);
}

}  // namespace q35::arch
