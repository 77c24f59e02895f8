// Formats and the dequantization kernel: block traits, and bit-exact agreement with ggml's reference
// dequantization (gguf-py goldens) for every supported type, to f32, f16 and bf16.
#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "golden.hpp"
#include "q35/launch/dequant.hpp"
#include "q35/quant/format_list.hpp"
#include "reference/quant_reference.hpp"
#include "test_util.hpp"

namespace {

using namespace q35;

TEST_CASE("quant: block traits match ggml's type table") {
  CHECK(quant::f32_format::block_bytes == 4);
  CHECK(quant::f16_format::block_bytes == 2);
  CHECK(quant::bf16_format::block_bytes == 2);
  CHECK((quant::q8_0_format::block_elems == 32 && quant::q8_0_format::block_bytes == 34));
  CHECK((quant::q4_0_format::block_elems == 32 && quant::q4_0_format::block_bytes == 18));
  CHECK((quant::q4_k_format::block_elems == 256 && quant::q4_k_format::block_bytes == 144));
  CHECK((quant::q5_k_format::block_elems == 256 && quant::q5_k_format::block_bytes == 176));
  CHECK((quant::q6_k_format::block_elems == 256 && quant::q6_k_format::block_bytes == 210));
  CHECK(uint32_t(quant::q4_k_format::id) == 12);
  CHECK(uint32_t(quant::q6_k_format::id) == 14);
  CHECK(uint32_t(quant::bf16_format::id) == 30);
  CHECK(quant::q6_k_format::row_bytes(4096) == 16 * 210);
  CHECK(quant::q4_k_format::units_per_block == 16);
  CHECK(quant::f16_format::blocks_per_unit == 16);
}

TEST_CASE("quant: with_format maps ids to formats and names unsupported ids") {
  std::string seen;
  CHECK(quant::with_format(13, [&](auto t) { seen = decltype(t)::type::name; }).ok());
  CHECK(seen == "q5_K");
  const status s = quant::with_format(3, [&](auto) {});  // q4_1: not supported
  CHECK(s.code() == status_code::unsupported);
  CHECK(s.message().find("ggml type 3") != std::string::npos);
}

TEST_CASE("quant: the one format list derives ids, names and format_of") {
  static_assert(quant::supported_formats::size == 8);
  static_assert(std::is_same_v<quant::format_of<quant::type_id::q5_k>::type, quant::q5_k_format>);
  static_assert(std::is_same_v<quant::format_of<quant::type_id::bf16>::type, quant::bf16_format>);
  CHECK(quant::supported_format_names == "f32, f16, bf16, q8_0, q4_0, q4_K, q5_K, q6_K");
  for (uint32_t id = 0; id < 64; ++id) {
    const bool listed = id == 0 || id == 1 || id == 30 || id == 8 || id == 2 || id == 12 || id == 13 || id == 14;
    CHECK(quant::is_supported(id) == listed);
    CHECK(quant::with_format(id, [](auto) {}).ok() == listed);
  }
  const status s = quant::with_format(3, [](auto) {});
  CHECK(s.message() == "ggml type 3 is not supported (f32, f16, bf16, q8_0, q4_0, q4_K, q5_K, q6_K)");
}

// The K-quant 6-bit scale/min packing, bit by bit: each of the 96 bits of the 12 packed bytes lands
// in exactly the scale or min ggml's get_scale_min_k4 puts it in.
TEST_CASE("quant: unpack_scale_min_k4 places every packed bit") {
  for (int bit = 0; bit < 96; ++bit) {
    uint8_t s[12] = {};
    s[bit / 8] = uint8_t(1u << (bit % 8));
    for (int j = 0; j < 8; ++j) {
      uint8_t rd, rm;
      ref::get_scale_min_k4(j, s, &rd, &rm);
      const quant::scale_min got = quant::unpack_scale_min_k4(j, s);
      CHECK(got.sc == rd);
      CHECK(got.m == rm);
    }
  }
  uint8_t ones[12];
  std::memset(ones, 0xff, 12);
  for (int j = 0; j < 8; ++j) {
    CHECK(quant::unpack_scale_min_k4(j, ones).sc == 63);
    CHECK(quant::unpack_scale_min_k4(j, ones).m == 63);
  }
}

template <class Format>
void check_reference_against_golden() {
  const test::quant_golden g = test::load_quant_golden(Format::name);
  REQUIRE(!g.values.empty());
  REQUIRE(g.blocks.size() == size_t(Format::row_bytes(int64_t(g.values.size()))));
  const std::vector<float> r = ref::dequantize(uint32_t(Format::id), g.blocks.data(), int64_t(g.values.size()));
  int64_t bad = 0;
  for (size_t i = 0; i < r.size(); ++i) bad += !test::same_bits_or_both_nan(r[i], g.values[i]);
  CHECK(bad == 0);
}

TEST_CASE_TEMPLATE("quant: the host reference dequantization matches the gguf-py goldens", F, quant::f32_format,
                   quant::f16_format, quant::bf16_format, quant::q8_0_format, quant::q4_0_format, quant::q4_k_format,
                   quant::q5_k_format, quant::q6_k_format) {
  check_reference_against_golden<F>();
}

template <class Format, class Out>
void check_kernel_against_golden() {
  const test::quant_golden g = test::load_quant_golden(Format::name);
  const int64_t n = int64_t(g.values.size());
  REQUIRE(n > 0);
  auto src = test::to_device(g.blocks);
  auto dst = test::poisoned<Out>(size_t(n));
  test::for_each_order([&] {
    Q35_REQUIRE_OK(fill_bytes(dst.data(), 0xff, dst.bytes()));  // re-poison per order
    Q35_REQUIRE_OK(launch::dequant(uint32_t(Format::id), src.data(), n, dst.data()));
    const std::vector<Out> h = test::to_host(dst);
    int64_t bad = 0, first_bad = -1;
    for (int64_t i = 0; i < n; ++i) {
      // f16/bf16 outputs: the golden f32 value rounded to nearest even.
      const float want = to_float(from_float<Out>(g.values[size_t(i)]));
      if (!test::same_bits_or_both_nan(to_float(h[size_t(i)]), want)) {
        if (first_bad < 0) first_bad = i;
        ++bad;
      }
    }
    CAPTURE(first_bad);
    CHECK(bad == 0);
  });
}

TEST_CASE_TEMPLATE("quant: dequant kernel is bit-exact with gguf-py, f32 output" * test::needs_device(), F,
                   quant::f32_format, quant::f16_format, quant::bf16_format, quant::q8_0_format, quant::q4_0_format,
                   quant::q4_k_format, quant::q5_k_format, quant::q6_k_format) {
  check_kernel_against_golden<F, float>();
}

TEST_CASE_TEMPLATE("quant: dequant kernel to f16 and bf16 rounds the exact values" * test::needs_device(), F,
                   quant::f16_format, quant::q8_0_format, quant::q4_k_format, quant::q6_k_format) {
  check_kernel_against_golden<F, half>();
  check_kernel_against_golden<F, bf16>();
}

TEST_CASE("quant: dequant validation names the problem" * test::needs_device()) {
  auto src = test::to_device(std::vector<uint8_t>(1024, 0));
  auto dst = test::poisoned<float>(512);
  const status s = launch::dequant(12, src.data(), 300, dst.data());  // q4_K: 300 is not a multiple of 256
  CHECK(s.code() == status_code::invalid_argument);
  CHECK(s.message().find("not a multiple of the block size 256") != std::string::npos);
  const status null_src = launch::dequant<quant::q8_0_format, float>(nullptr, 64, dst.data());
  CHECK(null_src.message().find("null pointer") != std::string::npos);
  const status odd = launch::dequant(1, src.data() + 1, 16, dst.data());  // f16 at an odd address
  CHECK(odd.message().find("not aligned") != std::string::npos);
  const status q4_1 = launch::dequant(3, src.data(), 32, dst.data());
  CHECK(q4_1.code() == status_code::unsupported);
  Q35_REQUIRE_OK(launch::dequant(12, src.data(), 0, dst.data()));  // empty tensor: nothing to do
}

}  // namespace
