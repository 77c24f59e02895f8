// Test fixture of the MoE FFN tests: random weights of one layer in chosen GGUF formats (device
// bytes plus the reference's dequantized copy), inputs, a runner for launch::moe_ffn and the
// comparison with the float64 reference (tests/reference/moe_reference.hpp).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <string>
#include <vector>

#include "kernels/weights.hpp"
#include "q35/launch/moe.hpp"
#include "q35/quant/format_list.hpp"
#include "reference/moe_reference.hpp"
#include "test_util.hpp"

namespace q35::test {

// One tensor: device bytes, its view, and the dequantized floats.
struct moe_tensor {
  device_buffer<uint8_t> bytes;
  quant::weight_view view;
  std::vector<float> ref;
  std::vector<float> parts;  // P of the integer path's bound (weight_parts)
};

inline moe_tensor make_tensor(uint32_t type, int64_t n_mats, int64_t rows, int64_t cols, uint64_t seed) {
  moe_tensor t;
  std::vector<uint8_t> host;
  Q35_REQUIRE_OK(quant::with_format(type, [&](auto tag) {
    using F = typename decltype(tag)::type;
    host = random_weights<F>(n_mats * rows, cols, seed);
    t.ref = reference_weights<F>(host, n_mats * rows * cols);
    t.parts = weight_parts<F>(host, n_mats * rows * cols);
  }));
  t.bytes = to_device(host);
  t.view = {t.bytes.data(), type, cols, rows, n_mats, 0};
  return t;
}

inline moe_tensor make_f32(const std::vector<float>& v, int64_t rows, int64_t cols) {
  moe_tensor t;
  std::vector<uint8_t> host(v.size() * 4);
  std::memcpy(host.data(), v.data(), host.size());
  t.bytes = to_device(host);
  t.ref = v;
  t.view = {t.bytes.data(), uint32_t(quant::type_id::f32), cols, rows, 1, 0};
  return t;
}

struct moe_case_spec {
  int n_embd = 256, n_experts = 8, k = 2, expert_ff = 256, shared_ff = 256;  // shared_ff 0: no shared expert
  int64_t n_tokens = 1;
  uint32_t type = uint32_t(quant::type_id::q8_0);  // gate/up experts
  uint32_t down_type = uint32_t(quant::type_id::q8_0);
  uint32_t sh_type = uint32_t(quant::type_id::q8_0);  // shared gate/up
  uint32_t sh_down_type = uint32_t(quant::type_id::q8_0);
  bool merged_gate_up = false;  // one [E][2 ff][n_embd] tensor, viewed as gate and up row ranges
  int forced_experts = 0;       // > 0: every token selects experts 5, 2, 7, ... (mod E) first, in that order
  bool every_count = false;     // ffn_layer_args::gemm_every_count (the decode kernels up to 64 tokens)
  uint64_t seed = 1;
};

// Whether the call takes the decode kernels (else the grouped path).
inline bool decode_path(const moe_case_spec& s) { return s.n_tokens <= launch::moe_decode_limit(s.every_count); }

struct moe_case {
  moe_case_spec spec;
  moe_tensor router, shexp_inp, gate_up, up, down, sh_gate, sh_up, sh_down;
  launch::moe_weights weights;
  ref::moe_ref_weights ref_w;
  std::vector<float> x, h0;
};

inline launch::ffn_shape shape_of(const moe_case_spec& s) {
  launch::ffn_shape sh;
  sh.n_embd = s.n_embd, sh.n_experts = s.n_experts, sh.n_experts_used = s.k;
  sh.expert_ff_dim = s.expert_ff, sh.shared_ff_dim = s.shared_ff;
  return sh;
}

// The forced expert of rank j.
inline int forced_expert(int j, int n_experts) { return (5 + 3 * j) % n_experts; }

inline moe_case make_moe_case(const moe_case_spec& s) {
  moe_case c;
  c.spec = s;
  const int n = s.n_embd, E = s.n_experts, ff = s.expert_ff, sff = s.shared_ff;
  uint64_t seed = s.seed * 1000;
  c.x = random_floats(size_t(s.n_tokens) * n, seed++);
  c.h0 = random_floats(size_t(s.n_tokens) * n, seed++);
  std::vector<float> wr = random_floats(size_t(E) * n, seed++);
  if (s.forced_experts > 0) {
    // logit_e = 3 w_e0 + (other columns, |.| ~ 0.5): the forced experts get 3 (12 - 2 j), the rest -12
    for (auto& v : wr) v *= 0.1f;
    for (int64_t t = 0; t < s.n_tokens; ++t) c.x[size_t(t * n)] = 3.0f;
    for (int e = 0; e < E; ++e) wr[size_t(e) * n] = -4.0f;
    for (int j = 0; j < s.forced_experts; ++j) wr[size_t(forced_expert(j, E)) * n] = 4.0f - 0.67f * float(j);
  }
  c.router = make_f32(wr, E, n);
  c.weights.router = c.router.view;
  ref::moe_ref_weights& r = c.ref_w;
  std::vector<float> gate_parts, up_parts;
  r.n_embd = n, r.n_experts = E, r.k = s.k, r.expert_ff = ff, r.shared_ff = sff;
  r.router = wr;
  if (s.merged_gate_up) {
    c.gate_up = make_tensor(s.type, E, 2 * ff, n, seed++);
    c.weights.gate_exps = c.gate_up.view.row_range(0, ff);
    c.weights.up_exps = c.gate_up.view.row_range(ff, ff);
    r.gate.resize(size_t(E) * ff * n), r.up.resize(size_t(E) * ff * n);
    gate_parts.resize(r.gate.size()), up_parts.resize(r.up.size());
    for (int e = 0; e < E; ++e)
      for (int64_t i = 0; i < int64_t(ff) * n; ++i) {
        const size_t g = size_t(e * 2 * int64_t(ff) * n + i), u = size_t((e * 2 + 1) * int64_t(ff) * n + i);
        r.gate[size_t(e * int64_t(ff) * n + i)] = c.gate_up.ref[g];
        r.up[size_t(e * int64_t(ff) * n + i)] = c.gate_up.ref[u];
        gate_parts[size_t(e * int64_t(ff) * n + i)] = c.gate_up.parts[g];
        up_parts[size_t(e * int64_t(ff) * n + i)] = c.gate_up.parts[u];
      }
  } else {
    c.gate_up = make_tensor(s.type, E, ff, n, seed++);
    c.up = make_tensor(s.type, E, ff, n, seed++);
    c.weights.gate_exps = c.gate_up.view, c.weights.up_exps = c.up.view;
    r.gate = c.gate_up.ref, r.up = c.up.ref;
    gate_parts = c.gate_up.parts, up_parts = c.up.parts;
  }
  c.down = make_tensor(s.down_type, E, n, ff, seed++);
  c.weights.down_exps = c.down.view;
  r.down = c.down.ref;
  if (sff > 0) {
    c.shexp_inp = make_f32(random_floats(size_t(n), seed++), 1, n);
    c.sh_gate = make_tensor(s.sh_type, 1, sff, n, seed++);
    c.sh_up = make_tensor(s.sh_type, 1, sff, n, seed++);
    c.sh_down = make_tensor(s.sh_down_type, 1, n, sff, seed++);
    c.weights.shexp_gate_inp = c.shexp_inp.view;
    c.weights.shexp_gate = c.sh_gate.view, c.weights.shexp_up = c.sh_up.view, c.weights.shexp_down = c.sh_down.view;
    r.shexp_inp = c.shexp_inp.ref, r.sh_gate = c.sh_gate.ref, r.sh_up = c.sh_up.ref, r.sh_down = c.sh_down.ref;
  }
  // The dots the decode kernels compute on 16-bit activations get the integer path's bound: the
  // routed experts (and a shared expert in their format, which the same kernels compute); a shared
  // expert in another format goes through launch::matmul without quantized input (fp32). Above
  // moe_decode_max_tokens the integer formats run on the int8 tensor-core GEMMs (grouped for the
  // routed experts), which read 16-bit activations too; the float formats' split GEMMs are fp32-grade.
  // With every_count, a shared expert in another format is on the dense GEMM at every count.
  if (decode_path(s)) {
    const launch::ffn_shape sh = shape_of(s);
    const launch::detail::moe_decode_paths p = launch::detail::moe_decode_paths_of(c.weights, sh);
    if (p.gate_up_act16) {
      r.gate_parts = gate_parts, r.up_parts = up_parts;
      if (sff > 0 && launch::detail::moe_fused_gate_up(c.weights, sh))
        r.sh_gate_parts = c.sh_gate.parts, r.sh_up_parts = c.sh_up.parts;
    }
    if (p.down_act16) {
      r.down_parts = c.down.parts;
      if (sff > 0 && launch::detail::moe_fused_down(c.weights, sh)) r.sh_down_parts = c.sh_down.parts;
    }
    if (sff > 0 && s.every_count && !launch::detail::moe_fused_gate_up(c.weights, sh) &&
        launch::matmul_gemm_i8_path(c.sh_gate.view, s.n_tokens, true))
      r.sh_gate_parts = c.sh_gate.parts, r.sh_up_parts = c.sh_up.parts;
    if (sff > 0 && s.every_count && !launch::detail::moe_fused_down(c.weights, sh) &&
        launch::matmul_gemm_i8_path(c.sh_down.view, s.n_tokens, true))
      r.sh_down_parts = c.sh_down.parts;
  } else {
    // the grouped path: x for gate/up, the kernel's own act for down
    if (launch::moe_grouped_gemm_i8_path(c.weights.gate_exps)) r.gate_parts = gate_parts, r.up_parts = up_parts;
    if (launch::moe_grouped_gemm_i8_path(c.weights.down_exps)) r.down_parts = c.down.parts;
    // the shared expert through launch::matmul (the dense int8 GEMM for the integer formats)
    if (sff > 0 && launch::matmul_gemm_i8_path(c.sh_gate.view, s.n_tokens))
      r.sh_gate_parts = c.sh_gate.parts, r.sh_up_parts = c.sh_up.parts;
    if (sff > 0 && launch::matmul_gemm_i8_path(c.sh_down.view, s.n_tokens)) r.sh_down_parts = c.sh_down.parts;
  }
  return c;
}

struct moe_run {
  std::vector<float> h;  // [n_tokens][n_embd]
  int error_flag = 0;
};

// Runs launch::moe_ffn on a poisoned workspace and h = h0: tokens [t0, t0 + n) (n < 0: all of them).
inline moe_run run_moe(const moe_case& c, int64_t t0 = 0, int64_t n = -1) {
  const moe_case_spec& s = c.spec;
  if (n < 0) n = s.n_tokens - t0;
  const size_t e = size_t(s.n_embd);
  device_buffer<float> x = to_device(std::vector<float>(c.x.begin() + std::ptrdiff_t(size_t(t0) * e),
                                                        c.x.begin() + std::ptrdiff_t(size_t(t0 + n) * e)));
  device_buffer<float> h = to_device(std::vector<float>(c.h0.begin() + std::ptrdiff_t(size_t(t0) * e),
                                                        c.h0.begin() + std::ptrdiff_t(size_t(t0 + n) * e)));
  device_buffer<int> flag = to_device(std::vector<int>{0});
  launch::ffn_layer_args a;
  a.shape = shape_of(s);
  a.x = x.data(), a.h = h.data(), a.n_tokens = n, a.error_flag = flag.data(), a.gemm_every_count = s.every_count;
  device_buffer<uint8_t> ws = poisoned<uint8_t>(launch::moe_workspace_bytes(a.shape, n, s.every_count));
  a.workspace = ws.data(), a.workspace_bytes = ws.bytes();
  Q35_REQUIRE_OK(launch::moe_ffn(a, c.weights));
  moe_run out;
  out.h = to_host(h);
  out.error_flag = to_host(flag)[0];
  return out;
}

// Which kernel computes a dot decides its accumulation depth: on the decode path the GEMV engine (the
// decode kernels, and launch::matmul for a shared expert in other formats, which with every_count runs
// the dense GEMM instead: its depth for both of the shared expert's products, the larger bound where
// only one of them is unfused); on the grouped path the tensor-core GEMMs (grouped for the routed
// experts, dense for the shared one).
inline ref::moe_ref_depths depths_of(const moe_case_spec& s) {
  // the integer formats on the int8 GEMMs, the float formats on the split-float ones
  const auto gemm = [](std::initializer_list<uint32_t> types) {
    for (const uint32_t t : types)
      if (t == uint32_t(quant::type_id::f32) || t == uint32_t(quant::type_id::f16) ||
          t == uint32_t(quant::type_id::bf16))
        return ref::mma_float_depth;
    return ref::serial_depth;
  };
  if (!decode_path(s)) return {ref::router_depth, gemm({s.type, s.down_type}), gemm({s.sh_type, s.sh_down_type})};
  const bool sh_gemm = s.every_count && s.shared_ff > 0 && (s.sh_type != s.type || s.sh_down_type != s.down_type);
  return {ref::router_depth, ref::engine_depth, sh_gemm ? gemm({s.sh_type, s.sh_down_type}) : ref::engine_depth};
}

// Compares one run with the float64 reference: every output within its derived bound.
inline void check_moe(const moe_case& c, const moe_run& got) {
  const moe_case_spec& s = c.spec;
  const ref::moe_ref_result want = ref::moe_ffn(c.ref_w, c.x.data(), c.h0.data(), s.n_tokens, depths_of(s));
  INFO("E = " << s.n_experts << ", k = " << s.k << ", ff = " << s.expert_ff << ", tokens = " << s.n_tokens);
  // the reference's selection is unambiguous given the kernels' logit error (else the seed is unusable)
  REQUIRE(want.min_margin > 0);
  if (s.forced_experts > 0)
    for (int64_t t = 0; t < s.n_tokens; ++t)
      for (int j = 0; j < s.forced_experts; ++j)
        REQUIRE(want.ids[size_t(t * s.k + j)] == forced_expert(j, s.n_experts));
  CHECK(got.error_flag == 0);
  int bad = 0;
  for (size_t i = 0; i < want.value.size(); ++i) {
    const double err = std::fabs(double(got.h[i]) - want.value[i]);
    if (!(err <= want.tol[i]) && bad++ < 5) {
      INFO("output " << i << ": got " << got.h[i] << ", want " << want.value[i] << " +- " << want.tol[i]);
      CHECK(err <= want.tol[i]);
    }
  }
  CHECK(bad == 0);
}

}  // namespace q35::test
