// ops::stage_rows: a block copies the same byte range of several weight rows from global into shared
// memory with 128-bit streaming loads (arch::load_16_stream: LDG.E.128, no L1 allocation). Each row
// keeps its 16-byte phase, so the 16-byte chunks inside the range are one aligned load and store;
// only a misaligned head and tail (GGUF rows of 34-, 18- or 210-byte blocks) are copied bytewise,
// and nothing outside the range is read.
#pragma once

#include <cstdint>

#include "q35/arch/vector_load.hpp"
#include "q35/core/config.hpp"
#include "q35/core/vec.hpp"

// Keeps the next loop rolled on the GPU (a rarely taken loop that would otherwise cost registers).
#ifndef Q35_NO_UNROLL
#if Q35_BACKEND_CUDA
#define Q35_NO_UNROLL _Pragma("unroll 1")
#else
#define Q35_NO_UNROLL
#endif
#endif

namespace q35::ops {

// Shared bytes per staged row of `n_bytes`: the bytes plus up to 15 of phase, rounded to 16.
Q35_HOST_DEVICE constexpr int64_t staged_row_bytes(int64_t n_bytes) { return round_up<int64_t>(n_bytes + 15, 16); }

// Where row data begins inside its staged slot: the source address modulo 16.
Q35_DEVICE int stage_phase(const void* src) { return int(reinterpret_cast<uintptr_t>(src) & 15u); }

// For r in [0, n_rows): copies src_row(r)[0, n_bytes) to dst + r * dst_stride + stage_phase(src_row(r)).
// dst is 16-byte aligned, dst_stride a multiple of 16 holding staged_row_bytes(n_bytes); a row for
// which src_row returns null is skipped. Called by all `n_threads` threads (rank `t`); the caller
// synchronizes before reading.
template <class SrcRow>
Q35_DEVICE void stage_rows(uint8_t* dst, int dst_stride, SrcRow src_row, int n_rows, int n_bytes, int t,
                           int n_threads) {
  // 32-bit index math: a 64-bit division is a slow subroutine call on the GPU
  const int chunks_per_row = int(staged_row_bytes(n_bytes) / 16);
  const int n_chunks = n_rows * chunks_per_row;
  for (int i0 = 0; i0 < n_chunks; i0 += n_threads) {  // block-uniform trip count
    const int i = i0 + t;
    if (i >= n_chunks) continue;
    const int r = i / chunks_per_row;
    const int c = i - r * chunks_per_row;
    const uint8_t* src = src_row(r);
    if (!src) continue;
    const int phase = stage_phase(src);
    const uint8_t* base = src - phase;  // 16-byte aligned
    const int lo = c == 0 ? phase : 0;  // first byte of this chunk inside the range
    const int hi = phase + n_bytes - 16 * c < 16 ? phase + n_bytes - 16 * c : 16;
    uint8_t* out = dst + r * dst_stride + 16 * c;
    if (lo == 0 && hi == 16) {
      arch::store_16(reinterpret_cast<uint32_t*>(out),
                     arch::load_16_stream(reinterpret_cast<const uint32_t*>(base + 16 * c)));
    } else {
      Q35_NO_UNROLL
      for (int b = lo; b < hi; ++b) out[b] = base[16 * c + b];  // misaligned head or tail, < 16 bytes
    }
  }
}

}  // namespace q35::ops
