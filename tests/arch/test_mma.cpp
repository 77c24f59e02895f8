// arch/mma.hpp: the fragment layouts against the PTX ISA tables (written out here independently),
// selection matrices that prove the layouts end to end, random f16/bf16 against float64 with a
// derived bound, random s8/u8 (all four sign pairs, both shapes) exactly against int64, and the sim's
// report of an mma reached by part of a warp.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "q35/arch/mma.hpp"
#include "q35/arch/thread.hpp"
#include "q35/core/numeric.hpp"
#include "q35/launch/launch.hpp"
#include "test_util.hpp"

namespace arch_test_mma {

using namespace q35;
using arch::int8_type;
using arch::mma_coord;

// ---- The PTX ISA tables ("Matrix Fragments for mma.m16n8k16 / mma.m16n8k32"), transcribed from the
// ISA text: groupID = %laneid >> 2, threadID_in_group = %laneid % 4, element index i as in a_i/b_i/c_i.

// .f16/.bf16 m16n8k16 A (a0..a7): row = groupID for a0,a1,a4,a5, groupID + 8 otherwise;
// col = threadID_in_group * 2 + (i & 0x1) for a0..a3, + 8 for a4..a7.
mma_coord ptx_a_f16_k16(int lane, int i) {
  const int g = lane >> 2, t = lane % 4;
  const int row = (i < 2 || (i >= 4 && i < 6)) ? g : g + 8;
  const int col = i < 4 ? t * 2 + (i & 1) : t * 2 + (i & 1) + 8;
  return {row, col};
}
// .f16/.bf16 m16n8k16 B (b0..b3): row = threadID_in_group * 2 + (i & 0x1) for b0,b1, + 8 for b2,b3;
// col = groupID.
mma_coord ptx_b_f16_k16(int lane, int i) {
  const int g = lane >> 2, t = lane % 4;
  return {i < 2 ? t * 2 + (i & 1) : t * 2 + (i & 1) + 8, g};
}
// C/D (c0..c3), f32 or s32, both shapes: row = groupID for c0,c1, groupID + 8 for c2,c3;
// col = threadID_in_group * 2 + (i & 0x1).
mma_coord ptx_c(int lane, int i) {
  const int g = lane >> 2, t = lane % 4;
  return {i < 2 ? g : g + 8, t * 2 + (i & 1)};
}
// .s8/.u8 m16n8k32 A (a0..a15): row = groupID for a0..a3 and a8..a11, groupID + 8 for a4..a7 and
// a12..a15; col = threadID_in_group * 4 + (i & 0x3) for a0..a7, + 16 for a8..a15.
mma_coord ptx_a_i8_k32(int lane, int i) {
  const int g = lane >> 2, t = lane % 4;
  const int row = (i < 4 || (i >= 8 && i < 12)) ? g : g + 8;
  const int col = i < 8 ? t * 4 + (i & 3) : t * 4 + (i & 3) + 16;
  return {row, col};
}
// .s8/.u8 m16n8k32 B (b0..b7): row = threadID_in_group * 4 + (i & 0x3) for b0..b3, + 16 for b4..b7;
// col = groupID.
mma_coord ptx_b_i8_k32(int lane, int i) {
  const int g = lane >> 2, t = lane % 4;
  return {i < 4 ? t * 4 + (i & 3) : t * 4 + (i & 3) + 16, g};
}
// .s8/.u8 m16n8k16 A (a0..a7): row = groupID for a0..a3, groupID + 8 for a4..a7;
// col = threadID_in_group * 4 + (i & 0x3).
mma_coord ptx_a_i8_k16(int lane, int i) {
  const int g = lane >> 2, t = lane % 4;
  return {i < 4 ? g : g + 8, t * 4 + (i & 3)};
}
// .s8/.u8 m16n8k16 B (b0..b3): row = threadID_in_group * 4 + i; col = groupID.
mma_coord ptx_b_i8_k16(int lane, int i) {
  const int g = lane >> 2, t = lane % 4;
  return {t * 4 + i, g};
}

// Frag::coord equals the table for every lane and element, and covers its matrix exactly once.
template <class Frag>
void check_layout(mma_coord (*table)(int, int), const char* name) {
  CAPTURE(name);
  REQUIRE(Frag::rows * Frag::cols == 32 * Frag::n_elements);
  REQUIRE(int(sizeof(Frag::r) * 8) == Frag::n_elements * Frag::element_bits);
  std::vector<int> hits(size_t(Frag::rows * Frag::cols), 0);
  for (int lane = 0; lane < 32; ++lane) {
    for (int i = 0; i < Frag::n_elements; ++i) {
      CAPTURE(lane);
      CAPTURE(i);
      const mma_coord got = Frag::coord(lane, i), want = table(lane, i);
      CHECK(got.row == want.row);
      CHECK(got.col == want.col);
      REQUIRE(got.row >= 0);
      REQUIRE(got.row < Frag::rows);
      REQUIRE(got.col >= 0);
      REQUIRE(got.col < Frag::cols);
      ++hits[size_t(got.row * Frag::cols + got.col)];
    }
  }
  for (int h : hits) CHECK(h == 1);
}

TEST_CASE("arch: mma fragment layouts match the PTX ISA tables for every operand of every shape") {
  check_layout<arch::mma_a_f16_16x16>(ptx_a_f16_k16, "A f16/bf16 m16n8k16");
  check_layout<arch::mma_b_f16_16x8>(ptx_b_f16_k16, "B f16/bf16 m16n8k16");
  check_layout<arch::mma_c_f32_16x8>(ptx_c, "C/D f32");
  check_layout<arch::mma_c_s32_16x8>(ptx_c, "C/D s32");
  check_layout<arch::mma_a_i8_16x32>(ptx_a_i8_k32, "A s8/u8 m16n8k32");
  check_layout<arch::mma_b_i8_32x8>(ptx_b_i8_k32, "B s8/u8 m16n8k32");
  check_layout<arch::mma_a_i8_16x16>(ptx_a_i8_k16, "A s8/u8 m16n8k16");
  check_layout<arch::mma_b_i8_16x8>(ptx_b_i8_k16, "B s8/u8 m16n8k16");
}

TEST_CASE("arch: mma fragment element bits: low half / low byte first") {
  arch::mma_a_f16_16x16 a{};
  for (int i = 0; i < 8; ++i) arch::mma_set_element_bits(a, i, 0x1000u + uint32_t(i));
  CHECK(a.r[0] == 0x10011000u);
  CHECK(a.r[3] == 0x10071006u);
  arch::mma_b_i8_32x8 b{};
  for (int i = 0; i < 8; ++i) arch::mma_set_element_bits(b, i, 0xf0u + uint32_t(i));
  CHECK(b.r[0] == 0xf3f2f1f0u);
  CHECK(b.r[1] == 0xf7f6f5f4u);
  for (int i = 0; i < 8; ++i) CHECK(arch::mma_element_bits(b, i) == 0xf0u + uint32_t(i));
}

// ---- The operations under test: fragment types, element encoding and the call.

template <int8_type A, int8_type B, int K>
struct op_i8 {
  using a_frag = std::conditional_t<K == 32, arch::mma_a_i8_16x32, arch::mma_a_i8_16x16>;
  using b_frag = std::conditional_t<K == 32, arch::mma_b_i8_32x8, arch::mma_b_i8_16x8>;
  using acc = int32_t;
  static constexpr int k = K;
  static constexpr bool a_signed = A == int8_type::s8, b_signed = B == int8_type::s8;
  static Q35_DEVICE void run(arch::mma_c_s32_16x8& d, const a_frag& a, const b_frag& b, const arch::mma_c_s32_16x8& c) {
    if constexpr (K == 32)
      arch::mma_m16n8k32_i8<A, B>(d, a, b, c);
    else
      arch::mma_m16n8k16_i8<A, B>(d, a, b, c);
  }
};

struct op_f16 {
  using a_frag = arch::mma_a_f16_16x16;
  using b_frag = arch::mma_b_f16_16x8;
  using acc = float;
  static constexpr int k = 16;
  static Q35_DEVICE void run(arch::mma_c_f32_16x8& d, const a_frag& a, const b_frag& b, const arch::mma_c_f32_16x8& c) {
    arch::mma_m16n8k16_f16(d, a, b, c);
  }
};
struct op_bf16 : op_f16 {
  static Q35_DEVICE void run(arch::mma_c_f32_16x8& d, const a_frag& a, const b_frag& b, const arch::mma_c_f32_16x8& c) {
    arch::mma_m16n8k16_bf16(d, a, b, c);
  }
};

// One warp: loads A (16 x K), B (K x 8) and C (16 x 8), all row-major, into fragments through the
// coord helpers, runs one mma, stores D (16 x 8, row-major). A and B elements are bit patterns.
template <class Op>
struct mma_kernel {
  using acc = typename Op::acc;
  struct params {
    const uint32_t* a;  // [16][K] element bits
    const uint32_t* b;  // [K][8] element bits
    const acc* c;       // [16][8]
    acc* d;             // [16][8]
  };
  struct shared_storage {};
  static constexpr int threads = 32;
  static dim3 grid(const params&) { return dim3(1); }
  Q35_DEVICE void operator()(const params& p, shared_storage&) const {
    using A = typename Op::a_frag;
    using B = typename Op::b_frag;
    using C = arch::mma_c_16x8<acc>;
    const int lane = arch::lane_id();
    A a{};
    B b{};
    C c{}, d{};
    for (int i = 0; i < A::n_elements; ++i) {
      const mma_coord at = A::coord(lane, i);
      arch::mma_set_element_bits(a, i, p.a[at.row * Op::k + at.col]);
    }
    for (int i = 0; i < B::n_elements; ++i) {
      const mma_coord at = B::coord(lane, i);
      arch::mma_set_element_bits(b, i, p.b[at.row * 8 + at.col]);
    }
    for (int i = 0; i < 4; ++i) c.r[i] = p.c[C::coord(lane, i).row * 8 + C::coord(lane, i).col];
    Op::run(d, a, b, c);
    for (int i = 0; i < 4; ++i) p.d[C::coord(lane, i).row * 8 + C::coord(lane, i).col] = d.r[i];
  }
};

// Host encoding of element values as the bits the fragments hold.
uint32_t f16_bits(double v) { return to_bits(from_float<half>(float(v))); }
uint32_t bf16_bits(double v) { return to_bits(from_float<bf16>(float(v))); }
double f16_value(uint32_t b) { return half_bits_to_float(uint16_t(b)); }
double bf16_value(uint32_t b) { return bf16_bits_to_float(uint16_t(b)); }

template <class Op>
std::vector<typename Op::acc> run_mma(const std::vector<uint32_t>& a, const std::vector<uint32_t>& b,
                                      const std::vector<typename Op::acc>& c) {
  auto da = test::to_device(a);
  auto db = test::to_device(b);
  auto dc = test::to_device(c);
  auto dd = test::poisoned<typename Op::acc>(16 * 8);
  Q35_REQUIRE_OK(launch::launch<mma_kernel<Op>>({da.data(), db.data(), dc.data(), dd.data()}));
  return test::to_host(dd);
}

// sigma(r): the column of A's single 1 in row r (distinct rows, spread over all of K).
int sigma(int r, int k) { return (r * 5 + 3) % k; }
// tau(n): the row of B's single 1 in column n.
int tau(int n, int k) { return (n * 3 + 1) % k; }

// D = C + A B with A a selection (row r picks row sigma(r) of B), then with B a selection (column n
// picks column tau(n) of A): exactly the selected elements, which proves both layouts end to end.
template <class Op>
void check_selection(uint32_t (*encode)(double), double lo, double hi) {
  constexpr int k = Op::k;
  using acc = typename Op::acc;
  std::mt19937_64 rng(k * 31 + 7);
  auto val = [&] { return std::floor(lo + double(rng() % uint64_t(hi - lo + 1))); };
  std::vector<double> av(16 * k), bv(k * 8), cv(16 * 8);
  for (auto& x : av) x = val();
  for (auto& x : bv) x = val();
  for (int i = 0; i < 128; ++i) cv[size_t(i)] = double(i % 17) - 8;
  std::vector<acc> c(128);
  for (int i = 0; i < 128; ++i) c[size_t(i)] = acc(cv[size_t(i)]);
  std::vector<uint32_t> a(av.size()), b(bv.size()), sel_a(av.size(), encode(0)), sel_b(bv.size(), encode(0));
  for (size_t i = 0; i < av.size(); ++i) a[i] = encode(av[i]);
  for (size_t i = 0; i < bv.size(); ++i) b[i] = encode(bv[i]);
  for (int r = 0; r < 16; ++r) sel_a[size_t(r * k + sigma(r, k))] = encode(1);
  for (int n = 0; n < 8; ++n) sel_b[size_t(tau(n, k) * 8 + n)] = encode(1);
  const auto d1 = run_mma<Op>(sel_a, b, c);
  const auto d2 = run_mma<Op>(a, sel_b, c);
  for (int r = 0; r < 16; ++r) {
    for (int n = 0; n < 8; ++n) {
      CAPTURE(r);
      CAPTURE(n);
      CHECK(double(d1[size_t(r * 8 + n)]) == cv[size_t(r * 8 + n)] + bv[size_t(sigma(r, k) * 8 + n)]);
      CHECK(double(d2[size_t(r * 8 + n)]) == cv[size_t(r * 8 + n)] + av[size_t(r * k + tau(n, k))]);
    }
  }
}

uint32_t s8_bits(double v) { return uint32_t(uint8_t(int8_t(v))); }
uint32_t u8_bits(double v) { return uint32_t(uint8_t(v)); }

template <int8_type A, int8_type B, int K>
void check_selection_i8() {
  using op = op_i8<A, B, K>;
  // The selection operand holds 0 and 1; the other operand's values must fit its type (and the
  // range [0, 127] has the same bits as s8 and u8).
  if constexpr (op::a_signed && op::b_signed)
    check_selection<op>(s8_bits, -128, 127);
  else if constexpr (!op::a_signed && !op::b_signed)
    check_selection<op>(u8_bits, 0, 255);
  else
    check_selection<op>(u8_bits, 0, 127);
}

TEST_CASE("arch: mma with a selection matrix returns exactly the selected elements (every type)" *
          test::needs_device()) {
  SUBCASE("f16") { check_selection<op_f16>(f16_bits, -64, 64); }
  SUBCASE("bf16") { check_selection<op_bf16>(bf16_bits, -64, 64); }
  SUBCASE("s8 x s8, k32") { check_selection_i8<int8_type::s8, int8_type::s8, 32>(); }
  SUBCASE("s8 x u8, k32") { check_selection_i8<int8_type::s8, int8_type::u8, 32>(); }
  SUBCASE("u8 x s8, k32") { check_selection_i8<int8_type::u8, int8_type::s8, 32>(); }
  SUBCASE("u8 x u8, k32") { check_selection_i8<int8_type::u8, int8_type::u8, 32>(); }
  SUBCASE("s8 x s8, k16") { check_selection_i8<int8_type::s8, int8_type::s8, 16>(); }
  SUBCASE("s8 x u8, k16") { check_selection_i8<int8_type::s8, int8_type::u8, 16>(); }
  SUBCASE("u8 x s8, k16") { check_selection_i8<int8_type::u8, int8_type::s8, 16>(); }
  SUBCASE("u8 x u8, k16") { check_selection_i8<int8_type::u8, int8_type::u8, 16>(); }
}

// Random f16/bf16 inputs against float64. Bound: the products of 16-bit values are exact in float;
// k float additions (and the one adding c) each err by at most 2^-23 of a partial sum's magnitude
// (2^-24 rounding to nearest on the sim; 2^-23 covers truncation on tensor cores), and every partial
// sum is at most S = sum_k |a b| + |c|: |d - exact| <= (k + 1) 2^-23 S.
template <class Op>
void check_random_float(uint32_t (*encode)(double), double (*decode)(uint32_t), uint64_t seed) {
  constexpr int k = Op::k;
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> dist(-2.0, 2.0);
  std::vector<uint32_t> a(16 * k), b(k * 8);
  std::vector<float> c(128);
  for (auto& x : a) x = encode(dist(rng));
  for (auto& x : b) x = encode(dist(rng));
  for (auto& x : c) x = float(dist(rng));
  a[5] = encode(1000.0), b[9] = encode(-1000.0);  // a wide range of magnitudes in one sum
  const auto d = run_mma<Op>(a, b, c);
  for (int r = 0; r < 16; ++r) {
    for (int n = 0; n < 8; ++n) {
      double exact = c[size_t(r * 8 + n)], s = std::fabs(exact);
      for (int kk = 0; kk < k; ++kk) {
        const double p = decode(a[size_t(r * k + kk)]) * decode(b[size_t(kk * 8 + n)]);
        exact += p, s += std::fabs(p);
      }
      const double bound = (k + 1) * std::ldexp(s, -23);
      CAPTURE(r);
      CAPTURE(n);
      CHECK(std::fabs(double(d[size_t(r * 8 + n)]) - exact) <= bound);
    }
  }
}

TEST_CASE("arch: mma f16 and bf16 against float64 within the fp32-accumulation bound" * test::needs_device()) {
  for (uint64_t seed = 1; seed <= 3; ++seed) {
    CAPTURE(seed);
    check_random_float<op_f16>(f16_bits, f16_value, seed);
    check_random_float<op_bf16>(bf16_bits, bf16_value, seed + 100);
  }
}

// Random 8-bit inputs over each operand's full range, exactly against int64.
template <int8_type A, int8_type B, int K>
void check_random_i8(uint64_t seed) {
  using op = op_i8<A, B, K>;
  std::mt19937_64 rng(seed);
  std::vector<uint32_t> a(16 * K), b(K * 8);
  std::vector<int32_t> c(128);
  for (auto& x : a) x = uint32_t(rng() & 0xff);
  for (auto& x : b) x = uint32_t(rng() & 0xff);
  for (auto& x : c) x = int32_t(rng() % 2000001) - 1000000;
  a[0] = 0x80, a[1] = 0xff, b[0] = 0x80, b[8] = 0xff;  // the extremes of both interpretations
  auto value = [](uint32_t bits, bool is_signed) { return is_signed ? int64_t(int8_t(uint8_t(bits))) : int64_t(bits); };
  const auto d = run_mma<op>(a, b, c);
  for (int r = 0; r < 16; ++r) {
    for (int n = 0; n < 8; ++n) {
      int64_t exact = c[size_t(r * 8 + n)];
      for (int kk = 0; kk < K; ++kk)
        exact += value(a[size_t(r * K + kk)], op::a_signed) * value(b[size_t(kk * 8 + n)], op::b_signed);
      CAPTURE(r);
      CAPTURE(n);
      CHECK(int64_t(d[size_t(r * 8 + n)]) == exact);
    }
  }
}

TEST_CASE("arch: mma s8/u8 in all four sign pairs, k32 and k16, exactly against int64" * test::needs_device()) {
  check_random_i8<int8_type::s8, int8_type::s8, 32>(11);
  check_random_i8<int8_type::s8, int8_type::u8, 32>(12);
  check_random_i8<int8_type::u8, int8_type::s8, 32>(13);
  check_random_i8<int8_type::u8, int8_type::u8, 32>(14);
  check_random_i8<int8_type::s8, int8_type::s8, 16>(15);
  check_random_i8<int8_type::s8, int8_type::u8, 16>(16);
  check_random_i8<int8_type::u8, int8_type::s8, 16>(17);
  check_random_i8<int8_type::u8, int8_type::u8, 16>(18);
}

TEST_CASE("arch: mma results do not depend on the sim's thread order" * test::needs_device()) {
  std::vector<float> first;
  test::for_each_order([&] {
    std::mt19937_64 rng(5);
    std::vector<uint32_t> a(256), b(128);
    std::vector<float> c(128, 0.5f);
    for (auto& x : a) x = f16_bits(double(int(rng() % 200)) / 64 - 1.5);
    for (auto& x : b) x = f16_bits(double(int(rng() % 200)) / 64 - 1.5);
    const auto d = run_mma<op_f16>(a, b, c);
    if (first.empty()) first = d;
    CHECK(std::memcmp(first.data(), d.data(), first.size() * sizeof(float)) == 0);
  });
}

// Only lanes 0-15 reach the mma: a partial warp, which the sim reports (undefined on a GPU).
struct partial_mma_kernel {
  struct params {
    float* out;
  };
  struct shared_storage {};
  static constexpr int threads = 32;
  static dim3 grid(const params&) { return dim3(1); }
  Q35_DEVICE void operator()(const params& p, shared_storage&) const {
    if (arch::lane_id() >= 16) return;
    arch::mma_a_f16_16x16 a{};
    arch::mma_b_f16_16x8 b{};
    arch::mma_c_f32_16x8 c{};
    arch::mma_m16n8k16_f16(c, a, b, c);
    p.out[arch::lane_id()] = c.r[0];
  }
};

TEST_CASE("arch: an mma reached by part of a warp is reported by the sim" * doctest::skip(!Q35_BACKEND_SIM)) {
  auto out = test::poisoned<float>(32);
  const status s = launch::launch<partial_mma_kernel>({out.data()});
  REQUIRE_FALSE(s.ok());
  CHECK(s.code() == status_code::kernel_fault);
  INFO(s.message());
  CHECK(s.message().find("partial_mma_kernel") != std::string::npos);
  // The sim names the warp synchronization the mma exchanges its fragments in; which lane reports, and
  // how, depends on the thread order ("returned while lanes 0-15 wait for it in ..." or "... names lanes
  // 16-31 that have already exited").
  CHECK(s.message().find("sync_warp with mask 0xffffffff") != std::string::npos);
}

}  // namespace arch_test_mma
