// launch::gdn_layer: one Gated DeltaNet layer (spec §2.2) for a batch of sequences: the four input
// projections (launch::matmul), the recurrent core, and h += ssm_out(y). The core runs either
//   recurrent (gdn_decode_step): one launch, token by token, state in registers;
//   chunked   (gdn_prefill):     four launches, the WY form over chunks of 64 tokens.
// States live in a kv::recurrent_state_pool; each sequence's slot is read at the start of a call
// and updated at its end, so a prompt fed in any split equals the whole prompt.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "q35/core/dispatch.hpp"
#include "q35/core/status.hpp"
#include "q35/kernels/gdn_chunk.hpp"
#include "q35/kernels/gdn_chunk_state.hpp"
#include "q35/kernels/gdn_output.hpp"
#include "q35/kernels/gdn_prep.hpp"
#include "q35/kernels/gdn_recurrent.hpp"
#include "q35/kv/recurrent_state.hpp"
#include "q35/launch/launch.hpp"
#include "q35/launch/matmul.hpp"
#include "q35/quant/weight_view.hpp"

namespace q35::launch {

struct gdn_layer_weights {
  // attn_qkv [n_embd -> conv_dim], attn_gate (z) [n_embd -> n_v d_v], ssm_beta and ssm_alpha
  // [n_embd -> n_v], ssm_out [n_v d_v -> n_embd]; any ggml format launch::matmul takes
  quant::weight_view qkv, gate, beta, alpha, out;
  const float* conv1d = nullptr;   // GGUF ssm_conv1d, ne = [conv_kernel, conv_dim]: [conv_dim][conv_kernel], f32
  const float* dt_bias = nullptr;  // [n_v] (ssm_dt.bias)
  const float* a = nullptr;        // [n_v] (ssm_a = -exp(A_log))
  const float* norm = nullptr;     // [v_head_dim] (ssm_norm, not +1 shifted)
};

struct gdn_shape {
  int n_embd = 0;
  int n_k_heads = 0, n_v_heads = 0;
  int k_head_dim = 0, v_head_dim = 0;
  int conv_kernel = 0;
  float rms_eps = 1e-6f;

