// launch::matmul: y = W x for weights whose GGUF format is known only at run time (a quant::weight_view
// bound from a file), any token count: the GEMV family up to gemv_max_tokens tokens, the GEMM above.
// launch::matmul_experts: the expert-indexed GEMV over a 3-D weight (MoE), ids on the device.
// These are what layer-level code (attention, Gated DeltaNet, FFN, the decoder) calls.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>

#include "q35/core/status.hpp"
#include "q35/launch/gemm.hpp"
#include "q35/launch/gemm_i8.hpp"
#include "q35/launch/gemv.hpp"
#include "q35/quant/format_list.hpp"
#include "q35/quant/weight_view.hpp"

namespace q35::launch {

struct matmul_args {
  quant::weight_view w;           // [rows][cols] (the gate for swiglu); n_mats must be 1
  quant::weight_view maybe_w_up;  // swiglu: the up matrix, same type and shape as w; else empty
  const float* x = nullptr;       // [n_tokens][w.cols], 16-byte aligned
  float* y = nullptr;             // [n_tokens][w.rows] (residual: read and added to)
  int64_t n_tokens = 1;
  ops::epilogue epilogue = ops::epilogue::store;
  // Device scratch of at least matmul_workspace_bytes(w.cols, n_tokens) bytes (e.g. for activations
  // converted to the engine's input format); may be null when that is 0.
  void* maybe_workspace = nullptr;
  size_t workspace_bytes = 0;
  // x already quantized (quant/act16.hpp layout: n_tokens rows of w.cols), by its producer (rmsnorm)
  // or once for several matmuls that read the same x (quantize_shared_input); used where the GEMV's
  // integer path applies (matmul_int_path), ignored elsewhere (x is then read). x stays required.
  quant::act16_view maybe_x16;
  // x already split for the tensor-core GEMM (quant/act8x2.hpp: n_tokens rows of w.cols), once for
  // several matmuls (quantize_shared_input); used past gemv_max_tokens for the GGUF integer formats
  // (no workspace needed then), ignored elsewhere.
  quant::act8x2_view maybe_x8;
  // A token's row bit-identical whatever other tokens share the call, up to gemv_max_tokens tokens
  // (gemv_args::row_invariant; the GEMM past that rounds differently, and is invariant within calls of
  // 9..64 tokens and within calls of more: launch/gemm_i8.hpp's split-K).
  bool row_invariant = false;
  // Tensor cores at every token count: 1..gemv_max_tokens tokens run on the GEMM too (gemm_i8 for the
  // GGUF integer formats, gemm for F32/F16/BF16), so a token's row is bit-identical in every call of
  // 1..gemm_i8_invariant_tokens tokens, whatever rows share it: batch invariance that reads the weights
  // once per 64 rows instead of once per 8 (row_invariant), for the price of few-row calls on a 16-token
  // tile. maybe_x16 is then ignored; the workspace matmul_workspace_bytes sizes holds the GEMM's needs.
  bool gemm_every_count = false;
  // The int8 GEMM's token tile (gemm_i8_args::tile_tokens): 0 chooses it from n_tokens; benchmarks may force it.
  int gemm_tile_tokens = 0;
};

// Device scratch one matmul of n_tokens rows of `cols` inputs and `weight_rows` rows of weights (swiglu:
// gate and up rows, 2 x rows) needs (callers size their workspace with it once, for their largest
// call; enough for any call with fewer tokens, with or without gemm_every_count): the 16-bit
// activations of the GEMV's integer path (up to gemv_max_tokens rows), or those of the int8
// tensor-core GEMM (quant/act8x2.hpp) and then its split-K partials (gemm_i8_split_workspace_bytes),
// whichever is larger. With a null or smaller workspace the GEMV takes its float path and the GEMM runs
// unsplit (correct, slower, and no longer invariant across token counts); a GGUF integer format on the
// GEMM needs the activations' part (an error names the bytes).
inline size_t matmul_workspace_bytes(int64_t cols, int64_t n_tokens, int64_t weight_rows) {
  const size_t gemv = gemv_workspace_bytes(cols, n_tokens < gemv_max_tokens ? n_tokens : gemv_max_tokens);
  if (n_tokens < 1 || cols % quant::act16_group_elems != 0) return gemv;
  const size_t gemm = detail::align_256(quant::act8x2_bytes(cols, n_tokens)) +
                      gemm_i8_split_workspace_bytes(weight_rows, cols, n_tokens);
  return gemm > gemv ? gemm : gemv;
}

namespace detail {
inline status bad_matmul(const std::string& m) { return error(status_code::invalid_argument, "launch::matmul: " + m); }
inline status check_pair(const quant::weight_view& w, const quant::weight_view& up) {
  if (up.type != w.type || up.rows != w.rows || up.cols != w.cols)
    return bad_matmul("the up matrix differs from the gate in type or shape");
  return status::success();
}
}  // namespace detail

// Whether launch::matmul reads x as 16-bit activations for this weight and token count (the GEMV's
// integer path: 1..gemv_max_tokens tokens, a format with ops::dot16 items that tile the row, and
// weights aligned to the item's loads: gemv_int_load_bytes), given maybe_x16 or a workspace.
inline bool matmul_int_path(const quant::weight_view& w, int64_t n_tokens, bool row_invariant = false,
                            bool gemm_every_count = false) {
  if (gemm_every_count || n_tokens < 1 || n_tokens > gemv_max_tokens || w.empty() || w.n_mats != 1) return false;
  bool yes = false;
  (void)quant::with_format(w.type, [&](auto tag) {
    using F = typename decltype(tag)::type;
    gemv_args<F> g;
    g.w = static_cast<const typename F::block*>(w.data), g.cols = w.cols, g.n_tokens = int(n_tokens);
    g.row_invariant = row_invariant;
    yes = gemv_has_int_path(g);
  });
  return yes;
}

// Whether launch::matmul runs this weight at n_tokens tokens on the int8 tensor-core GEMM (past
// gemv_max_tokens tokens, or at any count with gemm_every_count; a GGUF integer format), i.e. on
// 16-bit integer activations split into 8-bit planes.
inline bool matmul_gemm_i8_path(const quant::weight_view& w, int64_t n_tokens, bool gemm_every_count = false) {
  if (n_tokens < 1 || (n_tokens <= gemv_max_tokens && !gemm_every_count) || w.empty() || w.n_mats != 1) return false;
  bool yes = false;
  (void)quant::with_format(w.type, [&](auto tag) { yes = gemm_i8_supports<typename decltype(tag)::type>; });
  return yes;
}

// For several matmuls of n_tokens rows that read the same x: quantizes x once into `out` (16-byte
// aligned, >= matmul_workspace_bytes(cols, n_tokens) bytes) for their maybe_x16 (1..gemv_max_tokens
// tokens, when at least one of `weights` takes the GEMV's integer path) or their maybe_x8 (more
// tokens, or any with gemm_every_count, when one of them has a GGUF integer format: the tensor-core
// GEMM); else, or when the view is already given, launches nothing. One launch instead of one per
// matmul; the matmuls then leave `out` alone.
template <int = 0>
inline status quantize_shared_input(const float* x, int64_t n_tokens, int64_t cols,
                                    std::initializer_list<quant::weight_view> weights, void* out, size_t out_bytes,
                                    quant::act16_view& x16, quant::act8x2_view& x8, stream_t stream = nullptr,
                                    bool gemm_every_count = false) {
  if (!out || cols % quant::act16_group_elems != 0) return status::success();
  bool any = false;
  if (n_tokens > gemv_max_tokens || gemm_every_count) {
    if (!x8.empty()) return status::success();
    for (const quant::weight_view& w : weights)
      any = any || (matmul_gemm_i8_path(w, n_tokens, gemm_every_count) && w.cols == cols);
    if (!any) return status::success();
    return quantize_act8x2(x, n_tokens, cols, out, out_bytes, x8, stream);
  }
  if (!x16.empty()) return status::success();
  for (const quant::weight_view& w : weights) any = any || matmul_int_path(w, n_tokens);
  if (!any) return status::success();
  Q35_TRY(quantize_act16(x, n_tokens, cols, out, out_bytes, stream));
  x16 = act16_layout(out, cols, n_tokens);
  return status::success();
}

// y = W x, y += W x, or y = silu(W_gate x) * (W_up x), for n_tokens >= 0 tokens. Asynchronous.
template <int = 0>
status matmul(const matmul_args& a, stream_t stream = nullptr) {
  if (a.w.n_mats != 1)
    return detail::bad_matmul("w has " + std::to_string(a.w.n_mats) + " matrices; use matmul_experts");
  if ((a.epilogue == ops::epilogue::swiglu) != !a.maybe_w_up.empty())
    return detail::bad_matmul("swiglu needs maybe_w_up, and only swiglu takes it");
  if (!a.maybe_w_up.empty()) Q35_TRY(detail::check_pair(a.w, a.maybe_w_up));
  if (a.n_tokens < 0) return detail::bad_matmul("n_tokens = " + std::to_string(a.n_tokens) + " is negative");
  if (a.n_tokens == 0 || a.w.rows == 0) return status::success();
  return quant::with_format(a.w.type, [&](auto tag) -> status {
    using F = typename decltype(tag)::type;
    using block = typename F::block;
    const auto* w = static_cast<const block*>(a.w.data);
    const auto* up = static_cast<const block*>(a.maybe_w_up.data);
    if (a.n_tokens <= gemv_max_tokens && !a.gemm_every_count) {
      gemv_args<F> g;
      g.w = w, g.maybe_w_up = up, g.x = a.x, g.y = a.y, g.rows = a.w.rows, g.cols = a.w.cols;
      g.n_tokens = int(a.n_tokens), g.epilogue = a.epilogue, g.row_invariant = a.row_invariant;
      g.maybe_workspace = a.maybe_workspace, g.workspace_bytes = a.workspace_bytes;
      if (!a.maybe_x16.empty() && gemv_has_int_path(g)) g.maybe_x16 = a.maybe_x16;
      return gemv<F>(g, stream);
    }
    if constexpr (gemm_i8_supports<F>) {
      // the int8 tensor-core GEMM reads x split into 8-bit planes: given, or made in the workspace
      gemm_i8_args<F> g;
      const size_t need = quant::act8x2_bytes(a.w.cols, a.n_tokens);
      if (!a.maybe_x8.empty()) {
        g.x = a.maybe_x8;
      } else if (!a.maybe_workspace || a.workspace_bytes < need) {
        return detail::bad_matmul(std::string(F::name) + " weights at " + std::to_string(a.n_tokens) +
                                  " tokens need a workspace of " + std::to_string(need) + " bytes (have " +
                                  std::to_string(a.maybe_workspace ? a.workspace_bytes : 0) +
                                  "): size it with matmul_workspace_bytes");
      } else {
        Q35_TRY(quantize_act8x2(a.x, a.n_tokens, a.w.cols, a.maybe_workspace, a.workspace_bytes, g.x, stream));
      }
      // split-K partials after the activations' place (whether they are there or came in maybe_x8,
      // quantize_shared_input's buffer at the start of this workspace)
      if (const size_t x_bytes = detail::align_256(need); a.maybe_workspace && a.workspace_bytes > x_bytes)
        g.maybe_workspace = static_cast<uint8_t*>(a.maybe_workspace) + x_bytes,
        g.workspace_bytes = a.workspace_bytes - x_bytes;
      g.w = w, g.maybe_w_up = up, g.y = a.y, g.rows = a.w.rows, g.cols = a.w.cols;
      g.n_tokens = a.n_tokens, g.epilogue = a.epilogue, g.tile_tokens = a.gemm_tile_tokens;
      return gemm_i8<F>(g, stream);
    } else {
      gemm_args<F> g;
      g.w = w, g.maybe_w_up = up, g.x = a.x, g.y = a.y, g.rows = a.w.rows, g.cols = a.w.cols;
      g.n_tokens = a.n_tokens, g.epilogue = a.epilogue;
      return gemm<F>(g, stream);
    }
  });
}

struct matmul_experts_args {
  quant::weight_view w;                 // [n_mats = n_experts][rows][cols] (the gate for swiglu), any matrix stride
  quant::weight_view maybe_w_up;        // swiglu: the up matrices (same type, shape and stride), else empty
  const int32_t* expert_ids = nullptr;  // [n_pairs], device memory
  int n_pairs = 0;
  const float* x = nullptr;  // [n_pairs / x_group_div][cols]: pair p reads row p / x_group_div
  int x_group_div = 1;
  float* y = nullptr;  // [n_pairs][rows]
  ops::epilogue epilogue = ops::epilogue::store;
  int* error_flag = nullptr;        // device int, set to 1 when an id is outside [0, n_experts)
  void* maybe_workspace = nullptr;  // as matmul_args: matmul_workspace_bytes(w.cols, ceil(n_pairs / x_group_div))
  size_t workspace_bytes = 0;
};

// y[p] = W[ids[p]] x[p / x_group_div] (+ epilogue) for every pair p. Asynchronous.
template <int = 0>
status matmul_experts(const matmul_experts_args& a, stream_t stream = nullptr) {
  if ((a.epilogue == ops::epilogue::swiglu) != !a.maybe_w_up.empty())
    return detail::bad_matmul("swiglu needs maybe_w_up, and only swiglu takes it");
  if (!a.maybe_w_up.empty()) {
    Q35_TRY(detail::check_pair(a.w, a.maybe_w_up));
    if (a.maybe_w_up.stride_bytes() != a.w.stride_bytes())
      return detail::bad_matmul("the up matrices have another expert stride than the gates");
  }
  if (a.n_pairs == 0 || a.w.rows == 0) return status::success();
  return quant::with_format(a.w.type, [&](auto tag) -> status {
    using F = typename decltype(tag)::type;
    using block = typename F::block;
    gemv_args<F> g;
    g.w = static_cast<const block*>(a.w.data);
    g.maybe_w_up = static_cast<const block*>(a.maybe_w_up.data);
    g.x = a.x, g.y = a.y, g.rows = a.w.rows, g.cols = a.w.cols, g.epilogue = a.epilogue;
    g.maybe_expert_ids = a.expert_ids, g.n_pairs = a.n_pairs, g.n_experts = int32_t(a.w.n_mats);
    g.expert_stride_bytes = a.w.stride_bytes(), g.x_group_div = a.x_group_div, g.maybe_error_flag = a.error_flag;
    g.maybe_workspace = a.maybe_workspace, g.workspace_bytes = a.workspace_bytes;
    return gemv<F>(g, stream);
  });
}

// matmul and matmul_experts reach every format's GEMV and GEMM kernels: each translation unit that
// calls them compiles all of those. A program with several such units can compile them once: every
// unit defines Q35_KERNELS_EXTERN (they then only declare these instances, and gemv.hpp's), and exactly
// one also defines Q35_KERNELS_INSTANTIATE and includes this header (it compiles them). Without either,
// nothing changes (header-only).
#if defined(Q35_KERNELS_INSTANTIATE)
template status matmul<0>(const matmul_args&, stream_t);
template status matmul_experts<0>(const matmul_experts_args&, stream_t);
#elif defined(Q35_KERNELS_EXTERN)
extern template status matmul<0>(const matmul_args&, stream_t);
extern template status matmul_experts<0>(const matmul_experts_args&, stream_t);
#endif

}  // namespace q35::launch
