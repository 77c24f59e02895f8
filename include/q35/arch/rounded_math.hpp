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
  // Host code (sim, and nvcc's host pass): compilers in ISO C++ mode (-std=c++20, no GNU extensions) do not contract
  // across statements and the default x86-64 target has no FMA instruction.
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
