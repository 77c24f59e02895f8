// Host API of the GEMV family: validate(args) -> status naming the problem, and
// launch::gemv<Format>(args, stream) choosing the kernel instance for the epilogue, token count and
// mode (plain or expert-indexed).
//
// Expert ids are device-resident (the router writes them on the GPU, and reading them back would
// stall the decode step), so they cannot be checked before launch: a block whose id is out of
// [0, n_experts) writes NaN to its pair's rows and sets *maybe_error_flag = 1 (required in expert
// mode); the caller checks the flag when it next synchronizes. Callers that hold the ids on the host
// (prefill routing read back, tests, tools) reject bad ones before launch with validate_expert_ids.
#pragma once

#include <span>

#include <cstdint>
#include <string>

#include "q35/core/dispatch.hpp"
#include "q35/core/status.hpp"
#include "q35/kernels/gemv.hpp"
#include "q35/launch/launch.hpp"
#include "q35/ops/gemv_policy.hpp"

namespace q35::launch {

using kernels::gemv_epilogue;

template <quant::weight_format Format>
struct gemv_args {
  const typename Format::block* w = nullptr;           // [rows][cols] (expert mode: [n_experts][rows][cols])
  const typename Format::block* maybe_w_up = nullptr;  // swiglu: the up matrix, same shape as w (the gate)
  const float* x = nullptr;  // [n_tokens][cols] (expert mode: [n_pairs / x_group_div][cols]), 16-byte aligned
  float* y = nullptr;        // [n_tokens][rows] (expert mode: [n_pairs][rows])
  int64_t rows = 0, cols = 0;
  int n_tokens = 1;  // plain mode: 1..8 tokens share one pass over W
  gemv_epilogue epilogue = gemv_epilogue::store;
  // Expert mode, when maybe_expert_ids is set: pair p computes y[p] = W[ids[p]] x[p / x_group_div].
  const int32_t* maybe_expert_ids = nullptr;  // [n_pairs], device memory
  int n_pairs = 0;
  int32_t n_experts = 0;
  // Bytes from expert e's first row to expert e + 1's, for w and maybe_w_up alike; 0: rows * row bytes
  // (separate, packed tensors). A merged ffn_gate_up_exps [cols, 2 ff, n_experts] has gate rows then up
  // rows per expert: w = base, maybe_w_up = base + ff row bytes, stride = 2 ff row bytes.
  int64_t expert_stride_bytes = 0;
  int x_group_div = 1;
  int* maybe_error_flag = nullptr;  // device int, set to 1 on an out-of-range expert id
};

// Largest token count one plain GEMV pass serves.
inline constexpr int gemv_max_tokens = 8;

// Every message is built only on the failing path: a call that passes allocates nothing.
template <quant::weight_format Format>
status validate(const gemv_args<Format>& a) {
  auto bad = [](const std::string& m) {
    return error(status_code::invalid_argument, std::string("gemv ") + Format::name + ": " + m);
  };
  constexpr int64_t min_cols = Format::block_elems > quant::unit_elems ? Format::block_elems : quant::unit_elems;
  if (a.rows < 0 || a.cols <= 0) return bad("rows must be >= 0 and cols > 0");
  if (a.cols % min_cols != 0)
    return bad("cols = " + std::to_string(a.cols) + " is not a multiple of the block size " + std::to_string(min_cols));
  // the kernel offsets a block's rows with 32-bit ints: rows_per_block (<= 64) rows must fit 2^31 bytes
  if (Format::row_bytes(a.cols) > INT32_MAX / 64)
    return bad("a row of " + std::to_string(a.cols) + " columns is over 2^31 / 64 bytes");
  if (!a.w || !a.x || !a.y) return bad("null w, x or y");
  if ((a.epilogue == gemv_epilogue::swiglu) != (a.maybe_w_up != nullptr))
    return bad(a.maybe_w_up ? "maybe_w_up is given but the epilogue is not swiglu" : "swiglu needs maybe_w_up");
  if (reinterpret_cast<uintptr_t>(a.x) % 16 != 0) return bad("x is not 16-byte aligned");
  if (reinterpret_cast<uintptr_t>(a.w) % alignof(typename Format::block) != 0 ||
      reinterpret_cast<uintptr_t>(a.maybe_w_up) % alignof(typename Format::block) != 0)
    return bad("weights are not aligned to their block struct");
  if (!a.maybe_expert_ids) {
    if (a.n_tokens < 1 || a.n_tokens > gemv_max_tokens)
      return bad("n_tokens = " + std::to_string(a.n_tokens) + " is outside 1.." + std::to_string(gemv_max_tokens) +
                 " (use launch::gemm for prompts)");
    return status::success();
  }
  if (a.n_pairs < 1 || a.n_pairs > 65535) return bad("n_pairs = " + std::to_string(a.n_pairs) + " is outside 1..65535");
  if (a.n_experts < 1) return bad("n_experts must be >= 1");
  if (a.x_group_div < 1) return bad("x_group_div must be >= 1");
  if (a.expert_stride_bytes != 0 && (a.expert_stride_bytes < a.rows * Format::row_bytes(a.cols) ||
                                     a.expert_stride_bytes % alignof(typename Format::block) != 0))
    return bad("expert_stride_bytes = " + std::to_string(a.expert_stride_bytes) +
               " is smaller than one expert's rows or not aligned to the block struct");
  if (!a.maybe_error_flag)
    return bad("expert mode needs maybe_error_flag (device-resident ids are checked on the device)");
  return status::success();
}

namespace detail {

template <quant::weight_format Format, class Policy, int NTokens, gemv_epilogue Epilogue, bool Indexed>
status run_gemv(const gemv_args<Format>& a, stream_t stream) {
  using kernel = kernels::gemv_kernel<Format, Policy, NTokens, Epilogue, Indexed>;
  const typename kernel::params p{a.w,
                                  a.maybe_w_up,
                                  a.x,
                                  a.y,
                                  a.rows,
                                  a.cols,
                                  Indexed ? 1 : a.n_tokens,
                                  Indexed ? a.n_pairs : 1,
                                  a.maybe_expert_ids,
                                  a.n_experts,
                                  a.expert_stride_bytes ? a.expert_stride_bytes : a.rows * Format::row_bytes(a.cols),
                                  a.x_group_div,
                                  a.maybe_error_flag};
  return launch<kernel>(p, stream);
}

}  // namespace detail

// Host-side check of expert ids before an expert-mode launch: ok, or an error naming the first pair
// whose id is outside [0, n_experts).
inline status validate_expert_ids(std::span<const int32_t> ids, int32_t n_experts) {
  for (size_t p = 0; p < ids.size(); ++p)
    if (ids[p] < 0 || ids[p] >= n_experts)
      return error(status_code::invalid_argument, "gemv: expert id " + std::to_string(ids[p]) + " of pair " +
                                                      std::to_string(p) + " is outside [0, " +
                                                      std::to_string(n_experts) + ")");
  return status::success();
}

// y = W x (or y += W x, or y = silu(W_gate x) * (W_up x)) for a.n_tokens tokens or, in expert mode,
// for each (token, slot) pair with the expert its id names. Asynchronous on `stream`.
template <quant::weight_format Format, class Policy = ops::gemv_policy<Format>>
status gemv(const gemv_args<Format>& a, stream_t stream = nullptr) {
  Q35_TRY(validate(a));
  if (a.rows == 0) return status::success();
  return dispatch<0, 1, 2>(int(a.epilogue), [&](auto e) -> status {
    constexpr gemv_epilogue epilogue = gemv_epilogue(decltype(e)::value);
    if (a.maybe_expert_ids) return detail::run_gemv<Format, Policy, 1, epilogue, true>(a, stream);
    // Token counts run in the smallest instance that holds them: 1, 2, 4 or 8 accumulators per row.
    const int bucket = a.n_tokens <= 1 ? 1 : a.n_tokens <= 2 ? 2 : a.n_tokens <= 4 ? 4 : 8;
    return dispatch<1, 2, 4, 8>(bucket, [&](auto n) -> status {
      return detail::run_gemv<Format, Policy, decltype(n)::value, epilogue, false>(a, stream);
    });
  });
}

}  // namespace q35::launch
