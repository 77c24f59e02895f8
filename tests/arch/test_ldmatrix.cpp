// arch/ldmatrix.hpp: x1/x2/x4, plain and .trans, against the PTX layout with rows at scattered 16-byte
// aligned shared addresses (and decoy rows behind the ignored lanes' addresses); ldmatrix feeding an
// mma equals the coord-helper path; the sim's reports of a misaligned row and a partial warp.
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "q35/arch/ldmatrix.hpp"
#include "q35/arch/mma.hpp"
#include "q35/arch/thread.hpp"
#include "q35/core/numeric.hpp"
#include "q35/launch/launch.hpp"
#include "test_util.hpp"

namespace arch_test_ldmatrix {

using namespace q35;

// The shared image: 33 row slots of 48 bytes (a 16-byte row at byte 16 of each slot, the rest filler),
// so consecutive matrix rows are neither contiguous nor evenly 16 bytes apart. Slot 32 is a decoy row.
constexpr int n_slots = 33, slot_u16 = 24, row_offset_u16 = 8;
constexpr int image_u16 = n_slots * slot_u16;
// Slot of row r of matrix j (a permutation of 0..31).
constexpr int slot_of(int j, int r) { return (j * 8 + r) * 7 % 32; }
// Element (r, c) of matrix j, and the decoy row's elements.
constexpr uint16_t element(int j, int r, int c) { return uint16_t(0x1000 * (j + 1) + r * 16 + c); }
constexpr uint16_t decoy = 0xdead;

template <int N, bool Trans>
struct ldmatrix_kernel {
  struct params {
    const uint16_t* image;  // [image_u16]
    uint32_t* out;          // [32][N]: lane-major registers
  };
  struct shared_storage {
    alignas(16) uint16_t image[image_u16];
  };
  static constexpr int threads = 32;
  static dim3 grid(const params&) { return dim3(1); }
  Q35_DEVICE void operator()(const params& p, shared_storage& s) const {
    const int lane = arch::lane_id();
    for (int i = lane; i < image_u16; i += 32) s.image[i] = p.image[i];
    arch::sync_block();
    // Lanes < 8N name row lane % 8 of matrix lane / 8; the others the decoy row (ignored).
    const int slot = lane < 8 * N ? slot_of(lane / 8, lane % 8) : 32;
    uint32_t d[N];
    arch::ldmatrix<N, Trans>(d, &s.image[slot * slot_u16 + row_offset_u16]);
    for (int j = 0; j < N; ++j) p.out[lane * N + j] = d[j];
  }
};

template <int N, bool Trans>
void check_ldmatrix() {
  CAPTURE(N);
  CAPTURE(Trans);
  std::vector<uint16_t> image(image_u16, 0x7777);
  for (int j = 0; j < 4; ++j)
    for (int r = 0; r < 8; ++r)
      for (int c = 0; c < 8; ++c) image[size_t(slot_of(j, r) * slot_u16 + row_offset_u16 + c)] = element(j, r, c);
  for (int c = 0; c < 8; ++c) image[size_t(32 * slot_u16 + row_offset_u16 + c)] = decoy;
  auto d_image = test::to_device(image);
  auto out = test::poisoned<uint32_t>(32 * N);
  Q35_REQUIRE_OK(launch::launch<ldmatrix_kernel<N, Trans>>({d_image.data(), out.data()}));
  const auto h = test::to_host(out);
  for (int lane = 0; lane < 32; ++lane) {
    for (int j = 0; j < N; ++j) {
      // PTX ISA (ldmatrix, "fragment layout"): thread l holds row l/4, elements 2(l%4) and 2(l%4)+1
      // of each matrix; with .trans, the same positions of the transposed matrix.
      const int r = lane / 4, c = 2 * (lane % 4);
      const uint16_t lo = Trans ? element(j, c, r) : element(j, r, c);
      const uint16_t hi = Trans ? element(j, c + 1, r) : element(j, r, c + 1);
      CAPTURE(lane);
      CAPTURE(j);
      CHECK(h[size_t(lane * N + j)] == (uint32_t(lo) | uint32_t(hi) << 16));
    }
  }
}

TEST_CASE("arch: ldmatrix x1/x2/x4 and .trans match the PTX fragment layout" * test::needs_device()) {
  check_ldmatrix<1, false>();
  check_ldmatrix<2, false>();
  check_ldmatrix<4, false>();
  check_ldmatrix<1, true>();
  check_ldmatrix<2, true>();
  check_ldmatrix<4, true>();
}

// A (16x16, row-major) and B (16x8 k x n, row-major) in shared memory: the mma fragments come once
// from ldmatrix (x4 for A, x2.trans for B, the usual GEMM addressing) and once from the coord
// helpers; both mmas must give bit-identical D.
struct ldmatrix_mma_kernel {
  struct params {
    const uint16_t* a;  // [16][16] f16 bits
    const uint16_t* b;  // [16][8] f16 bits
    float* d;           // [2][16][8]: via ldmatrix, via coord
  };
  struct shared_storage {
    alignas(16) uint16_t a[16][16 + 8];  // padded rows: 48 bytes apart
    alignas(16) uint16_t b[16][8];
  };
  static constexpr int threads = 32;
  static dim3 grid(const params&) { return dim3(1); }
  Q35_DEVICE void operator()(const params& p, shared_storage& s) const {
    const int lane = arch::lane_id();
    for (int i = lane; i < 256; i += 32) s.a[i / 16][i % 16] = p.a[i];
    for (int i = lane; i < 128; i += 32) s.b[i / 8][i % 8] = p.b[i];
    arch::sync_block();
    arch::mma_a_f16_16x16 a, a2{};
    arch::mma_b_f16_16x8 b, b2{};
    // A: matrices (rows 0-7, cols 0-7), (rows 8-15, cols 0-7), (rows 0-7, cols 8-15), (rows 8-15, cols 8-15)
    arch::ldmatrix_x4(a.r, &s.a[lane % 16][lane / 16 * 8]);
    // B: k rows 0-7 and 8-15, transposed (lanes 16-31 repeat rows 0-15; they are ignored)
    arch::ldmatrix_x2_trans(b.r, &s.b[lane % 16][0]);
    for (int i = 0; i < 8; ++i) {
      const arch::mma_coord at = arch::mma_a_f16_16x16::coord(lane, i);
      arch::mma_set_element_bits(a2, i, s.a[at.row][at.col]);
    }
    for (int i = 0; i < 4; ++i) {
      const arch::mma_coord at = arch::mma_b_f16_16x8::coord(lane, i);
      arch::mma_set_element_bits(b2, i, s.b[at.row][at.col]);
    }
    arch::mma_c_f32_16x8 zero{}, d, d2;
    arch::mma_m16n8k16_f16(d, a, b, zero);
    arch::mma_m16n8k16_f16(d2, a2, b2, zero);
    for (int i = 0; i < 4; ++i) {
      const arch::mma_coord at = arch::mma_c_f32_16x8::coord(lane, i);
      p.d[at.row * 8 + at.col] = d.r[i];
      p.d[128 + at.row * 8 + at.col] = d2.r[i];
    }
  }
};

TEST_CASE("arch: ldmatrix x4 / x2.trans give the fragments of mma m16n8k16" * test::needs_device()) {
  std::mt19937_64 rng(3);
  std::vector<uint16_t> a(256), b(128);
  for (auto& x : a) x = to_bits(from_float<half>(float(int(rng() % 64) - 32) / 8));
  for (auto& x : b) x = to_bits(from_float<half>(float(int(rng() % 64) - 32) / 8));
  auto da = test::to_device(a);
  auto db = test::to_device(b);
  auto dd = test::poisoned<float>(256);
  Q35_REQUIRE_OK(launch::launch<ldmatrix_mma_kernel>({da.data(), db.data(), dd.data()}));
  const auto h = test::to_host(dd);
  for (int i = 0; i < 128; ++i) {
    double want = 0;  // exact: small dyadic values
    for (int k = 0; k < 16; ++k)
      want += double(half_bits_to_float(a[size_t(i / 8 * 16 + k)])) * half_bits_to_float(b[size_t(k * 8 + i % 8)]);
    CAPTURE(i);
    CHECK(h[size_t(i)] == h[size_t(128 + i)]);
    CHECK(double(h[size_t(i)]) == want);
  }
}

#if Q35_BACKEND_SIM
// Lane 3 names a row that is not 16-byte aligned, or a row in global memory; or only lanes 0-7 call (a
// partial warp).
struct bad_ldmatrix_kernel {
  struct params {
    int mode;  // 0: misaligned row, 1: partial warp, 2: a row in global memory
    uint32_t* out;
    const uint16_t* global_rows;  // [8][16], 16-byte aligned (mode 2)
  };
  struct shared_storage {
    alignas(16) uint16_t rows[8][16];
  };
  static constexpr int threads = 32;
  static dim3 grid(const params&) { return dim3(1); }
  Q35_DEVICE void operator()(const params& p, shared_storage& s) const {
    const int lane = arch::lane_id();
    if (p.mode == 1 && lane >= 8) return;
    const uint16_t* row = &s.rows[lane % 8][p.mode == 0 && lane == 3 ? 4 : 0];
    if (p.mode == 2 && lane == 3) row = p.global_rows + 16 * 3;
    uint32_t d[1];
    arch::ldmatrix_x1(d, row);
    p.out[lane] = d[0];
  }
};

TEST_CASE(
    "arch: the sim reports an ldmatrix row that is not 16-byte aligned or not in shared memory, and a "
    "partial warp") {
  auto out = test::poisoned<uint32_t>(32);
  auto rows = test::to_device(std::vector<uint16_t>(8 * 16, 1));
  status s = launch::launch<bad_ldmatrix_kernel>({0, out.data(), rows.data()});
  REQUIRE_FALSE(s.ok());
  CHECK(s.code() == status_code::kernel_fault);
  INFO(s.message());
  CHECK(s.message().find("[warp 0 lane 3]") != std::string::npos);
  CHECK(s.message().find("is not 16-byte aligned") != std::string::npos);
  s = launch::launch<bad_ldmatrix_kernel>({1, out.data(), rows.data()});
  REQUIRE_FALSE(s.ok());
  INFO(s.message());
  CHECK(s.message().find("sync_warp with mask 0xffffffff") != std::string::npos);  // either lane order
  // a GPU would read shared memory at whatever offset the global address truncates to
  s = launch::launch<bad_ldmatrix_kernel>({2, out.data(), rows.data()});
  REQUIRE_FALSE(s.ok());
  CHECK(s.code() == status_code::kernel_fault);
  INFO(s.message());
  CHECK(s.message().find("[warp 0 lane 3]") != std::string::npos);
  CHECK(s.message().find("is not in the block's shared memory") != std::string::npos);
}
#endif

}  // namespace arch_test_ldmatrix
