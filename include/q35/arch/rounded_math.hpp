// Float multiply/add/subtract that are never fused into an FMA: for results that must match a
// reference bit for bit (ggml's dequantization computes d * q - m with two roundings); and an
// explicit fused multiply-add where one rounding is what the result needs.
#pragma once

#include "q35/core/config.hpp"

#if !Q35_DEVICE_PASS
#include <cmath>
#endif

namespace q35::arch {

// a * b, rounded to nearest even, never contracted with a following add.
Q35_HOST_DEVICE float mul_rn(float a, float b) {
#if Q35_DEVICE_PASS
  return __fmul_rn(a, b);
#else
  // Host code: q35::sim compiles with -ffp-contract=off (CMakeLists.txt), so GCC in gnu++ modes with an
  // FMA target (-march=native) does not fuse this product into a following add either. For the
  // dequantization it would not matter: its products are exact in fp32 (tests/quant/test_contraction.cpp).
  return a * b;
#endif
}

// a + b, rounded to nearest even, never contracted.
Q35_HOST_DEVICE float add_rn(float a, float b) {
#if Q35_DEVICE_PASS
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}

// a - b, rounded to nearest even, never contracted.
Q35_HOST_DEVICE float sub_rn(float a, float b) {
#if Q35_DEVICE_PASS
  return __fsub_rn(a, b);
#else
  return a - b;
#endif
}

// a * b + c with one rounding (an FFMA on the GPU, std::fma on the host).
Q35_HOST_DEVICE float fma_rn(float a, float b, float c) {
#if Q35_DEVICE_PASS
  return __fmaf_rn(a, b, c);
#else
  return std::fma(a, b, c);
#endif
}

}  // namespace q35::arch
