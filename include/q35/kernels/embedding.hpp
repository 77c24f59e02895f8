// embedding_kernel: out[t] = row ids[t] of a token-embedding table in any GGUF format, dequantized to
// f32 with the bit-exact unit math the dequant kernel uses (spec §2.0 step 1, no scale).
//
// Thread-to-data mapping: block t gathers token t; thread i dequantizes the 16-element units i,
// i + threads, ... of its row. An id outside [0, n_vocab) writes a NaN row and sets *maybe_error_flag.
#pragma once

#include <cmath>
#include <cstdint>

#include "q35/arch/atomic.hpp"
#include "q35/arch/thread.hpp"
#include "q35/core/dim3.hpp"
#include "q35/quant/formats.hpp"

namespace q35::kernels {

template <quant::weight_format Format>
struct embedding_kernel {
  struct params {
    const typename Format::block* table;  // [n_vocab][n_embd / block_elems] blocks
    const int32_t* ids;                   // [n_tokens], device
    float* out;                           // [n_tokens][n_embd]
    int64_t n_tokens, n_vocab;
    int n_embd;             // a multiple of 16 and of the block size
    int* maybe_error_flag;  // set to 1 on an out-of-range id
  };
  struct shared_storage {};
  static constexpr int threads = 128;
  static dim3 grid(const params& p) { return dim3(unsigned(p.n_tokens)); }

  Q35_DEVICE void operator()(const params& p, shared_storage&) const {
    const int64_t t = int64_t(arch::block_idx().x);
    const int64_t id = p.ids[t];
    float* out = p.out + t * p.n_embd;
    const int n_units = p.n_embd / quant::unit_elems;
    if (id < 0 || id >= p.n_vocab) {
      if (arch::thread_rank() == 0 && p.maybe_error_flag) arch::raise_flag(p.maybe_error_flag);
      for (int i = arch::thread_rank(); i < p.n_embd; i += threads) out[i] = NAN;
      return;
    }
    const typename Format::block* row = p.table + id * (p.n_embd / Format::block_elems);
    for (int u = arch::thread_rank(); u < n_units; u += threads) {
      float w[quant::unit_elems];
      quant::dequant_row_unit<Format>(row, u, w);
      Q35_UNROLL
      for (int i = 0; i < quant::unit_elems; ++i) out[u * quant::unit_elems + i] = w[i];
    }
  }
};

}  // namespace q35::kernels
