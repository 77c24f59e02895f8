// launch::moe_ffn with ffn_layer_args::gemm_every_count: the router keeps its decode policy and the
// decode kernels serve calls of up to 64 tokens (each (token, expert) pair and each token's down sum
// computed on its own), and a shared expert in other formats than the routed ones runs on the dense GEMM
// at every count, so a token's row is the same bits in every call of 1..64 tokens. At n_embd 1024 the
// router's batch policy (past 8 tokens) and the GEMV (a shared expert at 1..8) would each change bits. The 64-token
// call is checked against float64 (bounds as in test_moe.cpp, with the GEMM's depth for such a shared expert), and
// every shorter call against it.
#include <doctest/doctest.h>

#include <cstring>
#include <vector>

#include "moe/moe_case.hpp"

namespace q35 {
namespace {

using quant::type_id;
constexpr uint32_t id(type_id t) { return uint32_t(t); }

void check_every_count(test::moe_case_spec s) {
  s.n_tokens = launch::moe_decode_max_tokens_every_count, s.every_count = true;
  REQUIRE(test::decode_path(s));
  const test::moe_case c = test::make_moe_case(s);
  const test::moe_run all = test::run_moe(c);
  test::check_moe(c, all);
  const size_t e = size_t(s.n_embd);
  // the last n tokens alone: the first 8 would differ in their last bits from the grouped path's rows
  for (const int64_t n : {1, 2, 5, 8, 9, 17, 33, 63}) {
    CAPTURE(n);
    const int64_t t0 = s.n_tokens - n;
    const test::moe_run part = test::run_moe(c, t0, n);
    CHECK(part.error_flag == 0);
    const std::vector<float> want(all.h.begin() + std::ptrdiff_t(size_t(t0) * e), all.h.end());
    REQUIRE(part.h.size() == want.size());
    CHECK(std::memcmp(part.h.data(), want.data(), want.size() * sizeof(float)) == 0);
  }
}

}  // namespace

TEST_CASE("moe_ffn: gemm_every_count gives a token's row the same bits in every call of 1..64 tokens" *
          test::needs_device()) {
  test::moe_case_spec s;
  s.n_experts = 16, s.k = 4;
  SUBCASE("shared expert in the routed experts' formats (computed by the decode kernels)") {
    s.type = s.down_type = s.sh_type = s.sh_down_type = id(type_id::q4_k), s.seed = 801;
    check_every_count(s);
  }
  SUBCASE("shared expert in other integer formats (the int8 GEMM)") {
    s.type = id(type_id::q4_k), s.down_type = id(type_id::q6_k);
    s.sh_type = id(type_id::q8_0), s.sh_down_type = id(type_id::q4_0), s.seed = 802;
    s.n_embd = 1024, s.shared_ff = 512;  // long enough rows for the GEMV's and the GEMM's orders to differ
    check_every_count(s);
  }
  SUBCASE("shared expert in float formats (the split-float GEMM)") {
    s.type = s.down_type = id(type_id::q8_0);
    s.sh_type = id(type_id::f16), s.sh_down_type = id(type_id::bf16), s.seed = 803;
    check_every_count(s);
  }
  SUBCASE("no shared expert, top-1 of 64 experts") {
    s.n_experts = 64, s.k = 1, s.shared_ff = 0, s.seed = 804;
    check_every_count(s);
  }
}

// Past 64 tokens the flag leaves the grouped path as it is; a workspace sized for 64 tokens with the
// flag serves calls with and without it.
TEST_CASE("moe_ffn: gemm_every_count past 64 tokens, and the workspace it sizes" * test::needs_device()) {
  test::moe_case_spec s;
  s.n_experts = 16, s.k = 4, s.n_tokens = 100, s.every_count = true, s.seed = 810;
  s.type = id(type_id::q4_k), s.sh_type = id(type_id::q8_0);
  REQUIRE(!test::decode_path(s));
  const test::moe_case c = test::make_moe_case(s);
  test::check_moe(c, test::run_moe(c));

  launch::ffn_layer_args a;
  a.shape = test::shape_of(s);
  const size_t bytes = launch::moe_workspace_bytes(a.shape, 64, true);
  a.workspace = reinterpret_cast<void*>(256), a.workspace_bytes = bytes;
  a.x = reinterpret_cast<const float*>(256), a.h = reinterpret_cast<float*>(256);
  a.error_flag = reinterpret_cast<int*>(256);
  for (const int64_t n : {1, 8, 9, 20, 64})
    for (const bool every : {false, true}) {
      CAPTURE(n);
      CAPTURE(every);
      a.n_tokens = n, a.gemm_every_count = every;
      CHECK(launch::validate_moe(a, c.weights).ok());
    }
  // and no more: 65 tokens (the grouped path) need more
  a.n_tokens = 65, a.gemm_every_count = false;
  CHECK(!launch::validate_moe(a, c.weights).ok());
}

}  // namespace q35
