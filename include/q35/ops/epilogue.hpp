// The output epilogues shared by the GEMV and GEMM kernels: what happens to a finished dot product.
#pragma once

#include "q35/arch/math.hpp"
#include "q35/core/config.hpp"

namespace q35::ops {

enum class epilogue {
  store,     // y = W x
  residual,  // y += W x  (y is the residual stream h)
  swiglu,    // y = silu(W_gate x) * (W_up x)
};

// Weight matrices an epilogue reads: two for swiglu (gate, up), else one.
template <epilogue E>
inline constexpr int epilogue_mats = E == epilogue::swiglu ? 2 : 1;

// Writes one output from its dot products a (W or W_gate) and b (W_up, swiglu only).
template <epilogue E>
Q35_DEVICE void apply_epilogue(float* out, float a, float b) {
  if constexpr (E == epilogue::store) {
    *out = a;
  } else if constexpr (E == epilogue::residual) {
    // h = h + W x
    *out = *out + a;
  } else {
    // y = silu(W_gate x) * (W_up x)
    *out = arch::silu(a) * b;
  }
}

}  // namespace q35::ops
