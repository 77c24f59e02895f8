// ops::weight_row<T>: how a GEMV reads a row of a weight matrix stored as T, as floats. dense_row
// serves F32, F16 and BF16 (one 16-byte load at a time); a block-quantized GGUF format plugs in by
// specialising weight_row for its block type with the same three members (row, elems_per_load, load).
#pragma once

#include <bit>
#include <cstdint>
#include <type_traits>

#include "q35/arch/vector_load.hpp"
#include "q35/core/config.hpp"
#include "q35/core/numeric.hpp"
#include "q35/core/vec.hpp"

namespace q35::ops {

template <class T>
struct dense_row {
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, half> || std::is_same_v<T, bf16>,
                "dense_row: float, half or bf16");
  // Elements one load returns; row lengths must be a multiple of it.
  static constexpr int elems_per_load = elems_per_16_bytes<T>;

  // Row r of a row-major [rows, n_cols] matrix.
  static Q35_HOST_DEVICE const T* row(const T* base, int64_t r, int64_t n_cols) { return base + r * n_cols; }

  // out[i] = float(row[col + i]), i < elems_per_load; row + col 16-byte aligned. Weights are
  // streamed (read once per block), so the load does not allocate in L1.
  static Q35_DEVICE void load(const T* row, int64_t col, float (&out)[elems_per_load]) {
    if constexpr (std::is_same_v<T, float>) {
      const vec16<float> v = arch::load_16_stream(row + col);
      Q35_UNROLL
      for (int i = 0; i < elems_per_load; ++i) out[i] = v[i];
    } else {
      // 16-bit types travel as their bits (vec16<half> is not trivial on the sim)
      const vec16<uint16_t> v = arch::load_16_stream(reinterpret_cast<const uint16_t*>(row + col));
      Q35_UNROLL
      for (int i = 0; i < elems_per_load; ++i) out[i] = to_float(std::bit_cast<T>(v[i]));
    }
  }
};

// The row reader of weights stored as T; quantized formats specialise it.
template <class T>
struct weight_row : dense_row<T> {};

}  // namespace q35::ops
