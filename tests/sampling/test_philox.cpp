// ops::philox4x32 against the known-answer vectors of Salmon et al.'s Random123 (kat_vectors), on
// the host and in a kernel; ops::mul_hi_64.
#include <doctest/doctest.h>

#include <cstdint>
#include <vector>

#include "q35/arch/thread.hpp"
#include "q35/launch/launch.hpp"
#include "q35/ops/philox.hpp"
#include "test_util.hpp"

namespace {

using namespace q35;

struct philox_kat {
  ops::philox_words counter;
  uint32_t key0, key1;
  ops::philox_words expected;
};

// philox4x32-10: counter, key -> output.
const philox_kat kats[] = {
    {{{0u, 0u, 0u, 0u}}, 0u, 0u, {{0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u}}},
    {{{0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu}},
     0xffffffffu,
     0xffffffffu,
     {{0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu}}},
    {{{0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u}},
     0xa4093822u,
     0x299f31d0u,
     {{0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u}}},
};

struct philox_probe_kernel {
  static constexpr int threads = 32;
  struct params {
    const philox_kat* in;  // [n]
    uint32_t* out;         // [n, 4]
    int n;
  };
  struct shared_storage {};
  static dim3 grid(const params&) { return dim3(1); }
  Q35_DEVICE void operator()(const params& p, shared_storage&) const {
    const int t = arch::thread_rank();
    if (t >= p.n) return;
    const ops::philox_words r = ops::philox4x32(p.in[t].counter, p.in[t].key0, p.in[t].key1);
    for (int j = 0; j < 4; ++j) p.out[t * 4 + j] = r.w[j];
  }
};

TEST_CASE("philox4x32-10 matches the Random123 known-answer vectors on the host") {
  for (const philox_kat& k : kats) {
    const ops::philox_words r = ops::philox4x32(k.counter, k.key0, k.key1);
    for (int j = 0; j < 4; ++j) CHECK(r.w[j] == k.expected.w[j]);
  }
}

TEST_CASE("philox4x32-10 matches the Random123 known-answer vectors in a kernel" * test::needs_device()) {
  const std::vector<philox_kat> h(std::begin(kats), std::end(kats));
  auto in = test::to_device(h);
  auto out = test::poisoned<uint32_t>(h.size() * 4);
  Q35_REQUIRE_OK(launch::launch<philox_probe_kernel>({in.data(), out.data(), int(h.size())}));
  const auto r = test::to_host(out);
  for (size_t i = 0; i < h.size(); ++i)
    for (int j = 0; j < 4; ++j) CHECK(r[i * 4 + size_t(j)] == h[i].expected.w[j]);
}

TEST_CASE("mul_hi_64 is floor(a b / 2^64)") {
  CHECK(ops::mul_hi_64(0, 12345) == 0);
  CHECK(ops::mul_hi_64(~uint64_t(0), 1) == 0);
  CHECK(ops::mul_hi_64(~uint64_t(0), uint64_t(1) << 40) == (uint64_t(1) << 40) - 1);
  CHECK(ops::mul_hi_64(uint64_t(1) << 63, 10) == 5);
  CHECK(ops::mul_hi_64(uint64_t(3) << 62, uint64_t(1) << 58) == uint64_t(3) << 56);
}

}  // namespace
