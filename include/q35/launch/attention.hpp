// launch::attention_layer: one Qwen3.5 gated full-attention layer (spec §2.1) over a paged KV cache
// for a batch of sequences, and its parts for engines and benchmarks:
//   attention_append   q/k RMSNorm + partial NEOX RoPE, K/V written to their pages  (1 launch)
//   attention_decode   attention of one new token per sequence, split-KV + merge      (1-2 launches)
//   attention_prefill  causal attention of many new tokens (chunks welcome)           (1-2 launches)
// attention_layer = 3 projections (launch::matmul) + append + decode/prefill (+ merge) + out-projection
// (residual): 6 or 7 launches, none depending on host-visible device data (CUDA-graph capturable).
// The arguments, the split choice, the workspace sizes and the shape checks: launch/attention_plan.hpp.
#pragma once

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "q35/arch/memory.hpp"
#include "q35/core/dispatch.hpp"
#include "q35/core/status.hpp"
#include "q35/kernels/attn_append.hpp"
#include "q35/kernels/attn_merge.hpp"
#include "q35/kernels/attn_paged.hpp"
#include "q35/kernels/attn_prefill_mma.hpp"
#include "q35/kv/kv_pool.hpp"
#include "q35/launch/attention_plan.hpp"
#include "q35/launch/launch.hpp"
#include "q35/launch/matmul.hpp"