  int64_t conv_dim() const { return 2 * int64_t(n_k_heads) * k_head_dim + int64_t(n_v_heads) * v_head_dim; }
  int64_t value_dim() const { return int64_t(n_v_heads) * v_head_dim; }
};

struct gdn_batch {
  const int32_t* seq_offsets = nullptr;  // [n_seqs + 1] device: sequence i owns rows [seq_offsets[i], seq_offsets[i+1])
  const int32_t* slots = nullptr;        // [n_seqs] device: state slot of sequence i, distinct within a batch
  int n_seqs = 0;
  int64_t n_tokens = 0;    // = seq_offsets[n_seqs]
  int max_seq_tokens = 0;  // longest sequence of the batch (1 = pure decode step)
  // Optional host copies of seq_offsets and slots: when set, validate() checks them (offsets
  // ascending from 0 to n_tokens, slots in range and distinct).
  const int32_t* maybe_host_seq_offsets = nullptr;
  const int32_t* maybe_host_slots = nullptr;
};

// Which form of the core runs: automatic picks recurrent up to gdn_recurrent_max_tokens tokens per
// sequence, chunked above.
enum class gdn_core_mode { automatic, recurrent, chunked };
// Sequences of at most this many tokens run token by token [placeholder until measured on a GPU].
inline constexpr int gdn_recurrent_max_tokens = 16;

// The core after the projections (for engines and benchmarks that project themselves).
struct gdn_core_args {
  gdn_shape shape;
  const float* qkv = nullptr;    // [n_tokens][conv_dim] attn_qkv outputs (raw, before the conv)
  const float* z = nullptr;      // [n_tokens][n_v d_v] attn_gate outputs
  const float* b = nullptr;      // [n_tokens][n_v] ssm_beta outputs
  const float* alpha = nullptr;  // [n_tokens][n_v] ssm_alpha outputs
  const float* conv1d = nullptr;
  const float* dt_bias = nullptr;
  const float* a = nullptr;
  const float* norm = nullptr;
  gdn_batch batch;
  kv::gdn_state_view state;
  float* y = nullptr;         // [n_tokens][n_v d_v]: the input of ssm_out
  void* workspace = nullptr;  // chunked only: >= gdn_core_workspace_bytes(shape, n_tokens, chunked)
  size_t workspace_bytes = 0;
  gdn_core_mode mode = gdn_core_mode::automatic;
};

struct gdn_layer_args {
  gdn_shape shape;
  gdn_layer_weights w;
  gdn_batch batch;
  kv::gdn_state_view state;
  const float* x = nullptr;   // [n_tokens][n_embd]: the layer input after attn_norm (16-byte aligned)
  float* h = nullptr;         // [n_tokens][n_embd]: residual stream, h += ssm_out(y)
  void* workspace = nullptr;  // device scratch, >= gdn_layer_workspace_bytes(shape, n_tokens)
  size_t workspace_bytes = 0;
  gdn_core_mode mode = gdn_core_mode::automatic;
  // x already quantized by its producer (rmsnorm's act16 output: n_tokens rows of n_embd), or
  // empty: the layer quantizes x once for the projections that read it (quantize_shared_input).
  quant::act16_view maybe_x16;
  // Each matmul computes a token's row as it would alone (launch::matmul_args::row_invariant).
  bool row_invariant = false;
  // Every matmul on the GEMM at every token count (launch::matmul_args::gemm_every_count): a token's
  // row as it would be alone in any call of 1..gemm_i8_invariant_tokens tokens.
  bool gemm_every_count = false;
};

namespace detail {

inline constexpr size_t gdn_align = 256;
inline size_t gdn_round(size_t b) { return (b + gdn_align - 1) / gdn_align * gdn_align; }

// Carves the chunked core's tensors out of a workspace (or, with base = null, only counts bytes).
inline size_t gdn_chunk_layout(const gdn_shape& s, int64_t n, char* base, kernels::gdn_chunk_tensors* t) {
  const size_t T = size_t(n > 0 ? n : 0), nk = size_t(s.n_k_heads), nv = size_t(s.n_v_heads);
  const size_t dk = size_t(s.k_head_dim), dv = size_t(s.v_head_dim), c = kernels::gdn_chunk_size;
  size_t off = 0;
  auto take = [&](float*& p, size_t floats) {
    p = base ? reinterpret_cast<float*>(base + off) : nullptr;
    off += gdn_round(floats * sizeof(float));
  };
  kernels::gdn_chunk_tensors dummy{};
  kernels::gdn_chunk_tensors& o = t ? *t : dummy;
  take(o.q, T * nk * dk), take(o.k, T * nk * dk), take(o.v, T * nv * dv), take(o.beta, T * nv), take(o.g, T * nv);
  take(o.w, T * nv * dv), take(o.u, T * nv * dk), take(o.aqk, T * nv * c), take(o.o, T * nv * dv);
  return off;
}

// The layer's scratch: projections, the core's output, the chunked core's tensors, matmul scratch.
struct gdn_layer_scratch {
  float *qkv, *z, *b, *alpha, *y;
  char* core;
  size_t core_bytes;
  void* matmul;
  size_t matmul_bytes;
};
inline size_t gdn_layer_layout(const gdn_shape& s, int64_t n, char* base, gdn_layer_scratch* sc) {
  const size_t T = size_t(n > 0 ? n : 0);
  size_t off = 0;
  auto take = [&](size_t bytes) {
    char* p = base ? base + off : nullptr;
    off += gdn_round(bytes);
    return p;
  };
  gdn_layer_scratch d{};
  gdn_layer_scratch& o = sc ? *sc : d;
  o.qkv = reinterpret_cast<float*>(take(T * size_t(s.conv_dim()) * sizeof(float)));
  o.z = reinterpret_cast<float*>(take(T * size_t(s.value_dim()) * sizeof(float)));
  o.b = reinterpret_cast<float*>(take(T * size_t(s.n_v_heads) * sizeof(float)));
  o.alpha = reinterpret_cast<float*>(take(T * size_t(s.n_v_heads) * sizeof(float)));
  o.y = reinterpret_cast<float*>(take(T * size_t(s.value_dim()) * sizeof(float)));
  o.core_bytes = gdn_chunk_layout(s, n, nullptr, nullptr);
  o.core = take(o.core_bytes);
  o.matmul_bytes =
      std::max({matmul_workspace_bytes(s.n_embd, n, s.conv_dim()), matmul_workspace_bytes(s.n_embd, n, s.value_dim()),
                matmul_workspace_bytes(s.n_embd, n, s.n_v_heads), matmul_workspace_bytes(s.value_dim(), n, s.n_embd)});
  o.matmul = take(o.matmul_bytes);
  return off;
}

inline status bad_gdn(const std::string& m) { return error(status_code::invalid_argument, "launch::gdn: " + m); }

}  // namespace detail

// Device scratch the chunked core needs for n_tokens tokens (0 for the recurrent core).
inline size_t gdn_core_workspace_bytes(const gdn_shape& s, int64_t max_tokens,
                                       gdn_core_mode mode = gdn_core_mode::chunked) {
  return mode == gdn_core_mode::recurrent ? 0 : detail::gdn_chunk_layout(s, max_tokens, nullptr, nullptr);
}
// Device scratch gdn_layer needs for up to max_tokens tokens (either core form).
inline size_t gdn_layer_workspace_bytes(const gdn_shape& s, int64_t max_tokens) {
  return detail::gdn_layer_layout(s, max_tokens, nullptr, nullptr);
}

// Head dims the kernels are compiled for (k_head_dim == v_head_dim).
inline constexpr int gdn_head_dims[] = {64, 128};

// Checks shape, batch and state; the message names the bad value.
inline status validate(const gdn_shape& s, const gdn_batch& b, const kv::gdn_state_view& st) {
  using detail::bad_gdn;
  const auto str = [](auto v) { return std::to_string(v); };
  if (s.n_k_heads < 1 || s.n_v_heads < 1)
    return bad_gdn("n_k_heads = " + str(s.n_k_heads) + ", n_v_heads = " + str(s.n_v_heads) + " must be >= 1");
  if (s.n_v_heads % s.n_k_heads != 0)
    return bad_gdn("n_v_heads = " + str(s.n_v_heads) + " is not a multiple of n_k_heads = " + str(s.n_k_heads));
  if (s.k_head_dim != s.v_head_dim)
    return bad_gdn("k_head_dim = " + str(s.k_head_dim) + " differs from v_head_dim = " + str(s.v_head_dim));
  if (s.k_head_dim != 64 && s.k_head_dim != 128)
    return bad_gdn("head dim " + str(s.k_head_dim) + " is not supported (supported: 64 128)");
  if (s.conv_kernel < 1 || s.conv_kernel > 8)
    return bad_gdn("conv_kernel = " + str(s.conv_kernel) + " is outside 1..8");
  if (!(s.rms_eps > 0.0f)) return bad_gdn("rms_eps = " + str(s.rms_eps) + " must be positive");
  if (b.n_seqs < 0) return bad_gdn("n_seqs = " + str(b.n_seqs) + " is negative");
  if (b.n_tokens < 0) return bad_gdn("n_tokens = " + str(b.n_tokens) + " is negative");
  if (b.n_tokens > INT32_MAX) return bad_gdn("n_tokens = " + str(b.n_tokens) + " exceeds int32 seq_offsets");
  if (b.max_seq_tokens < 0 || b.max_seq_tokens > b.n_tokens)
    return bad_gdn("max_seq_tokens = " + str(b.max_seq_tokens) + " is outside 0..n_tokens = " + str(b.n_tokens));
  if (b.n_seqs > 0 && (!b.seq_offsets || !b.slots)) return bad_gdn("seq_offsets or slots is null");
  if (b.n_tokens > 0 && b.n_seqs == 0) return bad_gdn("n_tokens = " + str(b.n_tokens) + " but n_seqs = 0");
  if (st.empty()) return bad_gdn("the state view is empty (layer index outside the pool?)");
  const kv::gdn_state_shape& ss = st.shape;
  if (ss.n_k_heads != s.n_k_heads || ss.n_v_heads != s.n_v_heads || ss.k_head_dim != s.k_head_dim ||
      ss.v_head_dim != s.v_head_dim || ss.conv_kernel != s.conv_kernel)
    return bad_gdn("the state pool's shape (n_k " + str(ss.n_k_heads) + ", n_v " + str(ss.n_v_heads) + ", d_k " +
                   str(ss.k_head_dim) + ", d_v " + str(ss.v_head_dim) + ", conv_kernel " + str(ss.conv_kernel) +
                   ") differs from the layer's");
  if (b.n_seqs > ss.n_slots)
    return bad_gdn("n_seqs = " + str(b.n_seqs) + " exceeds the pool's " + str(ss.n_slots) + " slots");
  if (b.maybe_host_seq_offsets) {
    const int32_t* o = b.maybe_host_seq_offsets;
    if (o[0] != 0) return bad_gdn("seq_offsets[0] = " + str(o[0]) + " is not 0");
    int longest = 0;
    for (int i = 0; i < b.n_seqs; ++i) {
      if (o[i + 1] < o[i])
        return bad_gdn("seq_offsets[" + str(i + 1) + "] = " + str(o[i + 1]) + " is below seq_offsets[" + str(i) +
                       "] = " + str(o[i]));
      longest = std::max(longest, o[i + 1] - o[i]);
    }
    if (o[b.n_seqs] != b.n_tokens)
      return bad_gdn("seq_offsets[n_seqs] = " + str(o[b.n_seqs]) + " differs from n_tokens = " + str(b.n_tokens));
    if (longest > b.max_seq_tokens)
      return bad_gdn("a sequence of " + str(longest) + " tokens exceeds max_seq_tokens = " + str(b.max_seq_tokens));
  }
  if (b.maybe_host_slots) {
    std::vector<bool> used(size_t(ss.n_slots), false);
    for (int i = 0; i < b.n_seqs; ++i) {
      const int32_t sl = b.maybe_host_slots[i];
      if (sl < 0 || sl >= ss.n_slots)
        return bad_gdn("slots[" + str(i) + "] = " + str(sl) + " is outside 0.." + str(ss.n_slots - 1));
      if (used[size_t(sl)]) return bad_gdn("slot " + str(sl) + " appears twice in one batch");
      used[size_t(sl)] = true;
    }
  }
  return status::success();
}

inline status validate(const gdn_core_args& a) {
  using detail::bad_gdn;
  Q35_TRY(validate(a.shape, a.batch, a.state));
  if (a.batch.n_tokens == 0) return status::success();
  if (!a.qkv || !a.z || !a.b || !a.alpha || !a.y) return bad_gdn("qkv, z, b, alpha or y is null");
  if (!a.conv1d || !a.dt_bias || !a.a || !a.norm) return bad_gdn("conv1d, dt_bias, a or norm is null");
  if (a.mode != gdn_core_mode::recurrent) {
    const size_t need = gdn_core_workspace_bytes(a.shape, a.batch.n_tokens);
    if (a.workspace_bytes < need || (need > 0 && !a.workspace))
      return bad_gdn("workspace of " + std::to_string(a.workspace_bytes) + " bytes is below the " +
                     std::to_string(need) + " the chunked core needs for " + std::to_string(a.batch.n_tokens) +
                     " tokens");
  }
  return status::success();
}

inline status validate(const gdn_layer_args& a) {
  using detail::bad_gdn;
  const auto str = [](auto v) { return std::to_string(v); };
  Q35_TRY(validate(a.shape, a.batch, a.state));
  const gdn_shape& s = a.shape;
  if (s.n_embd < 1) return bad_gdn("n_embd = " + str(s.n_embd) + " must be >= 1");
  const auto check_w = [&](const quant::weight_view& w, const char* name, int64_t rows, int64_t cols) -> status {
    if (w.empty()) return bad_gdn(std::string(name) + " weight is null");
    if (w.rows != rows || w.cols != cols || w.n_mats != 1)
      return bad_gdn(std::string(name) + " weight is " + str(w.rows) + " x " + str(w.cols) + " (x " + str(w.n_mats) +
                     "), expected " + str(rows) + " x " + str(cols));
    return status::success();
  };
  Q35_TRY(check_w(a.w.qkv, "attn_qkv", s.conv_dim(), s.n_embd));
  Q35_TRY(check_w(a.w.gate, "attn_gate", s.value_dim(), s.n_embd));
  Q35_TRY(check_w(a.w.beta, "ssm_beta", s.n_v_heads, s.n_embd));
  Q35_TRY(check_w(a.w.alpha, "ssm_alpha", s.n_v_heads, s.n_embd));
  Q35_TRY(check_w(a.w.out, "ssm_out", s.n_embd, s.value_dim()));
  if (!a.w.conv1d || !a.w.dt_bias || !a.w.a || !a.w.norm)
    return bad_gdn("ssm_conv1d, ssm_dt.bias, ssm_a or ssm_norm is null");
  if (a.batch.n_tokens == 0) return status::success();
  if (!a.x || !a.h) return bad_gdn("x or h is null");
  if (reinterpret_cast<uintptr_t>(a.x) % 16 != 0) return bad_gdn("x is not 16-byte aligned");
  const size_t need = gdn_layer_workspace_bytes(s, a.batch.n_tokens);
  if (!a.workspace || a.workspace_bytes < need)
    return bad_gdn("workspace of " + str(a.workspace_bytes) + " bytes is below the " + str(need) + " needed for " +
                   str(a.batch.n_tokens) + " tokens");
  if (reinterpret_cast<uintptr_t>(a.workspace) % detail::gdn_align != 0)
    return bad_gdn("workspace is not " + str(detail::gdn_align) + "-byte aligned");
  return status::success();
}

namespace detail {

template <int D>
status run_gdn_core(const gdn_core_args& a, bool chunked, stream_t stream) {
  const kernels::gdn_core_inputs in{a.qkv,
                                    a.z,
                                    a.b,
                                    a.alpha,
                                    a.conv1d,
                                    a.dt_bias,
                                    a.a,
                                    a.norm,
                                    a.batch.seq_offsets,
                                    a.batch.slots,
                                    a.state,
                                    a.batch.n_seqs,
                                    ops::gdn_heads{a.shape.n_k_heads, a.shape.n_v_heads},
                                    a.shape.rms_eps};
  using recurrent = kernels::gdn_recurrent_kernel<D, D>;
  if (!chunked) return launch<recurrent>(typename recurrent::params{in, a.y}, stream);
  kernels::gdn_chunk_tensors t{};
  gdn_chunk_layout(a.shape, a.batch.n_tokens, static_cast<char*>(a.workspace), &t);
  const int n_chunks = int(ceil_div<int64_t>(a.batch.max_seq_tokens, kernels::gdn_chunk_size));
  using prep = kernels::gdn_prep_kernel<D, D>;
  using chunk = kernels::gdn_chunk_kernel<D, D>;
  using state = kernels::gdn_chunk_state_kernel<D, D>;
  using output = kernels::gdn_output_kernel<D, D>;
  Q35_TRY(launch<prep>(typename prep::params{in, t, a.batch.n_tokens}, stream));
  Q35_TRY(launch<chunk>(typename chunk::params{a.batch.seq_offsets, t, a.batch.n_seqs, n_chunks, in.heads}, stream));
  Q35_TRY(launch<state>(
      typename state::params{a.batch.seq_offsets, a.batch.slots, a.state, t, a.batch.n_seqs, in.heads}, stream));
  return launch<output>(typename output::params{in, t.o, a.y, a.batch.n_tokens}, stream);
}

inline bool gdn_use_chunked(gdn_core_mode mode, int max_seq_tokens) {
  return mode == gdn_core_mode::chunked ||
         (mode == gdn_core_mode::automatic && max_seq_tokens > gdn_recurrent_max_tokens);
}

template <int = 0>
inline status gdn_core_unchecked(const gdn_core_args& a, stream_t stream) {
  if (a.batch.n_tokens == 0 || a.batch.n_seqs == 0) return status::success();
  const bool chunked = gdn_use_chunked(a.mode, a.batch.max_seq_tokens);
  return dispatch<64, 128>(a.shape.k_head_dim,
                           [&](auto d) { return run_gdn_core<decltype(d)::value>(a, chunked, stream); });
}

}  // namespace detail

// The GDN core for a batch (after the projections, before ssm_out): y and the slots' states.
// Launches: 1 (recurrent) or 4 (chunked). Asynchronous.
template <int = 0>
inline status gdn_core(const gdn_core_args& a, stream_t stream = nullptr) {
  Q35_TRY(validate(a));
  return detail::gdn_core_unchecked(a, stream);
}
// The decode step: the recurrent core (one launch; any token count, meant for 1 per sequence).
template <int = 0>
inline status gdn_decode_step(gdn_core_args a, stream_t stream = nullptr) {
  a.mode = gdn_core_mode::recurrent;
  return gdn_core(a, stream);
}
// The chunked prefill core (four launches).
template <int = 0>
inline status gdn_prefill(gdn_core_args a, stream_t stream = nullptr) {
  a.mode = gdn_core_mode::chunked;
  return gdn_core(a, stream);
}

// One GDN layer: h += ssm_out(core(projections(x))). Launches: 4 projections + 1 (recurrent core) or
// 4 (chunked core) + 1 (ssm_out with the residual add). Asynchronous.
template <int = 0>
inline status gdn_layer(const gdn_layer_args& a, stream_t stream = nullptr) {
  Q35_TRY(validate(a));
  const int64_t n = a.batch.n_tokens;
  if (n == 0) return status::success();
  detail::gdn_layer_scratch sc{};
  detail::gdn_layer_layout(a.shape, n, static_cast<char*>(a.workspace), &sc);
  const auto project = [&](const quant::weight_view& w, const float* x, const quant::act16_view& x16,
                           const quant::act8x2_view& x8, float* y, ops::epilogue e) {
    matmul_args m;
    m.w = w, m.x = x, m.y = y, m.n_tokens = n, m.epilogue = e;
    m.maybe_workspace = sc.matmul, m.workspace_bytes = sc.matmul_bytes, m.maybe_x16 = x16;
    m.maybe_x8 = x8, m.row_invariant = a.row_invariant, m.gemm_every_count = a.gemm_every_count;
    return matmul(m, stream);
  };
  // x quantized once for its four projections (they then leave sc.matmul alone; ssm_out is the next to use it)
  quant::act16_view x16 = a.maybe_x16;
  quant::act8x2_view x8;
  Q35_TRY(quantize_shared_input(a.x, n, a.shape.n_embd, {a.w.qkv, a.w.gate, a.w.beta, a.w.alpha}, sc.matmul,
                                sc.matmul_bytes, x16, x8, stream, a.gemm_every_count));
  Q35_TRY(project(a.w.qkv, a.x, x16, x8, sc.qkv, ops::epilogue::store));
  Q35_TRY(project(a.w.gate, a.x, x16, x8, sc.z, ops::epilogue::store));
  Q35_TRY(project(a.w.beta, a.x, x16, x8, sc.b, ops::epilogue::store));
  Q35_TRY(project(a.w.alpha, a.x, x16, x8, sc.alpha, ops::epilogue::store));
  gdn_core_args c;
  c.shape = a.shape, c.qkv = sc.qkv, c.z = sc.z, c.b = sc.b, c.alpha = sc.alpha;
  c.conv1d = a.w.conv1d, c.dt_bias = a.w.dt_bias, c.a = a.w.a, c.norm = a.w.norm;
  c.batch = a.batch, c.state = a.state, c.y = sc.y;
  c.workspace = sc.core, c.workspace_bytes = sc.core_bytes, c.mode = a.mode;
  Q35_TRY(detail::gdn_core_unchecked(c, stream));
  return project(a.w.out, sc.y, {}, {}, a.h, ops::epilogue::residual);
}

}  // namespace q35::launch
