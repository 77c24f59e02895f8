// Host API of the small decoder ops: launch::rmsnorm (rows of activations) and launch::embedding
// (token rows gathered from a table in any GGUF format).
#pragma once

#include <cstdint>
#include <string>

#include "q35/core/status.hpp"
#include "q35/kernels/embedding.hpp"
#include "q35/kernels/rmsnorm.hpp"
#include "q35/launch/launch.hpp"
#include "q35/quant/act16.hpp"
#include "q35/quant/format_list.hpp"
#include "q35/quant/weight_view.hpp"

namespace q35::launch {

struct rmsnorm_args {
  const float* x = nullptr;        // [rows][x_stride]
  const float* maybe_w = nullptr;  // [n]: the norm weight (GGUF, already 1 + w), or null
  float* y = nullptr;              // [rows][y_stride]; may equal x
  int64_t rows = 0;
  int n = 0;
  int64_t x_stride = 0, y_stride = 0;  // 0: n
  float eps = 1e-6f;
  // Optionally also y quantized for the GEMV engine's integer path, in the quant/act16.hpp layout of
  // `rows` rows of n (n a multiple of 32): act16_bytes >= quant::act16_bytes(n, rows), 16-byte
  // aligned. Bit-identical to launch::quantize_act16 of y; pass the view (act16_view_of) as the next
  // layer's maybe_x16 and its projections skip their own quantization.
  void* maybe_act16 = nullptr;
  size_t act16_bytes = 0;
};

// The quantized rows rmsnorm writes into a.maybe_act16 (empty when it has none).
inline quant::act16_view act16_view_of(const rmsnorm_args& a) {
  if (!a.maybe_act16) return {};
  const auto* b = static_cast<const uint8_t*>(a.maybe_act16);
  return {reinterpret_cast<const int16_t*>(b),
          reinterpret_cast<const quant::act16_group*>(b + quant::act16_groups_offset(a.n, a.rows))};
}

inline status validate(const rmsnorm_args& a) {
  auto bad = [](const std::string& m) { return error(status_code::invalid_argument, "launch::rmsnorm: " + m); };
  if (a.rows < 0 || a.n < 1) return bad("rows = " + std::to_string(a.rows) + ", n = " + std::to_string(a.n));
  if (a.rows > 0x7fffffff) return bad("rows = " + std::to_string(a.rows) + " exceeds the grid");
  if (a.rows > 0 && (!a.x || !a.y)) return bad("null x or y");
  if ((a.x_stride && a.x_stride < a.n) || (a.y_stride && a.y_stride < a.n)) return bad("a row stride is below n");
  if (!(a.eps > 0.0f)) return bad("eps must be > 0");
  if (a.maybe_act16) {
    if (a.n % quant::act16_group_elems != 0)
      return bad("maybe_act16 needs n a multiple of 32 (n = " + std::to_string(a.n) + ")");
    if (reinterpret_cast<uintptr_t>(a.maybe_act16) % 16 != 0) return bad("maybe_act16 is not 16-byte aligned");
    if (a.act16_bytes < quant::act16_bytes(a.n, a.rows))
      return bad("act16_bytes = " + std::to_string(a.act16_bytes) +
                 " is below quant::act16_bytes = " + std::to_string(quant::act16_bytes(a.n, a.rows)));
  }
  return status::success();
}

// y[r] = x[r] / sqrt(mean(x[r]^2) + eps) * w. Asynchronous.
template <int = 0>
inline status rmsnorm(const rmsnorm_args& a, stream_t stream = nullptr) {
  Q35_TRY(validate(a));
  using kernel = kernels::rmsnorm_kernel<>;
  const quant::act16_view q = act16_view_of(a);
  return launch<kernel>(
      kernel::params{a.x, a.maybe_w, a.y, a.rows, a.n, a.x_stride ? a.x_stride : a.n, a.y_stride ? a.y_stride : a.n,
                     a.eps, const_cast<int16_t*>(q.q), const_cast<quant::act16_group*>(q.groups)},
      stream);
}

struct embedding_args {
  quant::weight_view table;      // token_embd: rows = n_vocab, cols = n_embd
  const int32_t* ids = nullptr;  // [n_tokens], device
  float* out = nullptr;          // [n_tokens][n_embd]
  int64_t n_tokens = 0;
  int* maybe_error_flag = nullptr;  // device int, set to 1 when an id is outside [0, n_vocab)
};

// out[t] = table[ids[t]] as f32. Asynchronous.
template <int = 0>
inline status embedding(const embedding_args& a, stream_t stream = nullptr) {
  auto bad = [](const std::string& m) { return error(status_code::invalid_argument, "launch::embedding: " + m); };
  if (a.n_tokens < 0 || a.n_tokens > 0x7fffffff) return bad("n_tokens = " + std::to_string(a.n_tokens));
  if (a.n_tokens == 0) return status::success();
  if (a.table.empty() || !a.ids || !a.out) return bad("null table, ids or out");
  if (a.table.cols % quant::unit_elems != 0 || a.table.cols > 0x7fffffff)
    return bad("n_embd = " + std::to_string(a.table.cols) + " is not a multiple of 16");
  return quant::with_format(a.table.type, [&](auto tag) -> status {
    using F = typename decltype(tag)::type;
    if (a.table.cols % F::block_elems != 0)
      return bad("n_embd = " + std::to_string(a.table.cols) + " is not a multiple of the " + F::name + " block");
    using kernel = kernels::embedding_kernel<F>;
    return launch<kernel>(typename kernel::params{static_cast<const typename F::block*>(a.table.data), a.ids, a.out,
                                                  a.n_tokens, a.table.rows, int(a.table.cols), a.maybe_error_flag},
                          stream);
  });
}

}  // namespace q35::launch
