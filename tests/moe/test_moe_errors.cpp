// Device-side expert-id guard of moe_ffn's kernels: an id outside [0, n_experts) (which the
// router never writes; a corrupt workspace) sets *error_flag and turns that token's outputs into
// NaN on the decode and the prefill path, leaving the other tokens' outputs correct.
#include <doctest/doctest.h>

#include "moe/moe_case.hpp"

namespace q35 {

TEST_CASE("moe_ffn: a corrupt expert id sets the error flag and poisons only its token" * test::needs_device()) {
  for (const int64_t n_tokens : {3, 12}) {  // the decode and the grouped path
    CAPTURE(n_tokens);
    test::moe_case_spec s;
    s.n_experts = 8, s.k = 2, s.n_tokens = n_tokens, s.seed = 800 + uint64_t(n_tokens);
    const test::moe_case c = test::make_moe_case(s);
    device_buffer<float> x = test::to_device(c.x), h = test::to_device(c.h0);
    device_buffer<int> flag = test::to_device(std::vector<int>{0});
    launch::ffn_layer_args a;
    a.shape = test::shape_of(s);
    a.x = x.data(), a.h = h.data(), a.n_tokens = n_tokens, a.error_flag = flag.data();
    device_buffer<uint8_t> ws = test::poisoned<uint8_t>(launch::moe_workspace_bytes(a.shape, n_tokens));
    a.workspace = ws.data(), a.workspace_bytes = ws.bytes();
    // route, then overwrite token 1's second id with 8 (= n_experts) and run the expert stages
    Q35_REQUIRE_OK(launch::detail::moe_route(a, c.weights, nullptr));
    const launch::detail::moe_buffers b = launch::detail::moe_buffers_of(a);
    const int32_t corrupt = 8;
    Q35_REQUIRE_OK(copy(b.ids + 1 * s.k + 1, &corrupt, 4, copy_kind::host_to_device));
    if (n_tokens > launch::moe_decode_max_tokens) {
      Q35_REQUIRE_OK(launch::detail::moe_grouped(a, c.weights, b.l, nullptr));
    } else {
      Q35_REQUIRE_OK(launch::detail::moe_decode_gate_up(a, c.weights, nullptr));
      Q35_REQUIRE_OK(launch::detail::moe_decode_down(a, c.weights, nullptr));
    }
    const test::moe_run got{test::to_host(h), test::to_host(flag)[0]};
    CHECK(got.error_flag == 1);
    const ref::moe_ref_result want = ref::moe_ffn(c.ref_w, c.x.data(), c.h0.data(), n_tokens, test::depths_of(s));
    for (int64_t t = 0; t < n_tokens; ++t)
      for (int i = 0; i < s.n_embd; ++i) {
        const size_t o = size_t(t * s.n_embd + i);
        if (t == 1) {
          REQUIRE(std::isnan(got.h[o]));
        } else {
          REQUIRE(std::fabs(double(got.h[o]) - want.value[o]) <= want.tol[o]);
        }
      }
  }
}

}  // namespace q35
