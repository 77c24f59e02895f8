// launch::embedding against the independent host dequantization (bit for bit): every format,
// repeated and boundary ids, and an out-of-range id (NaN row and the error flag).
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "kernels/weights.hpp"
#include "q35/launch/norm.hpp"
#include "test_util.hpp"

namespace {

using namespace q35;

template <class F>
void check_embedding(int64_t n_vocab, int64_t n_embd) {
  CAPTURE(F::name);
  const auto bytes = test::random_weights<F>(n_vocab, n_embd, 7);
  const auto ref = test::reference_weights<F>(bytes, n_vocab * n_embd);
  auto table = test::to_device(bytes);
  const std::vector<int32_t> ids = {0, int32_t(n_vocab - 1), 3, 3, 1};
  auto dids = test::to_device(ids);
  auto flag = test::to_device(std::vector<int>{0});
  auto out = test::poisoned<float>(ids.size() * size_t(n_embd));
  launch::embedding_args a;
  a.table = {table.data(), uint32_t(F::id), n_embd, n_vocab};
  a.ids = dids.data(), a.out = out.data(), a.n_tokens = int64_t(ids.size()), a.maybe_error_flag = flag.data();
  Q35_REQUIRE_OK(launch::embedding(a));
  const auto y = test::to_host(out);
  CHECK(test::to_host(flag)[0] == 0);
  int64_t bad = 0;
  for (size_t t = 0; t < ids.size(); ++t)
    bad += std::memcmp(&y[t * size_t(n_embd)], &ref[size_t(ids[t]) * size_t(n_embd)], size_t(n_embd) * 4) != 0;
  CHECK(bad == 0);
}

#define Q35_ALL_FORMATS                                                                             \
  quant::f32_format, quant::f16_format, quant::bf16_format, quant::q8_0_format, quant::q4_0_format, \
      quant::q4_k_format, quant::q5_k_format, quant::q6_k_format

TEST_CASE_TEMPLATE("embedding: rows equal the reference dequantization bit for bit" * test::needs_device(), F,
                   Q35_ALL_FORMATS) {
  check_embedding<F>(9, 512);
}

TEST_CASE("embedding: an id outside the vocabulary gives a NaN row and sets the flag" * test::needs_device()) {
  using F = quant::q8_0_format;
  auto table = test::to_device(test::random_weights<F>(4, 64, 3));
  auto dids = test::to_device(std::vector<int32_t>{1, 4, -1});
  auto flag = test::to_device(std::vector<int>{0});
  auto out = test::poisoned<float>(3 * 64);
  launch::embedding_args a;
  a.table = {table.data(), uint32_t(F::id), 64, 4};
  a.ids = dids.data(), a.out = out.data(), a.n_tokens = 3, a.maybe_error_flag = flag.data();
  Q35_REQUIRE_OK(launch::embedding(a));
  const auto y = test::to_host(out);
  CHECK(test::to_host(flag)[0] == 1);
  for (int i = 0; i < 64; ++i) {
    CHECK(std::isfinite(y[size_t(i)]));
    CHECK(std::isnan(y[size_t(64 + i)]));
    CHECK(std::isnan(y[size_t(128 + i)]));
  }
}

TEST_CASE("embedding: bad arguments are named") {
  launch::embedding_args a;
  a.n_tokens = 1;
  CHECK(launch::embedding(a).message().find("null table") != std::string::npos);
  int32_t id = 0;
  float out[16];
  uint8_t table[64];
  a.table = {table, 0, 8, 2}, a.ids = &id, a.out = out;
  CHECK(launch::embedding(a).message().find("multiple of 16") != std::string::npos);
  a.table = {table, 99, 16, 1};
  CHECK(launch::embedding(a).code() == status_code::unsupported);
}

}  // namespace
