// core/numeric.hpp: half and bf16 conversions against an independent float64 rounding model.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>

#include "q35/core/numeric.hpp"
#include "test_util.hpp"

namespace core_test_numeric {

using namespace q35;

// binary16 value of bits h, computed in double from the definition.
double half_value(uint16_t h) {
  const int s = h >> 15, e = (h >> 10) & 31, m = h & 1023;
  double v;
  if (e == 31) return m ? std::nan("") : (s ? -INFINITY : INFINITY);
  if (e == 0)
    v = std::ldexp(m, -24);
  else
    v = std::ldexp(1024 + m, e - 25);
  return s ? -v : v;
}

// Nearest-even binary16 bits for f, by searching the neighbours of a truncated candidate.
uint16_t half_reference(float f) {
  if (std::isnan(f)) return 0x7e00;
  const uint16_t sign = std::signbit(f) ? 0x8000 : 0;
  const double a = std::fabs(double(f));
  if (a >= 65520.0) return sign | 0x7c00;
  uint16_t best = 0;
  double best_err = INFINITY;
  for (uint32_t h = 0; h < 0x7c00; ++h) {  // exhaustive over the finite non-negative halves
    const double err = std::fabs(half_value(uint16_t(h)) - a);
    if (err < best_err || (err == best_err && (h & 1) == 0)) best = uint16_t(h), best_err = err;
  }
  return sign | best;
}

TEST_CASE("numeric: every half converts to the exact float") {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float f = half_bits_to_float(uint16_t(h));
    const double ref = half_value(uint16_t(h));
    if (std::isnan(ref)) {
      REQUIRE(std::isnan(f));
    } else {
      REQUIRE(double(f) == ref);
      REQUIRE(std::signbit(f) == bool(h & 0x8000));
    }
  }
}

TEST_CASE("numeric: float to half rounds to nearest even, overflows to inf, keeps NaN") {
  std::vector<float> xs = {
      0.0f,           -0.0f,          1.0f,          65504.0f,       65519.99f,
      65520.0f,       1e9f,           -1e9f,         6.1035156e-05f, 5.9604645e-08f,
      2.9802322e-08f, 2.9802326e-08f, 8.940697e-08f, 1e-30f,         std::numeric_limits<float>::infinity(),
      std::nanf("")};
  // exact halfway cases between consecutive halves, normal and subnormal
  for (uint16_t h :
       {uint16_t(0x3c00), uint16_t(0x3c01), uint16_t(0x0001), uint16_t(0x0002), uint16_t(0x03ff), uint16_t(0x7bfe)})
    xs.push_back(float((half_value(h) + half_value(uint16_t(h + 1))) / 2));
  std::mt19937 rng(5);
  for (int i = 0; i < 300; ++i) {
    uint32_t u = rng();
    float f;
    std::memcpy(&f, &u, 4);
    if (std::fabs(f) < 1e6f && std::fabs(f) > 1e-9f) xs.push_back(f);
    xs.push_back(std::ldexp(float(rng() % 100000) / 100000.0f, int(rng() % 40) - 28));
  }
  for (float f : xs) {
    CAPTURE(f);
    const uint16_t got = to_bits(from_float<half>(f));
    if (std::isnan(f)) {
      CHECK((got & 0x7c00) == 0x7c00);
      CHECK((got & 0x3ff) != 0);
    } else {
      CHECK(got == half_reference(f));
    }
  }
}

TEST_CASE("numeric: bf16 conversions") {
  std::mt19937 rng(6);
  for (int i = 0; i < 100000; ++i) {
    const uint32_t u = rng();
    float f;
    std::memcpy(&f, &u, 4);
    const bf16 b = from_float<bf16>(f);
    if (std::isnan(f)) {
      CHECK(std::isnan(to_float(b)));
      continue;
    }
    // reference: the nearest of the two bf16 neighbours (truncation and next), ties to even
    const uint32_t lo = u & 0xffff0000u, hi = lo + 0x10000u;
    float flo, fhi;
    std::memcpy(&flo, &lo, 4);
    std::memcpy(&fhi, &hi, 4);
    // past the largest finite bf16 the upper neighbour is inf, which IEEE rounding treats as 2^128
    const double vhi = (hi & 0x7fffffffu) == 0x7f800000u ? std::copysign(std::ldexp(1.0, 128), f) : double(fhi);
    const double dlo = std::fabs(double(f) - flo), dhi = std::fabs(vhi - f);
    const uint32_t want = (dlo < dhi || (dlo == dhi && ((lo >> 16) & 1) == 0)) ? lo : hi;
    REQUIRE((uint32_t(to_bits(b)) << 16) == want);
  }
  CHECK(to_float(from_float<bf16>(INFINITY)) == INFINITY);
  CHECK(bf16_bits_to_float(0x3f80) == 1.0f);
}

}  // namespace core_test_numeric
