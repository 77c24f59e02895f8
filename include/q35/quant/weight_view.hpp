// quant::weight_view: a weight tensor in device memory as a kernel sees it, with its GGUF format
// known only at run time: data pointer, ggml type id and shape (ne0 = cols, ne1 = rows, ne2 =
// matrices, e.g. experts). Launchers turn it into typed block pointers through quant::with_format.
#pragma once

#include <cstdint>

#include "q35/quant/format_list.hpp"

namespace q35::quant {

struct weight_view {
  const void* data = nullptr;    // device memory: n_mats matrices of rows x cols in the GGUF block layout
  uint32_t type = 0;             // ggml type id (quant::type_id values)
  int64_t cols = 0;              // ne0: input width, contiguous
  int64_t rows = 0;              // ne1: outputs
  int64_t n_mats = 1;            // ne2: matrices (experts of a 3-D tensor), else 1
  int64_t mat_stride_bytes = 0;  // bytes from matrix e to e + 1; 0: rows * row_bytes() (packed)

  bool empty() const { return data == nullptr; }
  // Bytes of one row (cols must be a multiple of the block size; 0 for an unsupported type).
  int64_t row_bytes() const {
    int64_t b = 0;
    (void)with_format(type, [&](auto tag) { b = decltype(tag)::type::row_bytes(cols); });
    return b;
  }
  int64_t stride_bytes() const { return mat_stride_bytes ? mat_stride_bytes : rows * row_bytes(); }

  // Rows [first, first + n) of every matrix, as a view with the same matrix stride (for merged
  // tensors such as ffn_gate_up_exps: gate = rows(0, ff), up = rows(ff, ff)).
  weight_view row_range(int64_t first, int64_t n) const {
    weight_view v = *this;
    v.mat_stride_bytes = stride_bytes();
    v.data = static_cast<const uint8_t*>(data) + first * row_bytes();
    v.rows = n;
    return v;
  }
  // Matrix e alone (a 2-D view).
  weight_view matrix(int64_t e) const {
    weight_view v = *this;
    v.data = static_cast<const uint8_t*>(data) + e * stride_bytes();
    v.n_mats = 1;
    v.mat_stride_bytes = 0;
    return v;
  }
};

}  // namespace q35::quant
