// The dequant kernel's grid-stride loop: with more units than one grid covers, every thread converts
// several units. The real kernel caps its grid at max_blocks (16384 blocks of 256 threads, i.e.
// tensors over 2^26 elements); a variant with a 3-block grid runs the same body on a small tensor.
#include <cstdint>
#include <vector>

#include "golden.hpp"
#include "q35/kernels/dequant.hpp"
#include "q35/launch/launch.hpp"
#include "reference/quant_reference.hpp"
#include "test_util.hpp"

namespace quant_test_dequant_grid {

using namespace q35;

// dequant_kernel with its grid capped at 3 blocks instead of max_blocks.
template <class Format, class Out>
struct small_grid_dequant : kernels::dequant_kernel<Format, Out> {
  static constexpr int64_t grid_blocks = 3;
  static dim3 grid(const typename kernels::dequant_kernel<Format, Out>::params&) { return dim3(grid_blocks); }
};

TEST_CASE("quant: dequant_kernel caps its grid at max_blocks for large tensors") {
  using k = kernels::dequant_kernel<quant::q8_0_format, float>;
  const int64_t one_grid_elems = k::max_blocks * k::threads * quant::unit_elems;  // 2^26
  CHECK(k::grid({nullptr, nullptr, one_grid_elems}).x == unsigned(k::max_blocks));
  CHECK(k::grid({nullptr, nullptr, one_grid_elems + 32}).x == unsigned(k::max_blocks));
  CHECK(k::grid({nullptr, nullptr, int64_t(1) << 40}).x == unsigned(k::max_blocks));
  CHECK(k::grid({nullptr, nullptr, one_grid_elems - k::threads * quant::unit_elems}).x == unsigned(k::max_blocks - 1));
}

// Units = 2.5 grids of 3 x 256 threads plus a few: threads own 2 or 3 units, some only 2.
template <class Format>
void check_grid_stride(int64_t n_blocks) {
  using kernel = small_grid_dequant<Format, float>;
  const int64_t n = n_blocks * Format::block_elems;
  const int64_t n_units = n / quant::unit_elems;
  REQUIRE(n_units > 2 * kernel::grid_blocks * kernel::threads);
  std::mt19937_64 rng(uint64_t(Format::id) * 31 + 5);
  std::vector<uint8_t> bytes(size_t(Format::row_bytes(n)));
  for (auto& b : bytes) b = uint8_t(rng());
  // keep the fp16 scales finite, so the comparison is on values rather than NaN patterns
  if constexpr (Format::block_elems > 1) {
    for (int64_t b = 0; b < n_blocks; ++b) {
      bytes[size_t(b * Format::block_bytes + 1)] &= 0x3b;  // d: exponent field <= 14
      if constexpr (Format::id == quant::type_id::q4_k) bytes[size_t(b * Format::block_bytes + 3)] &= 0x3b;  // dmin
    }
  }
  const std::vector<float> want = ref::dequantize(uint32_t(Format::id), bytes.data(), n);
  auto src = test::to_device(bytes);
  auto dst = test::poisoned<float>(size_t(n));
  test::for_each_order([&] {
    Q35_REQUIRE_OK(fill_bytes(dst.data(), 0xff, dst.bytes()));
    Q35_REQUIRE_OK(
        launch::launch<kernel>({reinterpret_cast<const typename Format::block*>(src.data()), dst.data(), n}));
    const std::vector<float> got = test::to_host(dst);
    int64_t bad = 0;
    for (int64_t i = 0; i < n; ++i) bad += !test::same_bits_or_both_nan(got[size_t(i)], want[size_t(i)]);
    CHECK(bad == 0);
  });
}

TEST_CASE("quant: dequant grid-stride loop covers every unit exactly (q8_0, q4_K, f16)" * test::needs_device()) {
  check_grid_stride<quant::q8_0_format>(3 * 256 * 5 / 4 + 7);               // 2 units per block: 2.5 grids + 14 units
  check_grid_stride<quant::q4_k_format>(3 * 256 * 5 / 32 + 1);              // 16 units per block
  check_grid_stride<quant::f16_format>(3 * 256 * 16 * 5 / 2 + 16 * 3 + 5);  // plus a 5-element tail
}

}  // namespace quant_test_dequant_grid
