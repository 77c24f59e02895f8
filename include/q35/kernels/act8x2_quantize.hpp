// act8x2_quantize_kernel: fp32 activation rows -> the split 16-bit planes (quant/act8x2.hpp) that the
// int8 tensor-core GEMM (kernels/gemm_i8.hpp) reads, with quant::quantize_group's numbers.
#pragma once

#include <cstdint>

#include "q35/arch/thread.hpp"
#include "q35/arch/vector_load.hpp"
#include "q35/core/config.hpp"
#include "q35/core/dim3.hpp"
#include "q35/core/numeric.hpp"
#include "q35/core/vec.hpp"
#include "q35/quant/act16.hpp"
#include "q35/quant/act8x2.hpp"

namespace q35::kernels {

// Splits rows of fp32 activations into quant/act8x2.hpp's planes (the q values of quant::quantize_group,
// as act16_quantize_kernel makes them). Thread i quantizes group i of the flat [n_rows][cols / 32].
template <int Threads = 128>
struct act8x2_quantize_kernel {
  static constexpr int threads = Threads;
  struct params {
    const float* x;  // [n_rows][cols], 16-byte aligned
    int64_t n_rows, cols;
    int8_t* hi;
    uint8_t* lo;
    quant::act8x2_group* groups;
  };
  struct shared_storage {};
  static dim3 grid(const params& p) {
    return dim3(unsigned(ceil_div<int64_t>(quant::act16_group_count(p.n_rows, p.cols), threads)));
  }
  Q35_DEVICE void operator()(const params& p, shared_storage&) const {
    const int64_t gi = int64_t(arch::block_idx().x) * threads + arch::thread_rank();
    if (gi >= quant::act16_group_count(p.n_rows, p.cols)) return;
    constexpr int n = quant::act16_group_elems;
    uint32_t q[n / 2];
    quant::act16_group g;
    quant::load_quantize_group(p.x, gi, q, g);
    // element 2k + h is half h of q[k]; its hi byte is bits 8..15 of the half, lo byte bits 0..7
    uint32_t hw[n / 4], lw[n / 4];
    Q35_UNROLL
    for (int k = 0; k < n / 4; ++k) {
      const uint32_t a = q[2 * k], b = q[2 * k + 1];  // elements 4k .. 4k + 3
      lw[k] = (a & 0xffu) | ((a >> 8) & 0xff00u) | ((b & 0xffu) << 16) | ((b >> 16) & 0xffu) << 24;
      hw[k] = ((a >> 8) & 0xffu) | ((a >> 16) & 0xff00u) | (((b >> 8) & 0xffu) << 16) | ((b >> 24) & 0xffu) << 24;
    }
    Q35_UNROLL
    for (int k = 0; k < n / 16; ++k) {
      arch::store_16(reinterpret_cast<uint32_t*>(p.hi + gi * n) + 4 * k,
                     vec16<uint32_t>{{hw[4 * k], hw[4 * k + 1], hw[4 * k + 2], hw[4 * k + 3]}});
      arch::store_16(reinterpret_cast<uint32_t*>(p.lo + gi * n) + 4 * k,
                     vec16<uint32_t>{{lw[4 * k], lw[4 * k + 1], lw[4 * k + 2], lw[4 * k + 3]}});
    }
    p.groups[gi] = quant::act8x2_group{g.scale, g.sum};
  }
};

}  // namespace q35::kernels
