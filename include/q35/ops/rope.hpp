// ops::rope_cos_sin and ops::head_norm_rope: per-head RMSNorm and partial NEOX rotary embedding of one
// head held by a warp (lane l owns dims l*E .. l*E+E-1), as Qwen3.5 full attention applies to q and k
// (spec §2.1 items 2-4).
#pragma once

#include <cmath>
#include <cstdint>

#include "q35/arch/shuffle.hpp"
#include "q35/core/config.hpp"
#include "q35/warp/reduce.hpp"

namespace q35::ops {

inline constexpr double two_pi = 6.283185307179586476925286766559;

// cos and sin of theta_i = pos * base^(-2i / rope_dim). The angle is formed in float64 (pos up to 2^20
// times a frequency of 1 would lose 2^-4 rad in float) and reduced to [-pi, pi] there, so the float
// cos/sin see a small argument: |error| <= 2^-21 on the GPU (__sincosf), a few ulp on the sim.
Q35_DEVICE void rope_cos_sin(int64_t pos, int i, int rope_dim, double log2_base, float& c, float& s) {
  const double inv_freq = exp2(-2.0 * double(i) / double(rope_dim) * log2_base);
  const double angle = double(pos) * inv_freq;
  const float r = float(angle - rint(angle / two_pi) * two_pi);
#if Q35_DEVICE_PASS
  __sincosf(r, &s, &c);
#else
  c = std::cos(r);
  s = std::sin(r);
#endif
}

// x <- rms(x) * w, then NEOX rotation of pairs (i, i + rope_dim/2) for i < rope_dim/2:
//   x'[i] = x[i] cos_i - x[i+h] sin_i,  x'[i+h] = x[i+h] cos_i + x[i] sin_i   (h = rope_dim / 2)
// Lane `lane` holds x[lane*E + e] (E = head_dim / 32); w is the norm weight at the lane's dims;
// cs[i] = {cos_i, sin_i}. Requires h % E == 0 so a pair sits in one register of two lanes h/E apart.
// All 32 lanes must call it.
template <int E>
Q35_DEVICE void head_norm_rope(float (&x)[E], const float (&w)[E], int lane, int head_dim, float eps, int rope_dim,
                               const float (*cs)[2]) {
  // rms(x) = x / sqrt(mean(x^2) + eps)
  float ss = 0.0f;
  Q35_UNROLL
  for (int e = 0; e < E; ++e) ss += x[e] * x[e];
  ss = warp::reduce_sum(ss);
  const float inv_rms = 1.0f / sqrtf(ss / float(head_dim) + eps);
  Q35_UNROLL
  for (int e = 0; e < E; ++e) x[e] = x[e] * inv_rms * w[e];

  const int half = rope_dim / 2;
  const int off = half / E;  // lanes between the two members of a pair
  Q35_UNROLL
  for (int e = 0; e < E; ++e) {
    const float up = arch::shfl_down(x[e], off);  // x[d + half], from lane + off
    const float dn = arch::shfl_up(x[e], off);    // x[d - half], from lane - off
    const int d = lane * E + e;
    if (d < half) {
      x[e] = x[e] * cs[d][0] - up * cs[d][1];
    } else if (d < rope_dim) {
      x[e] = x[e] * cs[d - half][0] + dn * cs[d - half][1];
    }
  }
}

}  // namespace q35::ops
