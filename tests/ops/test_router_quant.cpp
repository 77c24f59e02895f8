// Router weights in the GGUF block formats (Q8_0, Q4_0, Q4_K, Q5_K, Q6_K): logits against float64
// over the reference dequantization (tests/kernels/weights.hpp, ggml's loop order), then
// routing and the shared-expert gate as for float weights.
#include <cmath>
#include <cstring>

#include "kernels/weights.hpp"
#include "q35/quant/formats.hpp"
#include "reference/router_reference.hpp"
#include "router_fixture.hpp"
#include "test_util.hpp"

namespace ops_test_router_quant {

using namespace q35;

// A [rows][n_embd] tensor of Format from tests/kernels/weights.hpp's random bytes, as block structs.
template <class Format>
std::vector<typename Format::block> as_blocks(const std::vector<uint8_t>& bytes) {
  std::vector<typename Format::block> b(bytes.size() / sizeof(typename Format::block));
  std::memcpy(b.data(), bytes.data(), bytes.size());
  return b;
}

template <class Format>
void check_quant_router(int64_t n_tokens, int n_embd, uint64_t seed) {
  using traits = test::router_traits<64, 4>;
  CAPTURE(Format::name);
  CAPTURE(n_tokens);
  CAPTURE(n_embd);
  auto c = test::make_case(n_tokens, n_embd, traits::n_experts, traits::n_experts_used, seed, false, true);
  const auto w_bytes = test::random_weights<Format>(traits::n_experts, n_embd, seed + 10);
  const auto shexp_bytes = test::random_weights<Format>(1, n_embd, seed + 11);
  c.w = test::reference_weights<Format>(w_bytes, int64_t(n_embd) * traits::n_experts);
  c.w_shexp = test::reference_weights<Format>(shexp_bytes, n_embd);
  const auto w = as_blocks<Format>(w_bytes), w_shexp = as_blocks<Format>(shexp_bytes);
  const auto ref = reference::router_logits(c.x, c.w, c.n_tokens, c.n_experts, c.n_embd);
  test::for_each_order([&] {
    const auto o = test::run_router_stored<traits>(c, w, w_shexp);
    for (int64_t t = 0; t < n_tokens; ++t) {
      for (int e = 0; e < c.n_experts; ++e) {
        double abs_sum = 0;
        for (int i = 0; i < n_embd; ++i)
          abs_sum += std::fabs(double(c.w[size_t(e) * n_embd + i]) * c.x[size_t(t * n_embd + i)]);
        // fp32 accumulation, depth <= n_embd / 16 + 32 per lane and butterfly: (depth) u sum|w x|
        const double tol = (n_embd / 16 + 64) * std::ldexp(abs_sum, -24);
        const double got = o.logits[size_t(t) * size_t(c.n_experts + 1) + size_t(e)];
        REQUIRE(std::fabs(got - ref[size_t(t * c.n_experts + e)]) <= tol);
      }
      // route the kernel's own logits with the reference: ids, weights, k_used
    }
    std::vector<double> kernel_logits;
    for (int64_t t = 0; t < n_tokens; ++t) {
      const auto l = test::kernel_logits(c, o, t);
      kernel_logits.insert(kernel_logits.end(), l.begin(), l.end());
    }
    test::check_routing(c, o, kernel_logits);
    test::check_gate(c, o);
  });
}

TEST_CASE_TEMPLATE("router: GGUF block-quantized router weights" * test::needs_device(), F, quant::q8_0_format,
                   quant::q4_0_format, quant::q4_k_format, quant::q5_k_format, quant::q6_k_format) {
  check_quant_router<F>(1, 512, 77);   // decode policy
  check_quant_router<F>(11, 256, 78);  // batch policy, a partial last tile
}

TEST_CASE("router: a quantized n_embd that is not a whole number of blocks is rejected") {
  using traits = test::router_traits<64, 4>;
  launch::router_args<quant::block_q4_k> a;
  a.n_experts = 64, a.n_experts_used = 4, a.n_embd = 128, a.n_tokens = 1;
  const status s = launch::validate<traits, quant::block_q4_k>(a);
  CHECK(s.message().find("n_embd = 128 is not a multiple of the weight format's block of 256") != std::string::npos);
}

}  // namespace ops_test_router_quant