namespace q35::launch {

namespace detail {

// attn_prefill_mma_kernel's instance for KV type T and head dim D on the current device: 4 row warps
// where a block may have their shared memory, else 2 (every instance it can pick fits the smallest
// supported GPU, as the static_assert checks).
template <class T, int D>
inline int attn_mma_row_warps() {
  using big = kernels::attn_prefill_mma_kernel<T, D, 4>;
  using small = kernels::attn_prefill_mma_kernel<T, D, 2>;
  if constexpr (arch::shared_tail_offset<typename big::shared_storage> <= smallest_max_shared_bytes) {
    return 4;
  } else {
    static_assert(arch::shared_tail_offset<typename small::shared_storage> <= smallest_max_shared_bytes);
    return arch::shared_tail_offset<typename big::shared_storage> <= max_shared_bytes() ? 4 : 2;
  }
}
inline int attn_mma_rows(kv::kv_type t, int head_dim) {
  const auto pick = [&]<class T>(std::type_identity<T>) {
    return 16 * (head_dim == 256 ? attn_mma_row_warps<T, 256>() : attn_mma_row_warps<T, 128>());
  };
  return t == kv::kv_type::bf16 ? pick(std::type_identity<bf16>{}) : pick(std::type_identity<half>{});
}

inline int log2_int(int v) {
  int s = 0;
  while ((1 << s) < v) ++s;
  return s;
}

// Calls f(std::type_identity<T>{}, head_dim constant) for the KV element type and head dim.
template <class F>
status with_kv_type(kv::kv_type t, int head_dim, F&& f) {
  return dispatch<0, 1, 2>(int(t), [&](auto ti) -> status {
    using T = typename kv::kv_element<kv::kv_type(decltype(ti)::value)>::type;
    return dispatch<128, 256>(head_dim, [&](auto d) -> status { return f(std::type_identity<T>{}, d); });
  });
}

}  // namespace detail

inline status validate(const attn_append_args& a) {
  Q35_TRY(validate(a.shape, a.batch, a.kv));
  if (a.batch.n_tokens > 0 && (!a.qg || !a.k || !a.v || !a.q_norm || !a.k_norm))
    return detail::bad_attn("append: null qg, k, v, q_norm or k_norm");
  for (const void* p :
       {(const void*)a.qg, (const void*)a.k, (const void*)a.v, (const void*)a.q_norm, (const void*)a.k_norm})
    if (reinterpret_cast<uintptr_t>(p) % 16 != 0) return detail::bad_attn("append: an input is not 16-byte aligned");
  return status::success();
}

// q/k norms + RoPE and the K/V write of every new token: one launch.
template <int = 0>
inline status attention_append(const attn_append_args& a, stream_t stream = nullptr) {
  Q35_TRY(validate(a));
  if (a.batch.n_tokens == 0) return status::success();
  return detail::with_kv_type(a.kv.type, a.shape.head_dim, [&](auto tt, auto d) -> status {
    using T = typename decltype(tt)::type;
    using kernel = kernels::attn_append_kernel<T, decltype(d)::value>;
    typename kernel::params p{};
    p.qg = a.qg, p.k = a.k, p.v = a.v, p.q_norm = a.q_norm, p.k_norm = a.k_norm;
    p.seq_offsets = a.batch.seq_offsets, p.positions = a.batch.positions;
    p.page_row_offsets = a.batch.page_row_offsets, p.page_indices = a.batch.page_indices;
    p.k_cache = static_cast<T*>(a.kv.k), p.v_cache = static_cast<T*>(a.kv.v);
    p.n_heads = a.shape.n_heads, p.n_kv_heads = a.shape.n_kv_heads, p.rope_dim = a.shape.rope_dim;
    p.page_shift = detail::log2_int(a.kv.page_tokens);
    p.eps = a.shape.rms_eps;
    p.log2_rope_base = std::log2(double(a.shape.rope_theta));
    p.n_seqs = a.batch.n_seqs, p.max_seq_tokens = a.batch.max_seq_tokens;
    return launch<kernel>(p, stream);
  });
}

inline status validate(const attn_core_args& a) {
  Q35_TRY(validate(a.shape, a.batch, a.kv));
  if (a.batch.n_tokens > 0 && (!a.qg || !a.out)) return detail::bad_attn("null qg or out");
  if (reinterpret_cast<uintptr_t>(a.qg) % 16 != 0) return detail::bad_attn("qg is not 16-byte aligned");
  const int64_t rows = attn_split_rows(a.batch);
  if (a.batch.n_tokens > 0 && a.batch.n_tokens * std::max(a.batch.n_splits, 1) > rows && a.batch.n_splits > 1)
    return detail::bad_attn("n_splits = " + std::to_string(a.batch.n_splits) + " times n_tokens = " +
                            std::to_string(a.batch.n_tokens) + " exceeds " + std::to_string(rows) + " split rows");
  const size_t need = attn_split_workspace_bytes(a.shape, rows);
  if (a.workspace_bytes < need || !a.workspace)
    return detail::bad_attn("workspace of " + std::to_string(a.workspace_bytes) + " bytes is below the " +
                            std::to_string(need) + " needed");
  return status::success();
}

namespace detail {

template <int = 0>
inline status run_attention(const attn_core_args& a, bool prefill, stream_t stream) {
  Q35_TRY(validate(a));
  if (a.batch.n_tokens == 0) return status::success();
  // prefill with f16 / bf16 KV on tensor cores; decode and f32 KV on attn_paged_kernel
  const bool mma = prefill && a.kv.type != kv::kv_type::f32;
  const attn_tiling t = tiling(a.shape, prefill, mma ? attn_mma_rows(a.kv.type, a.shape.head_dim) : 0);
  int n_splits = choose_splits(a.shape, a.batch, t);
  // split_keys: whole 4-key groups (so a group never leaves its page); no split left empty by design.
  // 0 with seq_splits: the kernel cuts each sequence by its own length.
  const int64_t per = (a.batch.max_seq_len + n_splits - 1) / n_splits;
  const bool by_seq = a.batch.split_keys == 0 && a.batch.seq_splits > 0;
  const int split_keys = by_seq                   ? 0
                         : a.batch.split_keys > 0 ? a.batch.split_keys
                                                  : int(std::max<int64_t>(4, (per + 3) / 4 * 4));
  n_splits =
      by_seq ? a.batch.seq_splits : int(std::max<int64_t>(1, (a.batch.max_seq_len + split_keys - 1) / split_keys));
  const int64_t n_rows = a.batch.n_tokens * a.shape.n_heads;
  float* part_o = static_cast<float*>(a.workspace);
  float* part_lse = reinterpret_cast<float*>(
      static_cast<unsigned char*>(a.workspace) +
      align_256(size_t(attn_split_rows(a.batch)) * size_t(a.shape.n_heads) * size_t(a.shape.value_dim) * 4));
  Q35_TRY(with_kv_type(a.kv.type, a.shape.head_dim, [&](auto tt, auto d) -> status {
    using T = typename decltype(tt)::type;
    // the two kernels take the same params
    const auto run = [&]<class Kernel>(std::type_identity<Kernel>) -> status {
      typename Kernel::params p{};
      p.qg = a.qg, p.seq_offsets = a.batch.seq_offsets, p.positions = a.batch.positions;
      p.page_row_offsets = a.batch.page_row_offsets, p.page_indices = a.batch.page_indices;
      p.seq_lens = a.batch.seq_lens;
      p.k_cache = static_cast<const T*>(a.kv.k), p.v_cache = static_cast<const T*>(a.kv.v);
      p.out = a.out, p.part_o = part_o, p.part_lse = part_lse;
      p.n_tokens = a.batch.n_tokens, p.n_heads = a.shape.n_heads, p.n_kv_heads = a.shape.n_kv_heads;
      p.page_shift = log2_int(a.kv.page_tokens);
      p.heads_per_block = t.heads_per_block, p.n_chunks = t.n_chunks, p.tokens_per_block = t.tokens_per_block;
      p.n_splits = n_splits, p.split_keys = split_keys, p.min_split_keys = attn_min_split_keys;
      p.n_seqs = a.batch.n_seqs, p.max_seq_tokens = a.batch.max_seq_tokens;
      p.scale = float(1.0 / std::sqrt(double(a.shape.head_dim)));
      return launch<Kernel>(p, stream);
    };
    if constexpr (!std::is_same_v<T, float>) {
      constexpr int D = decltype(d)::value;
      static_assert(kernels::attn_prefill_mma_kernel<T, D, 4>::rows == attn_prefill_mma_rows);
      static_assert(kernels::attn_prefill_mma_kernel<T, D, 2>::rows == attn_prefill_mma_rows_small);
      if (mma && t.rows == attn_prefill_mma_rows)
        return run(std::type_identity<kernels::attn_prefill_mma_kernel<T, D, 4>>{});
      if constexpr (D == 256)  // the only head dim whose 4-warp instance may not fit
        if (mma) return run(std::type_identity<kernels::attn_prefill_mma_kernel<T, D, 2>>{});
      if (mma) return detail::bad_attn("no prefill instance for " + std::to_string(t.rows) + " rows");
    }
    return dispatch<1, 2, 4, 8>(t.rows, [&](auto rows) -> status {
      return run(std::type_identity<kernels::attn_paged_kernel<T, decltype(d)::value, decltype(rows)::value>>{});
    });
  }));
  if (n_splits == 1) return status::success();
  kernels::attn_merge_kernel::params m{part_o, part_lse, a.qg, a.out, n_rows, a.shape.value_dim, n_splits};
  return launch<kernels::attn_merge_kernel>(m, stream);
}

}  // namespace detail

// One new token per sequence (max_seq_tokens 1; more work but stays correct): rows per block from the
// GQA ratio, so the heads of a group share one read of K/V; split-KV over long contexts.
template <int = 0>
inline status attention_decode(const attn_core_args& a, stream_t stream = nullptr) {
  return detail::run_attention(a, false, stream);
}

// Many new tokens per sequence, each attending to the cached keys and the new ones up to itself.
template <int = 0>
inline status attention_prefill(const attn_core_args& a, stream_t stream = nullptr) {
  return detail::run_attention(a, true, stream);
}

// Checks the whole layer's arguments; the message names the bad value.
inline status validate(const attn_layer_args& a) {
  using detail::bad_attn;
  const auto str = [](auto v) { return std::to_string(v); };
  const attn_shape& s = a.shape;
  Q35_TRY(validate(s, a.batch, a.kv));
  if (s.n_embd < 1) return bad_attn("n_embd = " + str(s.n_embd) + " must be >= 1");
  const auto check_w = [&](const quant::weight_view& w, const char* name, int64_t rows, int64_t cols) -> status {
    if (w.empty() || w.rows != rows || w.cols != cols || w.n_mats != 1)
      return bad_attn(std::string("weight ") + name + " is " + str(w.rows) + " x " + str(w.cols) + ", expected " +
                      str(rows) + " x " + str(cols));
    return status::success();
  };
  Q35_TRY(check_w(a.w.q, "q", 2 * int64_t(s.n_heads) * s.head_dim, s.n_embd));
  Q35_TRY(check_w(a.w.k, "k", int64_t(s.n_kv_heads) * s.head_dim, s.n_embd));
  Q35_TRY(check_w(a.w.v, "v", int64_t(s.n_kv_heads) * s.value_dim, s.n_embd));
  Q35_TRY(check_w(a.w.out, "out", s.n_embd, int64_t(s.n_heads) * s.value_dim));
  if (!a.w.q_norm || !a.w.k_norm) return bad_attn("null q_norm or k_norm");
  if (a.batch.n_tokens > 0 && (!a.x || !a.h)) return bad_attn("null x or h");
  const size_t need = attn_layer_workspace_bytes(s, a.batch.n_tokens, a.batch.max_seq_len, attn_split_rows(a.batch));
  if (!a.workspace || a.workspace_bytes < need)
    return bad_attn("workspace of " + str(a.workspace_bytes) + " bytes is below the " + str(need) + " needed");
  if (reinterpret_cast<uintptr_t>(a.workspace) % 256 != 0) return bad_attn("workspace is not 256-byte aligned");
  return status::success();
}

// h += attn_output(attention(x)) for every new token of the batch; the K/V of the new tokens are
// written to the cache (pages reserved by the caller). Asynchronous.
template <int = 0>
inline status attention_layer(const attn_layer_args& a, stream_t stream = nullptr) {
  Q35_TRY(validate(a));
  const attn_shape& s = a.shape;
  const int64_t n = a.batch.n_tokens;
  if (n == 0) return status::success();
  unsigned char* ws = static_cast<unsigned char*>(a.workspace);
  const auto take = [&](size_t bytes) {
    unsigned char* p = ws;
    ws += detail::align_256(bytes);
    return p;
  };
  float* qg = reinterpret_cast<float*>(take(size_t(n) * size_t(2 * s.n_heads * s.head_dim) * 4));
  float* k = reinterpret_cast<float*>(take(size_t(n) * size_t(s.n_kv_heads * s.head_dim) * 4));
  float* v = reinterpret_cast<float*>(take(size_t(n) * size_t(s.n_kv_heads * s.value_dim) * 4));
  float* o = reinterpret_cast<float*>(take(size_t(n) * size_t(s.n_heads * s.value_dim) * 4));
  const size_t split_bytes = attn_split_workspace_bytes(s, attn_split_rows(a.batch));
  void* split_ws = take(split_bytes);
  const size_t mm_bytes = a.workspace_bytes - size_t(ws - static_cast<unsigned char*>(a.workspace));
  void* mm_ws = mm_bytes ? ws : nullptr;

  const auto project = [&](const quant::weight_view& w, const float* x, const quant::act16_view& x16,
                           const quant::act8x2_view& x8, float* y, ops::epilogue e) {
    matmul_args m;
    m.w = w, m.x = x, m.y = y, m.n_tokens = n, m.epilogue = e;
    m.maybe_workspace = mm_ws, m.workspace_bytes = mm_bytes, m.maybe_x16 = x16;
    m.maybe_x8 = x8, m.row_invariant = a.row_invariant, m.gemm_every_count = a.gemm_every_count;
    return matmul(m, stream);
  };
  // x quantized once for its three projections (they then leave mm_ws alone; the output projection
  // below is the next to use it)
  quant::act16_view x16 = a.maybe_x16;
  quant::act8x2_view x8;
  Q35_TRY(quantize_shared_input(a.x, n, s.n_embd, {a.w.q, a.w.k, a.w.v}, mm_ws, mm_bytes, x16, x8, stream,
                                a.gemm_every_count));
  Q35_TRY(project(a.w.q, a.x, x16, x8, qg, ops::epilogue::store));
  Q35_TRY(project(a.w.k, a.x, x16, x8, k, ops::epilogue::store));
  Q35_TRY(project(a.w.v, a.x, x16, x8, v, ops::epilogue::store));
  attn_append_args ap{s, a.batch, a.kv, qg, k, v, a.w.q_norm, a.w.k_norm};
  Q35_TRY(attention_append(ap, stream));
  attn_core_args c{s, a.batch, a.kv, qg, o, split_ws, split_bytes};
  Q35_TRY(a.batch.max_seq_tokens <= 1 ? attention_decode(c, stream) : attention_prefill(c, stream));
  return project(a.w.out, o, {}, {}, a.h, ops::epilogue::residual);
}

}  // namespace q35::launch
