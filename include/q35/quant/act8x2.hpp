// The GEMM's activations: the same 16-bit integers as quant/act16.hpp (one scale per 32 elements,
// quant::quantize_group), each stored as two bytes in separate planes so that int8 tensor cores can
// take them: q = 256 hi + lo with hi = q >> 8 (signed, -128..127) and lo = q & 255 (unsigned), and
// an integer dot product with them is exact: sum w q = 256 sum w hi + sum w lo.
//
// Layout of n_rows rows of `cols` elements (cols a multiple of 32) in one buffer, each part at a
// 16-byte boundary: the hi plane [n_rows][cols] (int8), the lo plane [n_rows][cols] (uint8), then the
// group records [n_rows][cols / 32] (act8x2_group: scale and sum of q, as act16_group's first two).
#pragma once

#include <cstddef>
#include <cstdint>

#include "q35/core/config.hpp"
#include "q35/core/numeric.hpp"
#include "q35/quant/act16.hpp"

namespace q35::quant {

struct act8x2_group {
  float scale;  // x ~= scale * q (NaN when the group holds a NaN or an infinity)
  float sum;    // sum of q over the group's 32 elements (exact)
};
static_assert(sizeof(act8x2_group) == 8);

// Read-only view of split rows: row t's planes at hi + t * cols, lo + t * cols, groups + t * cols / 32.
struct act8x2_view {
  const int8_t* hi = nullptr;
  const uint8_t* lo = nullptr;
  const act8x2_group* groups = nullptr;
  bool empty() const { return hi == nullptr; }
};

Q35_HOST_DEVICE constexpr size_t act8x2_plane_bytes(int64_t cols, int64_t n_rows) {
  return size_t(round_up<int64_t>(n_rows * cols, 16));
}
// Bytes of n_rows split rows of `cols` elements.
Q35_HOST_DEVICE constexpr size_t act8x2_bytes(int64_t cols, int64_t n_rows) {
  return 2 * act8x2_plane_bytes(cols, n_rows) + size_t(n_rows * (cols / act16_group_elems)) * sizeof(act8x2_group);
}

// The parts of a buffer laid out by act8x2_bytes (16-byte aligned).
template <class Byte>
Q35_HOST_DEVICE act8x2_view act8x2_layout(Byte* buffer, int64_t cols, int64_t n_rows) {
  const auto* b = reinterpret_cast<const uint8_t*>(buffer);
  const size_t plane = act8x2_plane_bytes(cols, n_rows);
  return {reinterpret_cast<const int8_t*>(b), b + plane, reinterpret_cast<const act8x2_group*>(b + 2 * plane)};
}

}  // namespace q35::quant
