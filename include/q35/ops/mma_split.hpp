// Fp32 matrix products on bf16 tensor cores at fp32 grade, for operands that are fp32 on both sides
// (the chunked Gated DeltaNet products). Each operand is held in shared memory as three bf16 planes
// whose sum is the fp32 value (ops::split_float: exact for |v| >= 2^-110, else within 2^-134), and a
// product sums the 6 part products a_i b_j with i + j <= 2; the dropped a1 b2 + a2 b1 + a2 b2 are
// <= 2^-23 (1 + 2^-9) |a b| (|a_1| <= 2^-8 |a|, |a_2| <= 2^-16 |a|, gemm_mma_float.hpp's F32 split).
//
// Error of one output (u = 2^-24): a product over n columns is a chain of N = 6 n / 16 mma into the
// accumulator, each d = c + 16 exact products within 17 2^-23 (|c| + sum |p|) (tests/arch/test_mma.cpp;
// the sim rounds to nearest, 2^-24), so
//   |err| <= (34 N + 2 + 2^-8) u sum_k |a_k b_k| = (12.75 n + 3) u sum_k |a_k b_k|   (mma_split_coef)
// against (n + 1) u for an fp32 dot: the price of the tensor cores' truncating adds, not of the split.
//
// Cost per 16 x 16 (n-tile pair) x 16 step and warp: 3 ldmatrix.x4 of B (plus 3 of A per 16 columns)
// and 12 mma.m16n8k16.bf16; splitting a value into its planes is ~10 instructions, paid once per
// element staged, not per product.
#pragma once

#include <cstdint>

#include "q35/arch/ldmatrix.hpp"
#include "q35/arch/mma.hpp"
#include "q35/arch/thread.hpp"
#include "q35/arch/vector_load.hpp"
#include "q35/core/config.hpp"
#include "q35/core/numeric.hpp"
#include "q35/core/vec.hpp"
#include "q35/ops/float_split.hpp"

namespace q35::ops {

// (12.75 n + 3): the error coefficient (in u = 2^-24, times sum |a_k b_k|) of an n-column split
// product (see the file header).
Q35_HOST_DEVICE constexpr double mma_split_coef(int n) { return 34.0 * 6.0 * n / 16.0 + 3.0; }

// An fp32 [Rows][Cols] matrix as 3 bf16 planes in shared memory. Rows are padded by 8 elements
// (16 bytes) to an odd number of 16-byte units, so the 8 rows of an ldmatrix phase (normal or
// transposed) fall on 8 different 4-bank groups: no bank conflicts.
template <int Rows, int Cols>
struct alignas(16) split_matrix {
  static constexpr int parts = 3, rows = Rows, cols = Cols, ld = Cols + 8;
  static_assert(Rows % 8 == 0 && Cols % 16 == 0 && (ld / 8) % 2 == 1, "16-byte rows, an odd count per row");
  uint16_t p[parts][Rows][ld];

