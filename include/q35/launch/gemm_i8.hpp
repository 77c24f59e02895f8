// Host API of the int8 tensor-core prompt path (kernels/gemm_i8.hpp):
//   quantize_act8x2(x, ...)   fp32 rows -> the split 16-bit activations the GEMM reads (1 launch)
//   gemm_i8<Format>(args)     Y = X W^T (+ epilogue) for a GGUF integer format          (1 launch)
#pragma once

#include <cstdint>
#include <string>

#include "q35/core/dispatch.hpp"
#include "q35/core/status.hpp"
#include "q35/kernels/gemm_i8.hpp"
#include "q35/launch/launch.hpp"

namespace q35::launch {

// Formats the int8 GEMM takes (the GGUF integer quants).
template <class Format>
inline constexpr bool gemm_i8_supports = ops::has_i8_stage<Format>;

template <quant::weight_format Format>
struct gemm_i8_args {
  const typename Format::block* w = nullptr;           // [rows][cols]
  const typename Format::block* maybe_w_up = nullptr;  // swiglu: the up matrix (w is the gate)
  quant::act8x2_view x;                                // [n_tokens][cols] (quantize_act8x2)
  float* y = nullptr;                                  // [n_tokens][rows]
  int64_t rows = 0, cols = 0, n_tokens = 0;
  ops::epilogue epilogue = ops::epilogue::store;
};

template <quant::weight_format Format>
requires gemm_i8_supports<Format> status validate(const gemm_i8_args<Format>& a) {
  const std::string what = std::string("gemm_i8 ") + Format::name + ": ";
  auto bad = [&](const std::string& m) { return error(status_code::invalid_argument, what + m); };
  if (a.rows < 0 || a.cols <= 0 || a.n_tokens < 0) return bad("rows and n_tokens must be >= 0, cols > 0");
  if (a.cols % Format::block_elems != 0 || a.cols % 32 != 0)
    return bad("cols = " + std::to_string(a.cols) + " is not a multiple of the block size " +
               std::to_string(Format::block_elems > 32 ? Format::block_elems : 32));
  using kernel = kernels::gemm_i8_kernel<Format, ops::epilogue::store>;
  if (ceil_div<int64_t>(a.rows, kernel::out_rows) > 65535)
    return bad("rows = " + std::to_string(a.rows) + " exceeds the grid limit");
  if (!a.w || a.x.empty() || !a.x.lo || !a.x.groups || !a.y) return bad("null w, x or y");
  if ((a.epilogue == ops::epilogue::swiglu) != (a.maybe_w_up != nullptr))
    return bad(a.maybe_w_up ? "maybe_w_up is given but the epilogue is not swiglu" : "swiglu needs maybe_w_up");
  if ((reinterpret_cast<uintptr_t>(a.x.hi) | reinterpret_cast<uintptr_t>(a.x.lo)) % 16 != 0 ||
      reinterpret_cast<uintptr_t>(a.x.groups) % 8 != 0)
    return bad("the activation planes are not 16-byte aligned (or their groups 8-byte aligned)");
  // Q4_K / Q5_K rows are read in 16-byte loads, the others in 4- and 2-byte loads
  constexpr size_t align = sizeof(typename Format::block) % 16 == 0 ? 16 : alignof(typename Format::block);
  if (reinterpret_cast<uintptr_t>(a.w) % align != 0 || reinterpret_cast<uintptr_t>(a.maybe_w_up) % align != 0)
    return bad("weights are not " + std::to_string(align) + "-byte aligned");
  return status::success();
}

// Y = X W^T (+ epilogue); asynchronous on `stream`.
template <quant::weight_format Format>
requires gemm_i8_supports<Format> status gemm_i8(const gemm_i8_args<Format>& a, stream_t stream = nullptr) {
  Q35_TRY(validate(a));
  if (a.n_tokens == 0 || a.rows == 0) return status::success();
  return dispatch<0, 1, 2>(int(a.epilogue), [&](auto e) -> status {
    using kernel = kernels::gemm_i8_kernel<Format, ops::epilogue(decltype(e)::value)>;
    return launch<kernel>(
        typename kernel::params{reinterpret_cast<const uint8_t*>(a.w), reinterpret_cast<const uint8_t*>(a.maybe_w_up),
                                Format::row_bytes(a.cols), a.x, a.y, a.rows, a.cols, a.n_tokens},
        stream);
  });
}

// Quantizes n_rows rows of fp32 x [n_rows][cols] (cols a multiple of 32, 16-byte aligned) into `out`
// (quant::act8x2_bytes(cols, n_rows) bytes, 16-byte aligned) and returns its view. Asynchronous.
template <int = 0>
inline status quantize_act8x2(const float* x, int64_t n_rows, int64_t cols, void* out, size_t out_bytes,
                              quant::act8x2_view& view, stream_t stream = nullptr) {
  auto bad = [](const std::string& m) { return error(status_code::invalid_argument, "quantize_act8x2: " + m); };
  if (n_rows < 0 || cols <= 0 || cols % quant::act16_group_elems != 0)
    return bad("n_rows = " + std::to_string(n_rows) + ", cols = " + std::to_string(cols) +
               ": need n_rows >= 0 and cols a positive multiple of 32");
  if (!x || !out) return bad("null x or out");
  if ((reinterpret_cast<uintptr_t>(x) | reinterpret_cast<uintptr_t>(out)) % 16 != 0)
    return bad("x or out is not 16-byte aligned");
  if (out_bytes < quant::act8x2_bytes(cols, n_rows))
    return bad("out_bytes = " + std::to_string(out_bytes) +
               " is below act8x2_bytes = " + std::to_string(quant::act8x2_bytes(cols, n_rows)));
  view = quant::act8x2_layout(out, cols, n_rows);
  using kernel = kernels::act8x2_quantize_kernel<>;
  return launch<kernel>(kernel::params{x, n_rows, cols, const_cast<int8_t*>(view.hi), const_cast<uint8_t*>(view.lo),
                                       const_cast<quant::act8x2_group*>(view.groups)},
                        stream);
}

}  // namespace q35::launch
