// 16-bit integer activations for the GEMV engine: each group of 32 consecutive elements of a row is
// stored as q[i] = round(x[i] / scale) in int16 (|q| <= 32767) with one fp32 scale = max|x| / 32767,
// plus the sums of q the K-quant min terms and zero points need. x[i] ~= scale * q[i] with
// |x[i] - scale * q[i]| <= (0.5 + 2^-9) * scale (the division rounds once; see quantize_group).
//
// Layout of n_rows rows of `cols` elements (cols a multiple of 32) in one buffer: the int16 values
// [n_rows][cols], then (at a 16-byte boundary) the group records [n_rows][cols / 32].
#pragma once

#include <cfloat>
#include <cmath>
#include <cstddef>
#include <cstdint>

#include "q35/arch/dp2a.hpp"
#include "q35/arch/vector_load.hpp"
#include "q35/core/config.hpp"
#include "q35/core/vec.hpp"

namespace q35::quant {

// Elements sharing one activation scale.
inline constexpr int act16_group_elems = 32;
// Largest |q|.
inline constexpr int act16_qmax = 32767;

// One group's scale and sums of its quantized values (16 bytes, one vector load).
struct act16_group {
  float scale;           // x ~= scale * q; NaN when the group holds a NaN or an infinity
  float sum;             // sum of q over the 32 elements (exact: |sum| < 2^24)
  int32_t neg32_sum_lo;  // -32 * (sum of q over elements 0..15): Q6_K's offset, the start of its dp2a chain
  int32_t neg32_sum_hi;  // -32 * (sum of q over elements 16..31)
};
static_assert(sizeof(act16_group) == 16);

// Read-only view of quantized rows: row t's values at q + t * cols, its groups at groups + t * cols / 32.
struct act16_view {
  const int16_t* q = nullptr;           // [n_rows][cols], 16-byte aligned
  const act16_group* groups = nullptr;  // [n_rows][cols / 32], 16-byte aligned
  bool empty() const { return q == nullptr; }
};

// Bytes of n_rows quantized rows of `cols` elements.
Q35_HOST_DEVICE constexpr size_t act16_bytes(int64_t cols, int64_t n_rows) {
  return size_t(round_up<int64_t>(n_rows * cols * 2, 16) + n_rows * (cols / act16_group_elems) * 16);
}
// Offset of the group records inside the buffer.
Q35_HOST_DEVICE constexpr size_t act16_groups_offset(int64_t cols, int64_t n_rows) {
  return size_t(round_up<int64_t>(n_rows * cols * 2, 16));
}

// Quantizes one group: q[k] packs elements 2k (low half) and 2k + 1 (high half).
//   scale = max|x| / 32767, q = round_to_even(x / scale); a group of zeros (or one whose scale
//   underflows to 0) gets scale 0 and q = 0; a NaN or infinity makes scale NaN and q = 0, so every
//   dot with the group is NaN (as the float product would be NaN or infinite).
Q35_HOST_DEVICE void quantize_group(const float (&x)[act16_group_elems], uint32_t (&q)[act16_group_elems / 2],
                                    act16_group& g) {
  float amax = 0.0f;
  bool finite = true;
  Q35_UNROLL
  for (int i = 0; i < act16_group_elems; ++i) {
    const float a = std::fabs(x[i]);
    finite = finite && a <= FLT_MAX;
    amax = a > amax ? a : amax;
  }
  const float scale = amax / float(act16_qmax);
  const bool use = finite && scale > 0.0f;
  int32_t s_lo = 0, s_hi = 0;
  Q35_UNROLL
  for (int k = 0; k < act16_group_elems / 2; ++k) {
    int32_t v[2];
    Q35_UNROLL
    for (int h = 0; h < 2; ++h) {
      // |x / scale| <= 32767 (1 + 2^-23): rounds to at most 32767
      const int32_t r = use ? arch::float_to_int_rn(x[2 * k + h] / scale) : 0;
      v[h] = r > act16_qmax ? act16_qmax : r < -act16_qmax ? -act16_qmax : r;
    }
    q[k] = (uint32_t(v[0]) & 0xffffu) | (uint32_t(v[1]) << 16);
    (k < act16_group_elems / 4 ? s_lo : s_hi) += v[0] + v[1];
  }
  g.scale = finite ? scale : NAN;
  g.sum = float(s_lo + s_hi);
  g.neg32_sum_lo = -32 * s_lo;
  g.neg32_sum_hi = -32 * s_hi;
}

// Groups of 32 elements in n_rows rows of `cols` (a multiple of 32): the activation quantization
// kernels (kernels/gemv.hpp's act16, kernels/act8x2_quantize.hpp) run one thread per group.
Q35_HOST_DEVICE constexpr int64_t act16_group_count(int64_t n_rows, int64_t cols) {
  return n_rows * (cols / act16_group_elems);
}

// Group gi of fp32 rows x (16-byte aligned; rows are whole groups, so gi is a flat index), read in
// 16-byte loads and quantized by quantize_group: those kernels' per-thread body before their stores.
Q35_DEVICE void load_quantize_group(const float* x, int64_t gi, uint32_t (&q)[act16_group_elems / 2], act16_group& g) {
  constexpr int n = act16_group_elems;
  float v[n];
  Q35_UNROLL
  for (int k = 0; k < n / 4; ++k) {
    const vec16<float> w = arch::load_16(x + gi * n + 4 * k);
    Q35_UNROLL
    for (int i = 0; i < 4; ++i) v[4 * k + i] = w[i];
  }
  quantize_group(v, q, g);
}

}  // namespace q35::quant
