// launch::moe_ffn's decode path, for calls of up to moe_decode_limit tokens: the pairs' matrix
// indexes of a layer whose experts sit behind an index, one launch for the gate+up SwiGLU of every
// selected expert (and the shared expert's), one for the weighted down projections added to the
// residual, on the GEMV engine's dots (16-bit integer activations where the format allows).
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>

#include "q35/core/dispatch.hpp"
#include "q35/core/status.hpp"
#include "q35/kernels/moe.hpp"
#include "q35/kernels/moe_index.hpp"
#include "q35/launch/ffn.hpp"
#include "q35/launch/launch.hpp"
#include "q35/launch/matmul.hpp"
#include "q35/launch/moe_plan.hpp"

namespace q35::launch {

namespace detail {

// Decode with experts through an index: each pair's expert id -> its gate/up and down matrix indexes.
template <int = 0>
inline status moe_apply_index(const ffn_layer_args& a, const moe_weights& w, stream_t stream) {
  const moe_buffers b = moe_buffers_of(a);
  const kernels::moe_index_kernel::params p{b.ids,
                                            w.maybe_index.gate_up,
                                            w.maybe_index.down,
                                            reinterpret_cast<int32_t*>(b.ws + b.l.index_gu),
                                            reinterpret_cast<int32_t*>(b.ws + b.l.index_dn),
                                            int32_t(a.n_tokens * a.shape.n_experts_used),
                                            a.shape.n_experts,
                                            w.maybe_index.n_virtual};
  return launch<kernels::moe_index_kernel>(p, stream);
}

// Whether the decode kernels compute the shared expert's gate+up (down) themselves: only in the
// routed experts' format (one instance per format, not per pair of formats).
inline bool moe_fused_gate_up(const moe_weights& w, const ffn_shape& s) {
  return s.shared_ff_dim > 0 && w.shexp_gate.type == w.gate_exps.type;
}
inline bool moe_fused_down(const moe_weights& w, const ffn_shape& s) {
  return s.shared_ff_dim > 0 && w.shexp_down.type == w.down_exps.type;
}

// Whether the decode kernels read 16-bit activations for matrices of Format with rows of `cols`
// (the GEMV engine's integer path: dot16 items that tile the row, 16-byte aligned rows and strides).
template <class Format>
bool moe_int_path(int64_t cols, std::initializer_list<uintptr_t> addresses_and_strides) {
  if constexpr (ops::has_dot16<Format>) {
    uintptr_t bits = 0;
    for (uintptr_t v : addresses_and_strides) bits |= v;
    return cols % ops::dot16<Format>::item_elems == 0 && bits % 16 == 0;
  } else {
    (void)cols, (void)addresses_and_strides;
    return false;
  }
}
inline uintptr_t moe_addr(const void* p) { return reinterpret_cast<uintptr_t>(p); }

// Q6_K down rows of 512 or 1024 weights: the decode down kernel bundles 4 or 2 of them into one
// 8-block item (moe_down_kernel's BlocksPerRow); 0 where that does not apply.
inline int moe_q6k_bundle_blocks(const moe_weights& w, const ffn_shape& s) {
  if (w.down_exps.type != uint32_t(quant::type_id::q6_k)) return 0;
  const int ff = s.expert_ff_dim;
  if ((ff != 512 && ff != 1024) || s.n_embd % (2048 / ff) != 0) return 0;
  if (moe_fused_down(w, s) && s.shared_ff_dim != ff) return 0;
  return ff / 256;
}

// Whether moe_decode_down takes the integer path (then moe_decode_gate_up writes act16 and sh_act16).
template <int = 0>
inline bool moe_down_int_path(const moe_weights& w, const ffn_shape& s) {
  bool yes = false;
  (void)quant::with_format(w.down_exps.type, [&](auto tag) {
    using F = typename decltype(tag)::type;
    const uintptr_t stride = uintptr_t(w.down_exps.stride_bytes());
    if (moe_q6k_bundle_blocks(w, s) > 0) {  // items of whole row bundles: 16-byte aligned matrices suffice
      yes = moe_int_path<F>(
          2048, {moe_addr(w.down_exps.data), stride, moe_fused_down(w, s) ? moe_addr(w.shexp_down.data) : 0});
    } else {
      yes = moe_int_path<F>(s.expert_ff_dim, {moe_addr(w.down_exps.data), stride});
      if (moe_fused_down(w, s)) yes = yes && moe_int_path<F>(s.shared_ff_dim, {moe_addr(w.shexp_down.data)});
    }
    // a fused shared down reads sh_act16, which only the fused gate/up kernel writes
    if (moe_fused_down(w, s)) yes = yes && moe_fused_gate_up(w, s);
  });
  return yes;
}

// Lanes per row of the decode kernels: the largest power of two <= 32 dividing the row's items.
template <class Format, bool Act16>
int moe_log2_lanes(int64_t cols) {
  const int64_t items = cols / ops::gemv_engine<Format, 1, 1, Act16>::item_elems;
  int k = 0;
  while (k < 5 && items % (int64_t(2) << k) == 0) ++k;
  return k;
}

// Which dots of the decode kernels read 16-bit activations (the GEMV engine's integer path): the
// routed (and fused shared) gate/up on x, and the routed (and fused shared) down on act.
struct moe_decode_paths {
  bool gate_up_act16 = false, down_act16 = false;
};
template <int = 0>
inline moe_decode_paths moe_decode_paths_of(const moe_weights& w, const ffn_shape& s) {
  moe_decode_paths r;
  r.down_act16 = moe_down_int_path(w, s);
  const bool fused = moe_fused_gate_up(w, s);
  (void)quant::with_format(w.gate_exps.type, [&](auto tag) {
    using F = typename decltype(tag)::type;
    r.gate_up_act16 = moe_int_path<F>(
        s.n_embd, {moe_addr(w.gate_exps.data), moe_addr(w.up_exps.data), uintptr_t(w.gate_exps.stride_bytes()),
                   fused ? moe_addr(w.shexp_gate.data) : 0, fused ? moe_addr(w.shexp_up.data) : 0});
  });
  return r;
}

// Launches moe_gate_up_kernel<F, Act16> (see moe_decode_gate_up).
template <class F, bool Act16>
status run_moe_gate_up(const ffn_layer_args& a, const moe_weights& w, const moe_buffers& b,
                       const quant::act16_view& x16, bool down16, stream_t stream) {
  const ffn_shape& s = a.shape;
  using kernel = kernels::moe_gate_up_kernel<F, Act16>;
  typename kernel::params p{};
  p.x = a.x, p.x16 = x16;
  p.gate = static_cast<const uint8_t*>(w.gate_exps.data);
  p.up_offset_bytes = static_cast<const uint8_t*>(w.up_exps.data) - p.gate;
  p.expert_stride_bytes = w.gate_exps.stride_bytes();
  p.ids = w.maybe_index.empty() ? b.ids : reinterpret_cast<const int32_t*>(b.ws + b.l.index_gu), p.act = b.act;
  if (moe_fused_gate_up(w, s)) {
    p.maybe_sh_gate = static_cast<const uint8_t*>(w.shexp_gate.data);
    p.sh_up_offset_bytes = static_cast<const uint8_t*>(w.shexp_up.data) - p.maybe_sh_gate;
    p.maybe_sh_act = b.sh_act;
  }
  if (down16) {
    const quant::act16_view v = act16_layout(b.ws + b.l.act16, s.expert_ff_dim, a.n_tokens * s.n_experts_used);
    p.maybe_act_q = const_cast<int16_t*>(v.q), p.maybe_act_groups = const_cast<quant::act16_group*>(v.groups);
    if (moe_fused_down(w, s)) {  // (then the gate/up is fused too: moe_down_int_path)
      const quant::act16_view sv = act16_layout(b.ws + b.l.sh_act16, s.shared_ff_dim, a.n_tokens);
      p.maybe_sh_act_q = const_cast<int16_t*>(sv.q), p.maybe_sh_act_groups = const_cast<quant::act16_group*>(sv.groups);
    }
  }
  p.n_tokens = a.n_tokens, p.k = s.n_experts_used, p.n_embd = s.n_embd;
  p.n_experts = w.maybe_index.empty() ? s.n_experts : w.maybe_index.n_virtual;  // the ids' range
  p.expert_ff = s.expert_ff_dim, p.shared_ff = s.shared_ff_dim, p.error_flag = a.error_flag;
  p.log2_lanes = moe_log2_lanes<F, Act16>(s.n_embd);
  return launch<kernel>(p, stream);
}

// Decode step 2: act[p] = silu(gate_e x) * (up_e x) for every pair, and the shared expert's
// (through launch::matmul when it has another format; its down projection then too); with the
// 16-bit copies of act and sh_act when the down projection reads them.
template <int = 0>
inline status moe_decode_gate_up(const ffn_layer_args& a, const moe_weights& w, stream_t stream) {
  const ffn_shape& s = a.shape;
  const moe_buffers b = moe_buffers_of(a);
  quant::act16_view x16 = a.maybe_x16;
  // the unfused shared expert's matmuls; with gemm_every_count on the GEMM, in the plan's mm region
  const auto shared_matmul = [&](matmul_args m) {
    m.n_tokens = a.n_tokens, m.row_invariant = a.row_invariant;
    if (a.gemm_every_count)
      m.gemm_every_count = true, m.maybe_workspace = b.ws + b.l.mm, m.workspace_bytes = b.l.total - b.l.mm;
    return matmul(m, stream);
  };
  if (s.shared_ff_dim > 0 && !moe_fused_gate_up(w, s)) {
    matmul_args m;
    m.w = w.shexp_gate, m.maybe_w_up = w.shexp_up, m.x = a.x, m.y = b.sh_act;
    m.epilogue = ops::epilogue::swiglu, m.maybe_x16 = x16;
    Q35_TRY(shared_matmul(m));
  }
  const moe_decode_paths paths = moe_decode_paths_of(w, s);
  if (paths.gate_up_act16 && x16.empty()) {  // x quantized once here unless its producer did it
    Q35_TRY(
        quantize_act16(a.x, a.n_tokens, s.n_embd, b.ws + b.l.x16, quant::act16_bytes(s.n_embd, a.n_tokens), stream));
    x16 = act16_layout(b.ws + b.l.x16, s.n_embd, a.n_tokens);
  }
  Q35_TRY(quant::with_format(w.gate_exps.type, [&](auto tag) -> status {
    using F = typename decltype(tag)::type;
    if constexpr (ops::has_dot16<F>) {
      if (paths.gate_up_act16) return run_moe_gate_up<F, true>(a, w, b, x16, paths.down_act16, stream);
    }
    return run_moe_gate_up<F, false>(a, w, b, {}, paths.down_act16, stream);
  }));
  if (s.shared_ff_dim > 0 && !moe_fused_down(w, s)) {
    matmul_args m;
    m.w = w.shexp_down, m.x = b.sh_act, m.y = b.sh_y;
    Q35_TRY(shared_matmul(m));
  }
  return status::success();
}

// Launches moe_down_kernel<F, Act16, Policy, BlocksPerRow> (see moe_decode_down).
template <class F, bool Act16, class Policy = kernels::moe_policy_decode, int BlocksPerRow = 0>
status run_moe_down(const ffn_layer_args& a, const moe_weights& w, const moe_buffers& b, stream_t stream) {
  const ffn_shape& s = a.shape;
  using kernel = kernels::moe_down_kernel<F, Act16, Policy, BlocksPerRow>;
  typename kernel::params p{};
  p.act = b.act;
  if (Act16) p.act16 = act16_layout(b.ws + b.l.act16, s.expert_ff_dim, a.n_tokens * s.n_experts_used);
  p.down = static_cast<const uint8_t*>(w.down_exps.data);
  p.expert_stride_bytes = w.down_exps.stride_bytes();
  p.ids = w.maybe_index.empty() ? b.ids : reinterpret_cast<const int32_t*>(b.ws + b.l.index_dn);
  p.weights = b.weights;
  if (moe_fused_down(w, s)) {
    p.maybe_sh_act = b.sh_act;
    if (Act16) p.sh_act16 = act16_layout(b.ws + b.l.sh_act16, s.shared_ff_dim, a.n_tokens);
    p.maybe_sh_down = static_cast<const uint8_t*>(w.shexp_down.data);
  } else if (s.shared_ff_dim > 0) {
    p.maybe_sh_y = b.sh_y;
  }
  p.maybe_sh_gate = s.shared_ff_dim > 0 ? b.gate : nullptr;
  p.h = a.h;
  p.n_tokens = a.n_tokens, p.k = s.n_experts_used, p.n_embd = s.n_embd;
  p.n_experts = w.maybe_index.empty() ? s.n_experts : w.maybe_index.n_virtual;  // the ids' range
  p.expert_ff = s.expert_ff_dim, p.shared_ff = s.shared_ff_dim, p.error_flag = a.error_flag;
  p.log2_lanes = moe_log2_lanes<F, Act16>(s.expert_ff_dim);
  return launch<kernel>(p, stream);
}

// Decode step 3: h += sum_j w_j down_{e_j} act_j + gate * down_sh sh_act.
template <int = 0>
inline status moe_decode_down(const ffn_layer_args& a, const moe_weights& w, stream_t stream) {
  const moe_buffers b = moe_buffers_of(a);
  const bool int_path = moe_down_int_path(w, a.shape);
  return quant::with_format(w.down_exps.type, [&](auto tag) -> status {
    using F = typename decltype(tag)::type;
    if constexpr (F::id == quant::type_id::q6_k) {
      // rows of 512 / 1024: 4 / 2 rows per item, a (job, bundle) per thread of 64-thread blocks
      const int bundle = int_path ? moe_q6k_bundle_blocks(w, a.shape) : 0;
      if (bundle == 2) return run_moe_down<F, true, kernels::moe_policy<64>, 2>(a, w, b, stream);
      if (bundle == 4) return run_moe_down<F, true, kernels::moe_policy<64>, 4>(a, w, b, stream);
    }
    if constexpr (ops::has_dot16<F>) {
      if (int_path) return run_moe_down<F, true>(a, w, b, stream);
    }
    return run_moe_down<F, false>(a, w, b, stream);
  });
}
}  // namespace detail

}  // namespace q35::launch
