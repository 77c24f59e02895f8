// Shared-memory bank conflicts of the int8 tensor-core GEMM (kernels/gemm_i8.hpp), by construction:
// every 8-lane phase of an ldmatrix (one 8x8 matrix: 8 row addresses of 16 bytes), of the 16-byte
// staging stores and of the cp.async writes covers the 8 distinct 16-byte positions of a 128-byte bank
// line, i.e. all 32 banks once. The addresses are the kernel's own (swz and the lane-to-row maps written
// out as in the kernel). No kernel runs: this is the kernel's address arithmetic, on the host.
#include <doctest/doctest.h>

#include <utility>
#include <vector>

#include "q35/kernels/gemm_i8.hpp"

namespace {

using namespace q35;
using ops::epilogue;

// Every tile: the A (weights) fragments of a warp's two 16-row tiles, its B (activations) fragments (x4
// over pairs of 8-token tiles; x2 over the one tile of the 16-token tile's warps), the staging stores
// and the cp.async copies, 8 addresses per phase.
template <int Bn>
void check_bank_conflicts() {
  CAPTURE(Bn);
  using K = kernels::gemm_i8_kernel<quant::q4_k_format, epilogue::store, kernels::gemm_rows::dense,
                                    kernels::gemm_i8_policy<Bn>>;
  auto distinct = [](const std::vector<int>& offsets) {
    int seen = 0;
    for (int o : offsets) seen |= 1 << ((o / 16) % 8);
    return seen == 0xff;
  };
  int phases = 0, bad = 0;
  auto phase = [&](auto address, int first_lane) {
    std::vector<int> off;
    for (int lane = first_lane; lane < first_lane + 8; ++lane) {
      const auto [r, c] = address(lane);
      off.push_back(r * K::bk + K::swz(r, c));
    }
    ++phases, bad += !distinct(off);
  };
  for (int warp = 0; warp < 4; ++warp)
    for (int kq = 0; kq < K::k32; ++kq) {
      for (int mi = 0; mi < 2; ++mi)
        for (int j = 0; j < 4; ++j)
          phase(
              [&](int lane) {
                return std::pair{32 * (warp >> 1) + 16 * mi + (lane & 7) + 8 * ((lane >> 3) & 1), 2 * kq + (lane >> 4)};
              },
              8 * j);
      if constexpr (K::n_nt == 1) {
        for (int j = 0; j < 2; ++j)
          phase(
              [&](int lane) {
                return std::pair{K::warp_tokens * (warp & 1) + (lane & 7), 2 * kq + ((lane >> 3) & 1)};
              },
              8 * j);
      } else {
        for (int np = 0; np < K::n_nt / 2; ++np)
          for (int j = 0; j < 4; ++j)
            phase(
                [&](int lane) {
                  return std::pair{K::warp_tokens * (warp & 1) + 16 * np + (lane & 7) + 8 * (lane >> 4),
                                   2 * kq + ((lane >> 3) & 1)};
                },
                8 * j);
      }
    }
  const int fragment_phases = phases;
  CHECK(fragment_phases == 4 * K::k32 * (8 + (K::n_nt == 1 ? 2 : 4 * K::n_nt / 2)));
  for (int t0 = 0; t0 < K::threads; t0 += 8)
    for (int c = 0; c < 4; ++c) {  // store_w: thread t writes chunk 4 (t & 1) + c of row t >> 1
      std::vector<int> off;
      for (int t = t0; t < t0 + 8; ++t) off.push_back((t >> 1) * K::bk + K::swz(t >> 1, 4 * (t & 1) + c));
      ++phases, bad += !distinct(off);
    }
  for (int i0 = 0; i0 < K::bn * 8; i0 += 8) {  // stage_x: copy idx writes chunk idx & 7 of row idx >> 3
    std::vector<int> off;
    for (int idx = i0; idx < i0 + 8; ++idx) off.push_back((idx >> 3) * K::bk + K::swz(idx >> 3, idx & 7));
    ++phases, bad += !distinct(off);
  }
  CHECK(phases == fragment_phases + 16 * 4 + K::bn);
  CHECK(bad == 0);
}

TEST_CASE("gemm_i8: ldmatrix, staging and cp.async addresses are free of bank conflicts") {
  check_bank_conflicts<64>();
  check_bank_conflicts<32>();
  check_bank_conflicts<16>();
}

}  // namespace
