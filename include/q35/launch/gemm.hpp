// Host API of the batched (prompt) path for weights stored as F32, F16 or BF16: validate(args) ->
// status, launch::gemm<Format>(args, stream) on tensor cores, fp32-grade (kernels/gemm_mma_float.hpp).
// The GGUF integer formats take the int8 tensor-core GEMM (launch/gemm_i8.hpp); launch::matmul
// picks between them and the GEMV by format and token count.
#pragma once

#include <concepts>
#include <cstdint>
#include <string>

#include "q35/core/dispatch.hpp"
#include "q35/core/status.hpp"
#include "q35/kernels/gemm_mma_float.hpp"
#include "q35/launch/launch.hpp"

namespace q35::launch {

// The formats launch::gemm takes.
template <class Format>
concept mma_float_format = std::same_as<Format, quant::f32_format> || std::same_as<Format, quant::f16_format> ||
    std::same_as<Format, quant::bf16_format>;

template <quant::weight_format Format>
struct gemm_args {
  const typename Format::block* w = nullptr;           // [rows][cols], 16-byte aligned
  const typename Format::block* maybe_w_up = nullptr;  // swiglu: the up matrix (w is the gate)
  const float* x = nullptr;                            // [n_tokens][cols], 16-byte aligned
  float* y = nullptr;                                  // [n_tokens][rows]
  int64_t rows = 0, cols = 0, n_tokens = 0;
  ops::epilogue epilogue = ops::epilogue::store;
};

template <mma_float_format Format>
status validate(const gemm_args<Format>& a) {
  const std::string what = std::string("gemm ") + Format::name + ": ";
  auto bad = [&](const std::string& m) { return error(status_code::invalid_argument, what + m); };
  if (a.rows < 0 || a.cols <= 0 || a.n_tokens < 0) return bad("rows and n_tokens must be >= 0, cols > 0");
  if (a.cols % quant::unit_elems != 0)
    return bad("cols = " + std::to_string(a.cols) + " is not a multiple of " + std::to_string(quant::unit_elems));
  using kernel = kernels::gemm_mma_float_kernel<Format, ops::epilogue::store>;
  if (ceil_div<int64_t>(a.rows, kernel::bn) > 65535)
    return bad("rows = " + std::to_string(a.rows) + " exceeds the grid limit");
  if (!a.w || !a.x || !a.y) return bad("null w, x or y");
  if ((a.epilogue == ops::epilogue::swiglu) != (a.maybe_w_up != nullptr))
    return bad(a.maybe_w_up ? "maybe_w_up is given but the epilogue is not swiglu" : "swiglu needs maybe_w_up");
  if (reinterpret_cast<uintptr_t>(a.x) % 16 != 0) return bad("x is not 16-byte aligned");
  // the weights are staged with 16-byte copies
  if (reinterpret_cast<uintptr_t>(a.w) % 16 != 0 || reinterpret_cast<uintptr_t>(a.maybe_w_up) % 16 != 0)
    return bad("weights are not 16-byte aligned");
  return status::success();
}

// Y = X W^T (+ epilogue) for any number of tokens; asynchronous on `stream`.
template <mma_float_format Format>
status gemm(const gemm_args<Format>& a, stream_t stream = nullptr) {
  Q35_TRY(validate(a));
  return dispatch<0, 1, 2>(int(a.epilogue), [&](auto e) -> status {
    using kernel = kernels::gemm_mma_float_kernel<Format, ops::epilogue(decltype(e)::value)>;
    return launch<kernel>(typename kernel::params{a.w, a.maybe_w_up, a.x, a.y, a.rows, a.cols, a.n_tokens}, stream);
  });
}

}  // namespace q35::launch
