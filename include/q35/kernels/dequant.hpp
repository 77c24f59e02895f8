// dequant_kernel: a tensor of any supported GGUF format -> f32 / f16 / bf16, bit-exact with ggml's
// reference dequantization (the f32 values; f16/bf16 outputs are those values rounded to nearest even).
#pragma once

#include <algorithm>
#include <cstdint>

#include "q35/arch/thread.hpp"
#include "q35/core/dim3.hpp"
#include "q35/core/numeric.hpp"
#include "q35/core/vec.hpp"
#include "q35/quant/formats.hpp"

namespace q35::kernels {

// One thread per 16-element unit, grid-stride; a tail shorter than a unit (plain formats only) is
// converted element by element by the thread that owns it.
template <quant::weight_format Format, class Out>
struct dequant_kernel {
  struct params {
    const typename Format::block* src;  // [n_elems / block_elems] blocks, row-major tensor bytes
    Out* dst;                           // [n_elems]
    int64_t n_elems;                    // a multiple of Format::block_elems
  };
  struct shared_storage {};
  static constexpr int threads = 256;
  // Enough blocks to fill any GPU several times over; larger tensors grid-stride.
  static constexpr int64_t max_blocks = 16384;
  static dim3 grid(const params& p) {
    return dim3(
        unsigned(std::min(ceil_div<int64_t>(ceil_div<int64_t>(p.n_elems, quant::unit_elems), threads), max_blocks)));
  }

  Q35_DEVICE void operator()(const params& p, shared_storage&) const {
    const int64_t n_units = ceil_div<int64_t>(p.n_elems, quant::unit_elems);
    const int64_t stride = int64_t(arch::grid_dim().x) * threads;
    for (int64_t u = arch::block_rank() * threads + arch::thread_rank(); u < n_units; u += stride) {
      const int64_t e0 = u * quant::unit_elems;
      if (e0 + quant::unit_elems <= p.n_elems) {
        float w[quant::unit_elems];
        quant::dequant_row_unit<Format>(p.src, u, w);
        Q35_UNROLL
        for (int i = 0; i < quant::unit_elems; ++i) p.dst[e0 + i] = from_float<Out>(w[i]);
      } else if constexpr (Format::block_elems == 1) {
        for (int64_t e = e0; e < p.n_elems; ++e) p.dst[e] = from_float<Out>(Format::value(p.src[e]));
      }
    }
  }
};

}  // namespace q35::kernels
