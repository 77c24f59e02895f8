// Float multiply/add/subtract that are never fused into an FMA: for results that must match a
// reference bit for bit (ggml's dequantization computes d * q - m with two roundings).
#pragma once

#include "q35/core/config.hpp"

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

}  // namespace q35::arch
