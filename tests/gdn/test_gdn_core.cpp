// The GDN core entry points (launch::gdn_decode_step, launch::gdn_prefill) on given fp32
// projections, against ref::gdn_core_token with exact inputs: only the core's own roundings enter
// the bound (see test_gdn_layer.cpp for how it is carried), so it is tighter than the layer's.
#include <doctest/doctest.h>

#include <cmath>
#include <string>
#include <vector>

#include "gdn_case.hpp"

namespace {

using namespace q35;

// The worst-case element bound (the chunked form's split tensor-core products: 12.75 n u per
// product, ops/mma_split.hpp) is too loose to see a dropped part product (worst |error| / bound
// 0.001-0.004 with all 6, 0.007-0.009 without a2 b0); the relative RMS error of all outputs of a call
// does. Measured on the sim (rounding to nearest): 2.9-3.6e-7 with all 6 part products (recurrent
// calls alike), 1.5-3.2e-6 without a2 b0, 1.1-2.1e-3 without a1 b0 (which also leaves the element
// bound, by 3-6x). On a GPU the tensor cores' truncating adds raise the floor, so the limit there
// guards the i + j <= 1 products only.
#if Q35_BACKEND_SIM
constexpr double rms_limit = 7.5e-7;
#else
constexpr double rms_limit = 0x1p-17;
#endif

struct core_run {
  int64_t bad = 0;
  double worst_ratio = 0;
  double err2 = 0, want2 = 0;  // sums of squared errors and squared expected values
  double rms_rel() const { return want2 > 0 ? std::sqrt(err2 / want2) : 0.0; }
};

// Feeds n_tokens random projections per sequence (slots 0..n_seqs-1, lengths `lens`) through the
// core in `mode` and checks y against the reference states kept in g.
core_run run_core(test::gdn_case<>& g, const std::vector<int>& lens, launch::gdn_core_mode mode, uint64_t seed) {
  const launch::gdn_shape& s = g.shape;
  std::vector<int32_t> offsets{0}, slots;
  int longest = 0;
  for (size_t i = 0; i < lens.size(); ++i) {
    offsets.push_back(offsets.back() + lens[i]);
    slots.push_back(int32_t(i));
    longest = std::max(longest, lens[i]);
  }
  const int64_t n = offsets.back();
  const std::vector<float> qkv = test::random_floats(size_t(n * s.conv_dim()), seed, -1.5f, 1.5f);
  const std::vector<float> z = test::random_floats(size_t(n * s.value_dim()), seed + 1, -2.0f, 2.0f);
  const std::vector<float> b = test::random_floats(size_t(n * s.n_v_heads), seed + 2, -3.0f, 3.0f);
  const std::vector<float> al = test::random_floats(size_t(n * s.n_v_heads), seed + 3, -3.0f, 3.0f);
  auto d_qkv = test::to_device(qkv), d_z = test::to_device(z), d_b = test::to_device(b), d_al = test::to_device(al);
  auto d_off = test::to_device(offsets), d_slots = test::to_device(slots);
  auto d_y = test::poisoned<float>(size_t(n * s.value_dim()));
  device_buffer<uint8_t> ws;
  Q35_REQUIRE_OK(ws.allocate(launch::gdn_core_workspace_bytes(s, n)));
  launch::gdn_core_args a;
  a.shape = s, a.qkv = d_qkv.data(), a.z = d_z.data(), a.b = d_b.data(), a.alpha = d_al.data();
  a.conv1d = g.d_conv.data(), a.dt_bias = g.d_dt_bias.data(), a.a = g.d_a.data(), a.norm = g.d_norm.data();
  a.batch = {d_off.data(), d_slots.data(), int(lens.size()), n, longest, offsets.data(), slots.data()};
  a.state = g.pool.layer(0), a.y = d_y.data(), a.workspace = ws.data(), a.workspace_bytes = ws.bytes();
  Q35_REQUIRE_OK(mode == launch::gdn_core_mode::recurrent ? launch::gdn_decode_step(a) : launch::gdn_prefill(a));
  const std::vector<float> y = test::to_host(d_y);

  core_run r;
  ref::gdn_dims dims = g.dims;
  dims.chunked_mma = mode != launch::gdn_core_mode::recurrent;
  const auto slice = [](const std::vector<float>& v, int64_t row, int64_t width) {
    ref::bounded o{size_t(width)};
    for (int64_t c = 0; c < width; ++c) o.v[size_t(c)] = double(v[size_t(row * width + c)]);
    return o;
  };
  for (size_t i = 0; i < lens.size(); ++i) {
    ref::gdn_state& st = g.ref_states.try_emplace(int(i), g.dims).first->second;
    for (int64_t row = offsets[i]; row < offsets[i + 1]; ++row) {
      const ref::bounded want =
          ref::gdn_core_token(dims, g.w64, st, slice(qkv, row, s.conv_dim()), slice(z, row, s.value_dim()),
                              slice(b, row, s.n_v_heads), slice(al, row, s.n_v_heads));
      for (int64_t c = 0; c < s.value_dim(); ++c) {
        const double err = std::fabs(double(y[size_t(row * s.value_dim() + c)]) - want.v[size_t(c)]);
        r.err2 += err * err;
        r.want2 += want.v[size_t(c)] * want.v[size_t(c)];
        if (!(err <= want.e[size_t(c)])) ++r.bad;
        r.worst_ratio = std::max(r.worst_ratio, std::isfinite(err) ? err / want.e[size_t(c)] : 1e30);
      }
    }
  }
  return r;
}

void require_close(const core_run& r) {
  INFO("outputs outside the bound: " << r.bad << ", worst |error| / bound = " << r.worst_ratio);
  MESSAGE("worst |error| / bound = " << r.worst_ratio << ", relative RMS error = " << r.rms_rel());
  CHECK(r.bad == 0);
  CHECK(r.rms_rel() <= rms_limit);
}

}  // namespace

TEST_CASE("gdn core: decode step and chunked prefill on given projections, every thread order" * test::needs_device()) {
  test::for_each_order([&] {
    test::gdn_case<> g(2, 4, 64, 64, 3, 17);
    // prefill of 1, 64 and 65 tokens (an empty chunk tail, an exact chunk, one row past it)
    require_close(run_core(g, {1, 64, 65}, launch::gdn_core_mode::chunked, 1));
    // then decode steps of all three sequences
    for (int t = 0; t < 2; ++t)
      require_close(run_core(g, {1, 1, 1}, launch::gdn_core_mode::recurrent, 10 + uint64_t(t)));
    // and a chunked call of 2 + 130 + 0 tokens on the carried states
    require_close(run_core(g, {2, 130, 0}, launch::gdn_core_mode::chunked, 20));
  });
}

TEST_CASE("gdn core: head dim 128, 9B head counts (16, 32), prompt of 300" * test::needs_device()) {
  test::gdn_case<> g(16, 32, 128, 64, 1, 29);
  require_close(run_core(g, {300}, launch::gdn_core_mode::chunked, 3));
  require_close(run_core(g, {1}, launch::gdn_core_mode::recurrent, 4));
}