  // element (r, c) <- v
  Q35_DEVICE void set(int r, int c, float v) {
    uint16_t b[parts];
    split_float<bf16>(v, b);
    Q35_UNROLL
    for (int j = 0; j < parts; ++j) p[j][r][c] = b[j];
  }
  // elements (r, c .. c + 7) <- v, c % 8 == 0: one 16-byte store per plane
  Q35_DEVICE void set8(int r, int c, const float (&v)[8]) {
    vec<uint32_t, 4> w[parts];
    Q35_UNROLL
    for (int e = 0; e < 8; e += 2) {
      uint16_t lo[parts], hi[parts];
      split_float<bf16>(v[e], lo);
      split_float<bf16>(v[e + 1], hi);
      Q35_UNROLL
      for (int j = 0; j < parts; ++j) w[j][e / 2] = uint32_t(lo[j]) | uint32_t(hi[j]) << 16;
    }
    Q35_UNROLL
    for (int j = 0; j < parts; ++j) arch::store_16(reinterpret_cast<uint32_t*>(&p[j][r][c]), w[j]);
  }
  // elements (r, c .. c + 7) <- src[0 .. 8) * scale (src 16-byte aligned: two 16-byte loads), or 0
  // when !valid (padding rows)
  Q35_DEVICE void load8(int r, int c, const float* src, bool valid, float scale = 1.0f) {
    float v[8] = {};
    if (valid) {
      Q35_UNROLL
      for (int h = 0; h < 2; ++h) {
        const vec<float, 4> x = arch::load_16(src + 4 * h);
        Q35_UNROLL
        for (int q = 0; q < 4; ++q) v[4 * h + q] = x[q] * scale;
      }
    }
    set8(r, c, v);
  }
};

// acc[n] += A[a_row .. a_row + 16)[k0 .. k0 + K) B for the warp's n8 tiles n < NT, with B
//   BTrans = false: stored [n][k] (B^T row-major): tile n is B rows b_off + 8 n .. + 8, columns k0 ..;
//   BTrans = true:  stored [k][n]: tile n is B rows k0 .., columns b_off + 8 n .. + 8.
// Only the first n_pairs pairs of n-tiles are computed (warp-uniform), the rest left unchanged.
// a_k0: the first column A holds (A's planes hold columns a_k0 .. of the product's index, for an A
// staged a part at a time; 0: all of them). All 32 lanes of the warp must call it.
template <bool BTrans, int NT, int K, class MA, class MB>
Q35_DEVICE void mma_split_product(arch::mma_c_f32_16x8 (&acc)[NT], const MA& a, int a_row, const MB& b, int b_off,
                                  int k0, int n_pairs = NT / 2, int a_k0 = 0) {
  static_assert(NT % 2 == 0 && K % 16 == 0, "pairs of n-tiles, 16-column steps");
  const int lane = arch::lane_id(), mi = lane / 8, ri = lane % 8;  // ldmatrix: the lane's matrix and row
  // a loop, not unrolled: one step's fragments are live at a time
  Q35_NO_UNROLL
  for (int kk = k0; kk < k0 + K; kk += 16) {
    // A: matrices rows + 8 (mi % 2), columns + 8 (mi / 2) -> a0a1, a2a3, a4a5, a6a7
    arch::mma_a_bf16_16x16 af[MA::parts];
    Q35_UNROLL
    for (int j = 0; j < MA::parts; ++j)
      arch::ldmatrix_x4(af[j].r, &a.p[j][a_row + ri + 8 * (mi % 2)][kk - a_k0 + 8 * (mi / 2)]);
    Q35_UNROLL
    for (int g = 0; g < NT / 2; ++g) {
      if (g >= n_pairs) break;
      // B, tiles 2 g and 2 g + 1: {d0, d1} and {d2, d3}
      arch::mma_b_bf16_16x8 bf[MB::parts][2];
      Q35_UNROLL
      for (int j = 0; j < MB::parts; ++j) {
        uint32_t d[4];
        if constexpr (BTrans)
          arch::ldmatrix_x4_trans(d, &b.p[j][kk + ri + 8 * (mi % 2)][b_off + 16 * g + 8 * (mi / 2)]);
        else
          arch::ldmatrix_x4(d, &b.p[j][b_off + 16 * g + ri + 8 * (mi / 2)][kk + 8 * (mi % 2)]);
        bf[j][0].r[0] = d[0], bf[j][0].r[1] = d[1];
        bf[j][1].r[0] = d[2], bf[j][1].r[1] = d[3];
      }
      // the 6 part products, smallest first
      Q35_UNROLL
      for (int n = 0; n < 2; ++n) {
        arch::mma_c_f32_16x8& c = acc[2 * g + n];
        arch::mma_m16n8k16_bf16(c, af[2], bf[0][n], c);
        arch::mma_m16n8k16_bf16(c, af[1], bf[1][n], c);
        arch::mma_m16n8k16_bf16(c, af[0], bf[2][n], c);
        arch::mma_m16n8k16_bf16(c, af[1], bf[0][n], c);
        arch::mma_m16n8k16_bf16(c, af[0], bf[1][n], c);
        arch::mma_m16n8k16_bf16(c, af[0], bf[0][n], c);
      }
    }
  }
}

// The (row, col) of accumulator element i of this lane in a 16 x 8 tile at (row0, col0).
Q35_DEVICE arch::mma_coord mma_acc_at(int row0, int col0, int i) {
  const arch::mma_coord c = arch::mma_c_f32_16x8::coord(arch::lane_id(), i);
  return {row0 + c.row, col0 + c.col};
}

}  // namespace q35::ops
