// launch/attention_plan.hpp: the arguments of launch::attention_layer and its parts, the split-KV
// limits and choice, the workspace sizes and the shape/batch checks: everything about a call that
// does not launch a kernel (launch/attention.hpp runs them).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>

#include "q35/core/status.hpp"
#include "q35/kv/kv_pool.hpp"
#include "q35/launch/launch.hpp"
#include "q35/launch/matmul.hpp"

namespace q35::launch {

struct attn_layer_weights {
  quant::weight_view q;           // [n_embd -> 2 * n_heads * head_dim], per head [q | gate]
  quant::weight_view k;           // [n_embd -> n_kv_heads * head_dim]
  quant::weight_view v;           // [n_embd -> n_kv_heads * value_dim]
  quant::weight_view out;         // [n_heads * value_dim -> n_embd]
  const float* q_norm = nullptr;  // [head_dim], GGUF weights already include the +1
  const float* k_norm = nullptr;  // [head_dim]
};

struct attn_shape {
  int n_embd = 0, n_heads = 0, n_kv_heads = 0, head_dim = 0, value_dim = 0, rope_dim = 0;
  float rope_theta = 0.0f;
  float rms_eps = 0.0f;
};

// Device memory, so a decode step can be captured in a CUDA graph; the ints are host-known bounds.
struct attn_batch {
  const int32_t* seq_offsets = nullptr;       // [n_seqs + 1] rows of x per sequence
  const int32_t* positions = nullptr;         // [n_tokens] absolute position (= cache slot) of each new token
  const int32_t* page_row_offsets = nullptr;  // [n_seqs + 1] page table (CSR, kv::page_table_host)
  const int32_t* page_indices = nullptr;      // [page_row_offsets[n_seqs]]
  const int32_t* seq_lens = nullptr;          // [n_seqs] total length including the new tokens
  int n_seqs = 0;
  int64_t n_tokens = 0;
  int max_seq_tokens = 0;   // most new tokens of one sequence (grid sizing)
  int64_t max_seq_len = 0;  // longest seq_lens entry (split choice)
  int n_splits = 0;         // 0: chosen from max_seq_len and the SM count; > 0 forces (tests, benchmarks)
  // > 0: every split covers this many keys (a multiple of 4), so n_splits = ceil(max_seq_len / split_keys)
  // and the keys of a row's splits do not depend on the other sequences of the batch: a row's result is
  // then the same whatever shares its call (batch invariance; splits past a sequence's end are empty and
  // are skipped by the merge). Takes precedence over n_splits.
  int split_keys = 0;
  // > 0 (and split_keys 0): each sequence's keys are cut, on the device, into at most seq_splits splits of
  // max(attn_min_split_keys, ceil(len / seq_splits) rounded up to 4) keys, len its seq_lens entry. A row's
  // splits then depend only on its own sequence's length: batch invariant like split_keys, valid in a
  // replayed graph while the lengths grow, and a short sequence gets as many splits as a long context
  // would (split_keys sized for the whole context leaves a short one a single split). Launches seq_splits
  // splits; those past a sequence's end exit at once. Takes precedence over n_splits.
  int seq_splits = 0;
  // Rows (new tokens x splits) the split partials hold (0: attn_split_row_budget); the workspace is sized
  // for it (attn_split_workspace_bytes). A forced n_splits, split_keys or seq_splits may use up to this
  // many; the automatic choice stays within attn_split_row_budget. A caller with many batch-invariant rows
  // raises it so that each keeps enough splits (e.g. 64 rows x 32 splits for a lone long context).
  int split_rows = 0;
};

struct attn_layer_args {
  attn_shape shape;
  attn_layer_weights w;
  attn_batch batch;
  kv::kv_layer_view kv;
  const float* x = nullptr;  // [n_tokens][n_embd] layer input after attn_norm
  float* h = nullptr;        // [n_tokens][n_embd] residual: h += attn_output(o)
  void* workspace = nullptr;
  size_t workspace_bytes = 0;  // >= attn_layer_workspace_bytes(shape, n_tokens, max_seq_len)
  // x already quantized by its producer (rmsnorm's act16 output: n_tokens rows of n_embd), or
  // empty: the layer quantizes x once for the projections that read it (quantize_shared_input).
  quant::act16_view maybe_x16;
  // Each matmul computes a token's row as it would alone (launch::matmul_args::row_invariant).
  bool row_invariant = false;
  // Every matmul on the GEMM at every token count (launch::matmul_args::gemm_every_count): a token's
  // row as it would be alone in any call of 1..gemm_i8_invariant_tokens tokens.
  bool gemm_every_count = false;
};

// The core entry points' arguments.
struct attn_append_args {
  attn_shape shape;
  attn_batch batch;
  kv::kv_layer_view kv;
  float* qg = nullptr;       // [n_tokens][n_heads][2 * head_dim]: q part normed and roped in place
  const float* k = nullptr;  // [n_tokens][n_kv_heads][head_dim] projection output
  const float* v = nullptr;  // [n_tokens][n_kv_heads][value_dim]
  const float* q_norm = nullptr;
  const float* k_norm = nullptr;
};
struct attn_core_args {
  attn_shape shape;
  attn_batch batch;
  kv::kv_layer_view kv;
  const float* qg = nullptr;  // [n_tokens][n_heads][2 * head_dim] after attention_append
  float* out = nullptr;       // [n_tokens][n_heads][value_dim]: o * sigmoid(gate)
  void* workspace = nullptr;  // split-KV partials: attn_split_workspace_bytes(shape)
  size_t workspace_bytes = 0;
};

// Split-KV limits: a split covers at least min_split_keys keys, there are at most max_splits, and
// n_splits * n_tokens <= split_row_budget (so the partials stay small and prefill never splits much).
// Why these (derived, not yet measured): batch-1 decode of the 9B has 4 KV heads, so an 8k context needs
// ~128 splits for ~4 blocks (16 warps, ~64 KB of loads in flight) per SM on 132 SMs; 64-key splits keep
// 16 four-key steps per block, and the partials (<= 256 rows x n_heads x value_dim floats, L2-resident)
// stay under 10 % of the K/V bytes from 8k on.
inline constexpr int attn_min_split_keys = 64;
inline constexpr int attn_max_splits = 128;
inline constexpr int attn_split_row_budget = 256;
inline constexpr int attn_max_split_rows = 64 * attn_max_splits;  // attn_batch::split_rows at most

// The split partials' rows of a call (attn_batch::split_rows, or the default budget).
inline int64_t attn_split_rows(const attn_batch& b) { return b.split_rows > 0 ? b.split_rows : attn_split_row_budget; }
// Rows (token x head) per block of attention_prefill: attn_paged_kernel (f32 KV), and
// attn_prefill_mma_kernel (f16 / bf16 KV on tensor cores: 4 warps of 16 rows; at head_dim 256 only 2
// where a block cannot have the 4 warps' shared memory, 102 / 133 KB: sm_86, sm_89).
inline constexpr int attn_prefill_rows = 8;
inline constexpr int attn_prefill_mma_rows = 64;
inline constexpr int attn_prefill_mma_rows_small = 32;

namespace detail {

inline status bad_attn(const std::string& m) { return error(status_code::invalid_argument, "launch::attention: " + m); }

// Which kernel instance serves a call: rows per block, heads per block, chunks, tokens per block.
struct attn_tiling {
  int rows, heads_per_block, n_chunks, tokens_per_block;
};
// mma_rows: attn_prefill_mma_kernel's rows per block (0: not that kernel).
inline attn_tiling tiling(const attn_shape& s, bool prefill, int mma_rows = 0) {
  const int group = s.n_heads / s.n_kv_heads;
  attn_tiling t{};
  if (prefill) {
    t.rows = mma_rows > 0 ? mma_rows : attn_prefill_rows;
  } else {
    t.rows = 1;
    while (t.rows < group && t.rows < 8) t.rows *= 2;
  }
  t.heads_per_block = std::min(group, t.rows);
  t.n_chunks = (group + t.heads_per_block - 1) / t.heads_per_block;
  t.tokens_per_block = t.rows / t.heads_per_block;
  return t;
}

// Splits for a call: enough blocks for ~4 waves' worth of SMs, each split >= attn_min_split_keys keys.
inline int choose_splits(const attn_shape& s, const attn_batch& b, const attn_tiling& t) {
  // a forced count may fill split_rows; the automatic one keeps within the default budget too
  const int64_t rows = attn_split_rows(b);
  const int64_t budget = b.n_splits > 0 ? rows : std::min<int64_t>(rows, attn_split_row_budget);
  const int64_t by_rows = std::max<int64_t>(1, budget / std::max<int64_t>(1, b.n_tokens));
  const int64_t by_len = std::max<int64_t>(1, (b.max_seq_len + attn_min_split_keys - 1) / attn_min_split_keys);
  int64_t n = b.n_splits;
  if (n <= 0) {
    const int64_t blocks = int64_t(b.n_seqs) * ((b.max_seq_tokens + t.tokens_per_block - 1) / t.tokens_per_block) *
                           s.n_kv_heads * t.n_chunks;
    const int64_t target = 4 * int64_t(launch::sm_count());
    n = std::min(by_len, (target + blocks - 1) / std::max<int64_t>(1, blocks));
  }
  return int(std::clamp<int64_t>(std::min(n, by_rows), 1, attn_max_splits));
}

}  // namespace detail

// Device scratch of the split-KV partials of attention_decode / attention_prefill for split_rows rows
// (attn_batch::split_rows).
inline size_t attn_split_workspace_bytes(const attn_shape& s, int64_t split_rows = attn_split_row_budget) {
  const size_t rows = size_t(std::clamp<int64_t>(split_rows, 0, attn_max_split_rows)) * size_t(std::max(s.n_heads, 0));
  return detail::align_256(rows * size_t(std::max(s.value_dim, 0)) * 4) + detail::align_256(rows * 4);
}

// Workspace of attention_layer: q|gate, k, v, o, the split partials (split_rows: attn_batch::split_rows)
// and the projections' scratch.
inline size_t attn_layer_workspace_bytes(const attn_shape& s, int64_t max_tokens, int64_t max_seq_len,
                                         int64_t split_rows = attn_split_row_budget) {
  (void)max_seq_len;  // the split partials are bounded by split_rows, not by the context
  const size_t t = size_t(std::max<int64_t>(max_tokens, 0));
  const size_t qg = detail::align_256(t * size_t(2 * s.n_heads * s.head_dim) * 4);
  const size_t k = detail::align_256(t * size_t(s.n_kv_heads * s.head_dim) * 4);
  const size_t v = detail::align_256(t * size_t(s.n_kv_heads * s.value_dim) * 4);
  const size_t o = detail::align_256(t * size_t(s.n_heads * s.value_dim) * 4);
  const size_t mm =
      detail::align_256(std::max({matmul_workspace_bytes(s.n_embd, int64_t(t), 2 * int64_t(s.n_heads) * s.head_dim),
                                  matmul_workspace_bytes(s.n_embd, int64_t(t), int64_t(s.n_kv_heads) * s.head_dim),
                                  matmul_workspace_bytes(s.n_embd, int64_t(t), int64_t(s.n_kv_heads) * s.value_dim),
                                  matmul_workspace_bytes(int64_t(s.n_heads) * s.value_dim, int64_t(t), s.n_embd)}));
  return qg + k + v + o + attn_split_workspace_bytes(s, split_rows) + mm;
}

// Shape checks shared by every entry point; the message names the bad value.
inline status validate(const attn_shape& s) {
  using detail::bad_attn;
  const auto str = [](auto v) { return std::to_string(v); };
  if (s.n_heads < 1 || s.n_kv_heads < 1 || s.n_heads % s.n_kv_heads != 0)
    return bad_attn("n_heads = " + str(s.n_heads) + " is not a positive multiple of n_kv_heads = " + str(s.n_kv_heads));
  if (s.head_dim != 128 && s.head_dim != 256)
    return bad_attn("head_dim = " + str(s.head_dim) + " is not supported (supported: 128 256)");
  if (s.value_dim != s.head_dim)
    return bad_attn("value_dim = " + str(s.value_dim) + " differs from head_dim = " + str(s.head_dim) +
                    " (not supported)");
  const int e = s.head_dim / warp_size;
  if (s.rope_dim < 0 || s.rope_dim > s.head_dim || s.rope_dim % (2 * e) != 0)
    return bad_attn("rope_dim = " + str(s.rope_dim) + " is not a multiple of " + str(2 * e) + " in 0.." +
                    str(s.head_dim));
  if (!(s.rope_theta > 0.0f) || !std::isfinite(s.rope_theta))
    return bad_attn("rope_theta = " + str(s.rope_theta) + " must be positive");
  if (!(s.rms_eps >= 0.0f) || !std::isfinite(s.rms_eps)) return bad_attn("rms_eps = " + str(s.rms_eps) + " is invalid");
  return status::success();
}

inline status validate(const attn_shape& s, const attn_batch& b, const kv::kv_layer_view& kv) {
  using detail::bad_attn;
  const auto str = [](auto v) { return std::to_string(v); };
  Q35_TRY(validate(s));
  if (b.n_seqs < 0 || b.n_tokens < 0 || b.max_seq_tokens < 0 || b.max_seq_len < 0)
    return bad_attn("negative n_seqs, n_tokens, max_seq_tokens or max_seq_len");
  if (b.n_tokens > INT32_MAX / 2 || b.max_seq_len > INT32_MAX / 2) return bad_attn("batch too large");
  if (b.n_seqs > 65535) return bad_attn("n_seqs = " + str(b.n_seqs) + " exceeds 65535");
  if (b.n_tokens > 0 && (b.max_seq_tokens < 1 || b.max_seq_len < b.max_seq_tokens || b.n_seqs < 1))
    return bad_attn("max_seq_tokens = " + str(b.max_seq_tokens) + ", max_seq_len = " + str(b.max_seq_len) +
                    " and n_seqs = " + str(b.n_seqs) + " cannot hold " + str(b.n_tokens) + " new tokens");
  if (int64_t(b.max_seq_tokens) > b.n_tokens)
    return bad_attn("max_seq_tokens = " + str(b.max_seq_tokens) + " exceeds n_tokens = " + str(b.n_tokens));
  if (b.n_splits < 0 || b.n_splits > attn_max_splits)
    return bad_attn("n_splits = " + str(b.n_splits) + " is outside 0.." + str(attn_max_splits));
  if (b.split_keys < 0 || b.split_keys % 4 != 0)
    return bad_attn("split_keys = " + str(b.split_keys) + " is not a non-negative multiple of 4");
  if (b.seq_splits < 0 || b.seq_splits > attn_max_splits)
    return bad_attn("seq_splits = " + str(b.seq_splits) + " is outside 0.." + str(attn_max_splits));
  if (b.split_rows < 0 || b.split_rows > attn_max_split_rows)
    return bad_attn("split_rows = " + str(b.split_rows) + " is outside 0.." + str(attn_max_split_rows));
  const int64_t rows = attn_split_rows(b);
  if (b.seq_splits > 1 && b.split_keys == 0 && b.seq_splits * b.n_tokens > rows)
    return bad_attn("seq_splits = " + str(b.seq_splits) + " times n_tokens = " + str(b.n_tokens) + " exceeds " +
                    str(rows) + " split rows");
  if (b.split_keys > 0 && b.n_tokens > 0) {
    const int64_t n = (b.max_seq_len + b.split_keys - 1) / b.split_keys;
    if (n > attn_max_splits || (n > 1 && n * b.n_tokens > rows))
      return bad_attn("split_keys = " + str(b.split_keys) + " gives " + str(n) +
                      " splits for max_seq_len = " + str(b.max_seq_len) + " (at most " + str(attn_max_splits) +
                      ", and splits x n_tokens = " + str(b.n_tokens) + " at most " + str(rows) + ")");
  }
  if (b.n_tokens > 0 && (!b.seq_offsets || !b.positions || !b.page_row_offsets || !b.page_indices || !b.seq_lens))
    return bad_attn("null seq_offsets, positions or page table");
  if (kv.empty() || !kv.v) return bad_attn("empty KV view");
  if (kv.n_kv_heads != s.n_kv_heads || kv.head_dim != s.head_dim || kv.value_dim != s.value_dim)
    return bad_attn("the KV view (n_kv_heads " + str(kv.n_kv_heads) + ", head_dim " + str(kv.head_dim) +
                    ", value_dim " + str(kv.value_dim) + ") does not match the layer shape");
  if (kv.page_tokens < 4 || kv.page_tokens > 1024 || (kv.page_tokens & (kv.page_tokens - 1)) != 0)
    return bad_attn("page_tokens = " + str(kv.page_tokens) + " is not a power of two in 4..1024");
  return status::success();
}

}  // namespace q35::launch
