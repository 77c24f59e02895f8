// ops::quantize_group_warp (one warp quantizes a 32-element group, a lane per element) against
// quant::quantize_group (one thread, the reference semantics): the same int16 values and group
// record, bit for bit, for ordinary, tiny, huge, zero, NaN and infinite groups.
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "q35/core/dim3.hpp"
#include "q35/launch/launch.hpp"
#include "q35/ops/act16_warp.hpp"
#include "test_util.hpp"

namespace {

using namespace q35;

// Block g quantizes group g with one warp.
struct quantize_warp_kernel {
  static constexpr int threads = warp_size;
  struct params {
    const float* x;  // [n_groups][32]
    int16_t* q;      // [n_groups][32]
    quant::act16_group* groups;
    int n_groups;
  };
  struct shared_storage {};
  static dim3 grid(const params& p) { return dim3(unsigned(p.n_groups)); }
  Q35_DEVICE void operator()(const params& p, shared_storage&) const {
    const int64_t g = arch::block_idx().x;
    ops::quantize_group_warp(p.x[g * 32 + arch::lane_id()], p.q + g * 32, p.groups + g);
  }
};

TEST_CASE("quantize_group_warp equals quant::quantize_group bit for bit" * test::needs_device()) {
  constexpr int n_groups = 9;
  std::vector<float> x = test::random_floats(size_t(n_groups) * 32, 77, -3.0f, 3.0f);
  for (int i = 0; i < 32; ++i) {
    x[size_t(32 + i)] *= 1e-40f;  // group 1: subnormal, the scale underflows to 0
    x[size_t(64 + i)] *= 1e37f;   // group 2: near FLT_MAX
    x[size_t(96 + i)] = 0.0f;     // group 3: zeros
  }
  x[128 + 5] = NAN;                                                                  // group 4: one NaN
  x[160 + 31] = std::numeric_limits<float>::infinity();                              // group 5: an infinity
  x[192 + 0] = -std::numeric_limits<float>::infinity();                              // group 6
  for (int i = 0; i < 32; ++i) x[size_t(224 + i)] = float(i % 3 == 0 ? -32767 : 1);  // group 7: exact ties
  for (int i = 0; i < 32; ++i) x[size_t(256 + i)] = (i & 1) ? 0.5f : -0.25f;         // group 8: halves

  // the reference: quantize_group on the host
  std::vector<uint32_t> want_q(size_t(n_groups) * 16);
  std::vector<quant::act16_group> want_g(n_groups);
  for (int g = 0; g < n_groups; ++g) {
    float v[32];
    uint32_t q[16];
    std::memcpy(v, x.data() + g * 32, sizeof(v));
    quant::quantize_group(v, q, want_g[size_t(g)]);
    std::memcpy(want_q.data() + g * 16, q, sizeof(q));
  }

  auto dx = test::to_device(x);
  test::for_each_order([&] {
    auto dq = test::poisoned<int16_t>(size_t(n_groups) * 32);
    auto dg = test::poisoned<quant::act16_group>(size_t(n_groups));
    Q35_REQUIRE_OK(launch::launch<quantize_warp_kernel>({dx.data(), dq.data(), dg.data(), n_groups}));
    const auto q = test::to_host(dq);
    const auto g = test::to_host(dg);
    for (int k = 0; k < n_groups; ++k) {
      CAPTURE(k);
      CHECK(std::memcmp(q.data() + k * 32, want_q.data() + k * 16, 64) == 0);
      CHECK(std::memcmp(&g[size_t(k)], &want_g[size_t(k)], sizeof(quant::act16_group)) == 0);
    }
  });
}

}  // namespace
