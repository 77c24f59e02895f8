// Whether a host compiler that contracts a*b + c into an FMA (GCC in gnu++ mode, -march with FMA)
// can change a dequantized value: it cannot, because every product in formats.hpp is exact in fp32.
//
// Significant bits (the span from the highest to the lowest set bit) of each factor:
//   d, dmin    binary16: 11 (fewer when subnormal); range [2^-24, 65504]
//   q4_0       d * (q - 8),        |q - 8| <= 8: 3 bits                 -> 14 bits, no add
//   q8_0       q * d,              int8, |q| <= 128: 7 bits             -> 18 bits, no add
//   q4_K       (d * sc) * q - dmin * m,  sc, m <= 63: 6 bits, q <= 15: 4 -> 21 and 17 bits, one add
//   q5_K       as q4_K with q <= 31: 5 bits                             -> 22 and 17 bits, one add
//   q6_K       (d * sc) * (q - 32), sc int8: 7 bits, |q - 32| <= 32: 5  -> 23 bits, no add
// Every product has at most 23 < 24 significant bits and stays within fp32's normal range
// (65504 * 128 * 32 < 2^28, 2^-24 * 1 > 2^-126), so it is exact; fma(a, b, c) = round(a*b + c) then
// equals round(round(a*b) + c), the two-rounding result ggml computes. Only NaN payloads could
// differ, and the goldens compare NaN with NaN. The cases below check each product exhaustively over
// every mantissa of d at the extreme exponents, and the K-quants' fused forms against the unfused one.
// (The sim still compiles with -ffp-contract=off, see CMakeLists.txt: arch::mul_rn promises it.)
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "q35/arch/half_bits.hpp"
#include "q35/arch/rounded_math.hpp"
#include "test_util.hpp"

namespace quant_test_contraction {

using namespace q35;

// Every finite non-negative binary16 value with a subnormal, the smallest normal, the unit and the
// largest exponent: all 1024 mantissas at each (sign does not change exactness).
std::vector<float> fp16_scales() {
  std::vector<float> v;
  for (uint16_t exp : {0, 1, 15, 30})
    for (uint16_t man = 0; man < 1024; ++man) v.push_back(arch::f16_bits_to_float(uint16_t(exp << 10 | man)));
  return v;
}

// a * b in fp32 equals the exact product (float products are exact in double: 48 <= 53 bits).
bool exact_product(float a, float b) { return double(arch::mul_rn(a, b)) == double(a) * double(b); }

TEST_CASE("quant: every dequantization product is exact in fp32 (so an FMA cannot change it)") {
  const std::vector<float> ds = fp16_scales();
  int64_t inexact = 0;
  for (float d : ds) {
    for (int q = -8; q <= 8; ++q) inexact += !exact_product(d, float(q));      // q4_0
    for (int q = -128; q <= 127; ++q) inexact += !exact_product(float(q), d);  // q8_0
    for (int sc = 0; sc <= 63; ++sc) {                                         // q4_K, q5_K
      const float ds_ = arch::mul_rn(d, float(sc));
      inexact += !exact_product(d, float(sc));
      for (int q = 0; q <= 31; ++q) inexact += !exact_product(ds_, float(q));  // q4_K: q <= 15
    }
    for (int sc = -128; sc <= 127; ++sc) {  // q6_K
      const float ds_ = arch::mul_rn(d, float(sc));
      inexact += !exact_product(d, float(sc));
      for (int q = -32; q <= 31; ++q) inexact += !exact_product(ds_, float(q));
    }
  }
  CHECK(inexact == 0);
}

TEST_CASE("quant: K-quant d*q - m fused either way equals the two-rounding result") {
  const std::vector<float> ds = fp16_scales();
  std::mt19937_64 rng(2024);
  int64_t differ = 0, n = 0;
  for (float d : ds) {
    for (int sc = 0; sc <= 63; sc += 3) {
      const float dmin = ds[rng() % ds.size()];
      const float mn = float(rng() % 64);
      const float m = arch::mul_rn(dmin, mn);
      const float dsc = arch::mul_rn(d, float(sc));
      for (int q = 0; q <= 31; ++q) {
        const float two_roundings = arch::sub_rn(arch::mul_rn(dsc, float(q)), m);
        const float fused_first = std::fma(dsc, float(q), -m);                        // fma(d', q, -m')
        const float fused_second = std::fma(-dmin, mn, arch::mul_rn(dsc, float(q)));  // fma(-dmin, m, d'q)
        differ += std::memcmp(&two_roundings, &fused_first, 4) != 0;
        differ += std::memcmp(&two_roundings, &fused_second, 4) != 0;
        ++n;
      }
    }
  }
  CHECK(n > 1000000);
  CHECK(differ == 0);
}

}  // namespace quant_test_contraction
