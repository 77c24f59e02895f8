// ops::quantize_group_warp: one warp quantizes one 32-element activation group (lane i holds
// element i) into the quant/act16.hpp format, with the same values and group record as
// quant::quantize_group (a one-thread loop of 32 divisions): for producers that hold their outputs
// one per lane, e.g. the MoE gate/up kernel writing the down projection's input.
#pragma once

#include <cfloat>
#include <cmath>
#include <cstdint>

#include "q35/arch/dp2a.hpp"
#include "q35/arch/shuffle.hpp"
#include "q35/arch/thread.hpp"
#include "q35/core/config.hpp"
#include "q35/quant/act16.hpp"
#include "q35/warp/reduce.hpp"

namespace q35::ops {

// q[lane] = round(x / scale), *rec = the group's record (written by lane 0). Called by all 32 lanes.
Q35_DEVICE void quantize_group_warp(float x, int16_t* q, quant::act16_group* rec) {
  static_assert(quant::act16_group_elems == warp_size, "one element per lane");
  const int lane = arch::lane_id();
  const float a = std::fabs(x);
  const bool finite = warp::reduce_min(int(a <= FLT_MAX)) != 0;  // no NaN or infinity in the group
  const float amax = warp::reduce_max(finite ? a : 0.0f);        // exact: a maximum of finite values
  const float scale = amax / float(quant::act16_qmax);
  const bool use = finite && scale > 0.0f;
  // |x / scale| <= 32767 (1 + 2^-23): rounds to at most 32767
  int32_t r = use ? arch::float_to_int_rn(x / scale) : 0;
  r = r > quant::act16_qmax ? quant::act16_qmax : r < -quant::act16_qmax ? -quant::act16_qmax : r;
  q[lane] = int16_t(r);
  const int32_t half = warp::reduce_sum<16>(r);  // lanes 0-15: elements 0..15; lanes 16-31: 16..31
  const int32_t hi = arch::shfl_xor(half, 16);
  if (lane == 0) {
    quant::act16_group g;
    g.scale = finite ? scale : NAN;
    g.sum = float(half + hi);
    g.neg32_sum_lo = -32 * half;
    g.neg32_sum_hi = -32 * hi;
    *rec = g;
  }
}

}  // namespace q35::ops
