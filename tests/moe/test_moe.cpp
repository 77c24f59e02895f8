// launch::moe_ffn against the float64 reference (tests/reference/moe_reference.hpp).
//
// Tolerance: every output's bound is derived in moe_ref::moe_ffn from the fp32 roundings of the
// kernels that compute it: Higham's dot bound (depth + 1) 2^-24 sum|w x| for each dot, with the
// depth of the kernel that sums it (warp-per-row units: 16 ceil(cols / 512) + 6; router: cols / 32
// + 10; a serial GEMM: cols + 1), carried through SwiGLU (|silu'| <= 1.1), the down projection
// (|W_down| times the activations' errors), the routing weights (twice the largest logit error,
// relative, plus the softmax's roundings), the shared gate (|sigmoid'| <= 1/4) and the final
// (k + 2)-term combination and residual add. Weights are dequantized bit-exactly by the reference.
#include <doctest/doctest.h>

#include "moe/moe_case.hpp"

namespace q35 {
namespace {

using quant::type_id;
constexpr uint32_t id(type_id t) { return uint32_t(t); }

void run_and_check(const test::moe_case_spec& s) {
  const test::moe_case c = test::make_moe_case(s);
  test::check_moe(c, test::run_moe(c));
}

}  // namespace

TEST_CASE("moe_ffn: (E, k, width) grid against float64 at 1, 3, 8 and 100 tokens" * test::needs_device()) {
  struct shape {
    int E, k, ff;
  };
  // width 64 is below a K-quant block: Q8_0 experts throughout
  for (const shape sh : {shape{8, 2, 256}, shape{16, 4, 256}, shape{64, 4, 64}}) {
    for (const int64_t n_tokens : {1, 3, 8, 100}) {
      test::moe_case_spec s;
      s.n_experts = sh.E, s.k = sh.k, s.expert_ff = sh.ff, s.shared_ff = sh.ff, s.n_tokens = n_tokens;
      s.seed = uint64_t(sh.E * 1000 + n_tokens);
      CAPTURE(sh.E);
      CAPTURE(n_tokens);
      run_and_check(s);
    }
  }
}

TEST_CASE("moe_ffn: 35B-A3B routing (256 experts, top-8, width 512) in Q4_K / Q6_K" * test::needs_device()) {
  for (const int64_t n_tokens : {1, 3, 8, 100}) {  // decode kernels up to 8, the grouped prefill path at 100
    test::moe_case_spec s;
    s.n_experts = 256, s.k = 8, s.expert_ff = 512, s.shared_ff = 512, s.n_tokens = n_tokens, s.seed = 7 + n_tokens;
    s.type = s.sh_type = id(type_id::q4_k);
    s.down_type = s.sh_down_type = id(type_id::q6_k);
    CAPTURE(n_tokens);
    run_and_check(s);
  }
}

TEST_CASE("moe_ffn: expert weights in every tested format" * test::needs_device()) {
  for (const type_id t : {type_id::q4_k, type_id::q6_k, type_id::q8_0, type_id::q4_0, type_id::f16, type_id::bf16}) {
    test::moe_case_spec s;
    s.n_experts = 16, s.k = 4, s.n_tokens = 3, s.seed = 100 + uint64_t(t);
    s.type = s.down_type = s.sh_type = s.sh_down_type = id(t);
    CAPTURE(uint32_t(t));
    run_and_check(s);
  }
}

TEST_CASE("moe_ffn: the grouped tensor-core GEMMs in every format, ragged expert groups" * test::needs_device()) {
  // 45 tokens x top-4 of 16 experts: ~11 pairs per expert (tiles of 32 mostly partial), and with
  // 70 tokens x top-2 of 4 experts ~35 (a full tile and a ragged one); the integer formats on the
  // int8 GEMM, F16 / BF16 / F32 on the split-float one; the shared expert in another format
  // (one of the two per format, alternating: each kernel family sees both)
  int64_t n_tokens = 45;
  for (const type_id t : {type_id::q4_k, type_id::q5_k, type_id::q6_k, type_id::q8_0, type_id::q4_0, type_id::f16,
                          type_id::bf16, type_id::f32}) {
    n_tokens = n_tokens == 45 ? 70 : 45;
    test::moe_case_spec s;
    s.n_experts = n_tokens == 45 ? 16 : 4, s.k = n_tokens == 45 ? 4 : 2, s.n_tokens = n_tokens;
    s.seed = 700 + uint64_t(t) + uint64_t(n_tokens);
    s.type = s.down_type = id(t);
    s.sh_type = s.sh_down_type = id(t == type_id::q8_0 ? type_id::f16 : type_id::q8_0);
    CAPTURE(uint32_t(t));
    CAPTURE(n_tokens);
    run_and_check(s);
  }
}

TEST_CASE("moe_ffn: the decode kernels' integer path (x and act as 16-bit activations)" * test::needs_device()) {
  // formats whose items tile n_embd = 256 and width 256: gate/up and down both read 16-bit
  // activations (the bound of those dots is the integer path's, ref::fp32_dot_bound)
  for (const type_id t : {type_id::q4_k, type_id::q5_k, type_id::q8_0, type_id::q4_0}) {
    for (const int64_t n_tokens : {1, 8}) {
      test::moe_case_spec s;
      s.n_experts = 16, s.k = 4, s.n_tokens = n_tokens, s.seed = 300 + uint64_t(t) + uint64_t(n_tokens);
      s.type = s.down_type = s.sh_type = s.sh_down_type = id(t);
      CAPTURE(uint32_t(t));
      CAPTURE(n_tokens);
      const test::moe_case c = test::make_moe_case(s);
      const launch::detail::moe_decode_paths p = launch::detail::moe_decode_paths_of(c.weights, test::shape_of(s));
      CHECK(p.gate_up_act16);
      CHECK(p.down_act16);
      test::check_moe(c, test::run_moe(c));
    }
  }
  // Q6_K items are 2048 wide: n_embd 2048 tiles; widths 512 (35B-A3B's down) and 1024 are read as
  // bundles of 4 / 2 rows per item; width 768 (3 blocks) stays on the float path
  for (const int ff : {512, 1024, 768}) {
    for (const int64_t n_tokens : {1, 5}) {
      test::moe_case_spec s;
      s.n_embd = 2048, s.n_experts = 8, s.k = 3, s.expert_ff = ff, s.shared_ff = ff, s.n_tokens = n_tokens;
      s.seed = 333 + uint64_t(ff) + uint64_t(n_tokens);
      s.type = s.down_type = s.sh_type = s.sh_down_type = id(type_id::q6_k);
      CAPTURE(ff);
      CAPTURE(n_tokens);
      const test::moe_case c = test::make_moe_case(s);
      const launch::detail::moe_decode_paths p = launch::detail::moe_decode_paths_of(c.weights, test::shape_of(s));
      CHECK(p.gate_up_act16);
      CHECK(p.down_act16 == (ff != 768));
      test::check_moe(c, test::run_moe(c));
    }
  }
  // the shared expert in another width than the routed ones: no bundles (float path)
  test::moe_case_spec s;
  s.n_embd = 2048, s.n_experts = 8, s.k = 2, s.expert_ff = 512, s.shared_ff = 1024, s.seed = 339;
  s.type = s.down_type = s.sh_type = s.sh_down_type = id(type_id::q6_k);
  const test::moe_case c = test::make_moe_case(s);
  CHECK(!launch::detail::moe_decode_paths_of(c.weights, test::shape_of(s)).down_act16);
  test::check_moe(c, test::run_moe(c));
}

TEST_CASE("moe_ffn: every thread order gives the same result within the bound" * test::needs_device()) {
  test::moe_case_spec s;
  s.n_experts = 8, s.k = 2, s.n_tokens = 3, s.seed = 42;
  const test::moe_case c = test::make_moe_case(s);
  std::vector<float> first;
  test::for_each_order([&] {
    const test::moe_run r = test::run_moe(c);
    test::check_moe(c, r);
    // fixed summation order: bit-identical across orders
    if (first.empty()) first = r.h;
    CHECK(std::memcmp(first.data(), r.h.data(), first.size() * 4) == 0);
  });
}

TEST_CASE("moe_ffn: merged ffn_gate_up_exps" * test::needs_device()) {
  for (const int64_t n_tokens : {1, 8, 40}) {
    test::moe_case_spec s;
    s.n_experts = 16, s.k = 4, s.n_tokens = n_tokens, s.merged_gate_up = true, s.seed = 300 + n_tokens;
    s.type = s.sh_type = id(type_id::q4_k);
    s.down_type = s.sh_down_type = id(type_id::q6_k);
    CAPTURE(n_tokens);
    run_and_check(s);
  }
}

TEST_CASE("moe_ffn: all tokens on the same experts" * test::needs_device()) {
  for (const int64_t n_tokens : {3, 100}) {
    test::moe_case_spec s;
    s.n_experts = 8, s.k = 2, s.n_tokens = n_tokens, s.forced_experts = 2, s.seed = 500 + n_tokens;
    CAPTURE(n_tokens);
    run_and_check(s);
  }
}

TEST_CASE("moe_ffn: a shared expert in other formats than the routed experts" * test::needs_device()) {
  for (const int64_t n_tokens : {1, 8, 100}) {
    test::moe_case_spec s;
    s.n_experts = 16, s.k = 4, s.n_tokens = n_tokens, s.seed = 600 + n_tokens;
    s.type = id(type_id::q4_k), s.down_type = id(type_id::q6_k);
    s.sh_type = id(type_id::q8_0), s.sh_down_type = id(type_id::q4_0);
    CAPTURE(n_tokens);
    run_and_check(s);
  }
}

TEST_CASE("moe_ffn: no shared expert; shared width unlike the experts'" * test::needs_device()) {
  test::moe_case_spec s;
  s.n_experts = 16, s.k = 4, s.n_tokens = 3, s.shared_ff = 0, s.seed = 700;
  run_and_check(s);
  s.shared_ff = 512, s.expert_ff = 128, s.seed = 701;
  run_and_check(s);
}

TEST_CASE("moe_ffn: zero tokens launch nothing" * test::needs_device()) {
  test::moe_case_spec s;
  s.n_tokens = 0;
  const test::moe_case c = test::make_moe_case(s);
  launch::ffn_layer_args a;
  a.shape = test::shape_of(s);
  Q35_REQUIRE_OK(launch::moe_ffn(a, c.weights));
}

TEST_CASE("moe_ffn: validation names the bad value" * test::needs_device()) {
  test::moe_case_spec s;
  const test::moe_case c = test::make_moe_case(s);
  device_buffer<float> x = test::to_device(c.x), h = test::to_device(c.h0);
  device_buffer<int> flag = test::to_device(std::vector<int>{0});
  launch::ffn_layer_args good;
  good.shape = test::shape_of(s);
  good.x = x.data(), good.h = h.data(), good.n_tokens = 1, good.error_flag = flag.data();
  device_buffer<uint8_t> ws;
  Q35_REQUIRE_OK(ws.allocate(launch::moe_workspace_bytes(good.shape, 1)));
  good.workspace = ws.data(), good.workspace_bytes = ws.bytes();
  REQUIRE(launch::validate_moe(good, c.weights).ok());
  auto expect = [&](launch::ffn_layer_args a, const launch::moe_weights& w, const std::string& needle) {
    const status st = launch::validate_moe(a, w);
    INFO(st.to_string());
    CHECK(!st.ok());
    CHECK(st.to_string().find(needle) != std::string::npos);
  };
  launch::ffn_layer_args a = good;
  a.shape.n_experts = 513;
  expect(a, c.weights, "n_experts = 513");
  a = good, a.shape.n_experts_used = 17;
  expect(a, c.weights, "n_experts_used = 17");
  a = good, a.shape.expert_ff_dim = 200;
  expect(a, c.weights, "expert_ff_dim = 200");
  a = good, a.workspace_bytes -= 1;
  expect(a, c.weights, "needed");
  a = good, a.error_flag = nullptr;
  expect(a, c.weights, "error_flag");
  a = good, a.n_tokens = -1;
  expect(a, c.weights, "n_tokens = -1");
  launch::moe_weights w = c.weights;
  w.down_exps.rows = 128;
  expect(good, w, "down_exps is 8 x 128 x 256");
  w = c.weights, w.up_exps.type = uint32_t(type_id::q4_0);
  expect(good, w, "up_exps differs");
  w = c.weights, w.shexp_gate = {};
  expect(good, w, "shexp_gate is missing");
  w = c.weights, w.router.type = 99;
  expect(good, w, "ggml type");
}

}  // namespace q35
