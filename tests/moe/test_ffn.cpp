// launch::dense_ffn (h += W_down (silu(W_gate x) * (W_up x)) through launch::matmul) against the
// float64 reference (ref::dense_ffn).
//
// Tolerance: per output, Higham's dot bound with the GEMV engine's depth (ref::engine_depth) up to 8
// tokens or the GEMM's serial cols + 1 above, carried through SwiGLU and the down projection
// (ref::detail::swiglu_expert), plus the residual add's rounding; where the GEMV reads 16-bit
// activations (launch::matmul_int_path: the quantized formats up to 8 tokens) and where the int8
// tensor-core GEMM does (launch::matmul_gemm_i8_path: the quantized formats above), the integer
// path's bound (ref::fp32_dot_bound: activation rounding and the weights' parts) for both projections.
#include <doctest/doctest.h>

#include "moe/moe_case.hpp"

namespace q35 {
namespace {

void check_dense(uint32_t type, int n_embd, int ff, int64_t n_tokens, uint64_t seed) {
  CAPTURE(type);
  CAPTURE(n_tokens);
  const test::moe_tensor gate = test::make_tensor(type, 1, ff, n_embd, seed);
  const test::moe_tensor up = test::make_tensor(type, 1, ff, n_embd, seed + 1);
  const test::moe_tensor down = test::make_tensor(type, 1, n_embd, ff, seed + 2);
  const std::vector<float> x = test::random_floats(size_t(n_tokens) * n_embd, seed + 3);
  const std::vector<float> h0 = test::random_floats(size_t(n_tokens) * n_embd, seed + 4);
  device_buffer<float> d_x = test::to_device(x), d_h = test::to_device(h0);
  launch::ffn_layer_args a;
  a.shape.n_embd = n_embd, a.shape.ff_dim = ff;
  a.x = d_x.data(), a.h = d_h.data(), a.n_tokens = n_tokens;
  device_buffer<uint8_t> ws = test::poisoned<uint8_t>(launch::dense_ffn_workspace_bytes(a.shape, n_tokens));
  a.workspace = ws.data(), a.workspace_bytes = ws.bytes();
  Q35_REQUIRE_OK(launch::dense_ffn(a, {gate.view, up.view, down.view}));
  const std::vector<float> got = test::to_host(d_h);
  std::vector<double> want, tol;
  ref::expert_act16 q;
  auto act16 = [&](const quant::weight_view& w) {
    return launch::matmul_int_path(w, n_tokens) || launch::matmul_gemm_i8_path(w, n_tokens);
  };
  if (act16(gate.view)) q.gate_parts = gate.parts.data(), q.up_parts = up.parts.data();
  if (act16(down.view)) q.down_parts = down.parts.data();
  ref::dense_ffn(gate.ref, up.ref, down.ref, n_embd, ff, x.data(), h0.data(), n_tokens,
                 n_tokens <= launch::gemv_max_tokens ? ref::engine_depth
                 : q.gate_parts                      ? ref::serial_depth
                                                     : ref::mma_float_depth,
                 want, tol, q);
  int bad = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double err = std::fabs(double(got[i]) - want[i]);
    if (!(err <= tol[i]) && bad++ < 5) {
      INFO("output " << i << ": got " << got[i] << ", want " << want[i] << " +- " << tol[i]);
      CHECK(err <= tol[i]);
    }
  }
  CHECK(bad == 0);
}

}  // namespace

TEST_CASE("dense_ffn: Q4_K and Q8_0 weights at 1, 3, 8 and 40 tokens against float64" * test::needs_device()) {
  for (const auto t : {quant::type_id::q4_k, quant::type_id::q8_0})
    for (const int64_t n : {1, 3, 8, 40}) check_dense(uint32_t(t), 256, 512, n, 900 + uint64_t(n));
}

TEST_CASE("dense_ffn: validation names the bad value" * test::needs_device()) {
  const test::moe_tensor gate = test::make_tensor(uint32_t(quant::type_id::q8_0), 1, 64, 32, 1);
  launch::ffn_layer_args a;
  a.shape.n_embd = 32, a.shape.ff_dim = 64, a.n_tokens = 1;
  const launch::dense_ffn_weights w{gate.view, gate.view, gate.view};
  const status s = launch::dense_ffn(a, w);
  INFO(s.to_string());
  CHECK(s.to_string().find("down is 1 x 64 x 32, expected 1 x 32 x 64") != std::string::npos);
  a.n_tokens = 0;
  launch::dense_ffn_weights ok{gate.view, gate.view,
                               test::make_tensor(uint32_t(quant::type_id::q8_0), 1, 32, 64, 2).view};
  Q35_REQUIRE_OK(launch::dense_ffn(a, ok));  // zero tokens: nothing to do
}

}  // namespace q35
