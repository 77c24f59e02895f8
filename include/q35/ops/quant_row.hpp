// ops::weight_row for the GGUF block formats: a GEMV reads a quantized weight row as floats, 16
// elements (one quant::dequant_unit) at a time, with the same bit-exact math as the dequant kernel.
#pragma once

#include <cstdint>

#include "q35/core/config.hpp"
#include "q35/ops/dense_row.hpp"
#include "q35/quant/formats.hpp"

namespace q35::ops {

template <quant::weight_format Format>
struct quant_row {
  using block = typename Format::block;
  // Elements one load returns; row lengths must be a multiple of block_elems (and of it).
  static constexpr int elems_per_load = quant::unit_elems;
  static constexpr int block_elems = Format::block_elems;

  // Row r of a [rows, n_cols] matrix stored as rows of n_cols / block_elems blocks.
  static Q35_HOST_DEVICE const block* row(const block* base, int64_t r, int64_t n_cols) {
    return base + r * (n_cols / Format::block_elems);
  }

  // out[i] = element col + i of the row, i < 16 (col a multiple of 16).
  static Q35_DEVICE void load(const block* row, int64_t col, float (&out)[elems_per_load]) {
    quant::dequant_row_unit<Format>(row, col / quant::unit_elems, out);
  }
};

template <>
struct weight_row<quant::block_q8_0> : quant_row<quant::q8_0_format> {};
template <>
struct weight_row<quant::block_q4_0> : quant_row<quant::q4_0_format> {};
template <>
struct weight_row<quant::block_q4_k> : quant_row<quant::q4_k_format> {};
template <>
struct weight_row<quant::block_q5_k> : quant_row<quant::q5_k_format> {};
template <>
struct weight_row<quant::block_q6_k> : quant_row<quant::q6_k_format> {};

}  // namespace q35::ops
