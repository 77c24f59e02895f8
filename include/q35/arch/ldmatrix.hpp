// Warp-level loads of 8x8 matrices of 16-bit elements from shared memory into mma fragments
// (PTX ldmatrix.sync.aligned.m8n8.{x1,x2,x4}{,.trans}.shared.b16).
//
// Matrix j (0 <= j < N) is given by the row addresses of lanes 8j..8j+7 (16 bytes each, 16-byte
// aligned, in the block's shared memory: the sim checks both); the other lanes' addresses are
// ignored. Register d[j] of lane l then holds row l/4, elements 2*(l%4) (low half) and 2*(l%4)+1
// (high half) of matrix j; with Trans, the transpose: rows 2*(l%4) and 2*(l%4)+1 of column l/4.
// All 32 lanes must call it (the sim checks).
#pragma once

#include <cstdint>
#include <cstring>

#include "q35/core/config.hpp"

#if Q35_BACKEND_SIM
#include <string>

#include "q35/arch/shuffle.hpp"
#include "q35/arch/thread.hpp"
#include "q35/sim/device_api.hpp"
#endif

namespace q35::arch {

// Loads N (1, 2 or 4) 8x8 b16 matrices; `row` is this lane's row address (used by lanes < 8 N).
template <int N, bool Trans = false>
Q35_DEVICE void ldmatrix(uint32_t (&d)[N], const void* row) {
  static_assert(N == 1 || N == 2 || N == 4, "ldmatrix loads 1, 2 or 4 matrices");
#if Q35_BACKEND_CUDA
  const uint32_t a = uint32_t(__cvta_generic_to_shared(row));
  if constexpr (N == 1 && !Trans)
    asm volatile("ldmatrix.sync.aligned.m8n8.x1.shared.b16 {%0}, [%1];\n" : "=r"(d[0]) : "r"(a));
  if constexpr (N == 1 && Trans)
    asm volatile("ldmatrix.sync.aligned.m8n8.x1.trans.shared.b16 {%0}, [%1];\n" : "=r"(d[0]) : "r"(a));
  if constexpr (N == 2 && !Trans)
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];\n" : "=r"(d[0]), "=r"(d[1]) : "r"(a));
  if constexpr (N == 2 && Trans)
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0,%1}, [%2];\n" : "=r"(d[0]), "=r"(d[1]) : "r"(a));
  if constexpr (N == 4 && !Trans)
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3])
                 : "r"(a));
  if constexpr (N == 4 && Trans)
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3])
                 : "r"(a));
#else
  const int lane = lane_id();
  const uintptr_t mine = reinterpret_cast<uintptr_t>(row);
  if (lane < 8 * N && mine % 16 != 0)
    sim::detail::fail("ldmatrix row address " + std::to_string(mine) + " of lane " + std::to_string(lane) +
                      " is not 16-byte aligned");
  if (lane < 8 * N && !sim::in_block_shared(row, 16))
    sim::detail::fail("ldmatrix row address " + std::to_string(mine) + " of lane " + std::to_string(lane) +
                      " is not in the block's shared memory (ldmatrix reads only shared memory)");
  // Lane l takes its two elements of matrix j from the rows of lanes 8j + r: the lanes publish their
  // row addresses in the warp's scratch and meet in a sync_warp over the full warp (so a partial warp
  // is reported); non-trans row l/4, columns 2*(l%4) and +1; trans rows 2*(l%4) and +1, column l/4.
  uint32_t(&scratch)[32][16] = sim::warp_scratch();
  scratch[lane][0] = uint32_t(mine), scratch[lane][1] = uint32_t(uint64_t(mine) >> 32);
  sync_warp();
  const auto row_of = [&](int l) {
    return reinterpret_cast<const unsigned char*>(uintptr_t(uint64_t(scratch[l][0]) | uint64_t(scratch[l][1]) << 32));
  };
  for (int j = 0; j < N; ++j) {
    uint16_t e[2];
    if constexpr (!Trans) {
      std::memcpy(e, row_of(8 * j + lane / 4) + 4 * (lane % 4), 4);
    } else {
      for (int h = 0; h < 2; ++h) std::memcpy(&e[h], row_of(8 * j + 2 * (lane % 4) + h) + 2 * (lane / 4), 2);
    }
    d[j] = uint32_t(e[0]) | uint32_t(e[1]) << 16;
  }
  sync_warp();
#endif
}

// The common shapes by name.
Q35_DEVICE void ldmatrix_x1(uint32_t (&d)[1], const void* row) { ldmatrix<1>(d, row); }
Q35_DEVICE void ldmatrix_x2(uint32_t (&d)[2], const void* row) { ldmatrix<2>(d, row); }
Q35_DEVICE void ldmatrix_x4(uint32_t (&d)[4], const void* row) { ldmatrix<4>(d, row); }
Q35_DEVICE void ldmatrix_x1_trans(uint32_t (&d)[1], const void* row) { ldmatrix<1, true>(d, row); }
Q35_DEVICE void ldmatrix_x2_trans(uint32_t (&d)[2], const void* row) { ldmatrix<2, true>(d, row); }
Q35_DEVICE void ldmatrix_x4_trans(uint32_t (&d)[4], const void* row) { ldmatrix<4, true>(d, row); }

}  // namespace q35::arch
