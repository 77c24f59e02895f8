// Fast math with one definition on both backends: exp, sigmoid, silu, softplus.
//
// exp uses exp2(x * log2 e) (ex2.approx on the GPU, <= 2 ulp; std::exp2 on the sim), so both
// backends agree to a few ulp and agree exactly on the special values: exp(-inf) = 0,
// exp(+inf) = inf, NaN -> NaN, and large negative x underflows to 0 rather than producing NaN.
#pragma once

#include <cmath>

#include "q35/core/config.hpp"

namespace q35::arch {

inline constexpr float log2e = 1.4426950408889634f;

// e^x
Q35_DEVICE float fast_exp(float x) {
#if Q35_BACKEND_CUDA
  return exp2f(x * log2e);
#else
  return std::exp2(x * log2e);
#endif
}

// 1 / x
Q35_DEVICE float fast_rcp(float x) {
#if Q35_BACKEND_CUDA
  return __frcp_rn(x);
#else
  return 1.0f / x;
#endif
}

// sigmoid(x) = 1 / (1 + e^-x); sigmoid(-inf) = 0, sigmoid(+inf) = 1
Q35_DEVICE float sigmoid(float x) { return fast_rcp(1.0f + fast_exp(-x)); }

// silu(x) = x * sigmoid(x); silu(-inf) = -0 (not NaN)
Q35_DEVICE float silu(float x) { return x == -INFINITY ? -0.0f : x * sigmoid(x); }

// Threshold above which softplus(x) == x in float (as PyTorch and llama.cpp use).
inline constexpr float softplus_threshold = 20.0f;

// softplus(x) = log(1 + e^x), and x itself above the threshold
Q35_DEVICE float softplus(float x) {
#if Q35_BACKEND_CUDA
  return x > softplus_threshold ? x : log1pf(fast_exp(x));
#else
  return x > softplus_threshold ? x : std::log1p(fast_exp(x));
#endif
}

}  // namespace q35::arch
