// Expert load statistics: per-layer device histograms the router adds to across launches, read,
// summarised and reset from the host, against a host count of the returned ids.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "ops/router_fixture.hpp"
#include "q35/launch/expert_load.hpp"
#include "q35/launch/router.hpp"
#include "test_util.hpp"

namespace {

using namespace q35;

TEST_CASE("expert_load: summary of a host histogram") {
  const std::vector<uint64_t> c = {5, 2, 9, 2, 7};
  const auto s = launch::summarize(c);
  CHECK(s.total == 25);
  CHECK(s.least_used == 1);  // 2 selections, lower index of the tie
  CHECK(s.least_count == 2);
  CHECK(s.most_used == 2);
  CHECK(s.most_count == 9);
  CHECK(s.mean == doctest::Approx(5.0));
  // population variance: (0 + 9 + 16 + 9 + 4) / 5 = 7.6
  CHECK(s.stddev == doctest::Approx(std::sqrt(7.6)));
  CHECK(launch::summarize({}).least_used == -1);
}

// Routes `c` with the histogram of `layer`, returns the ids.
template <class Traits>
std::vector<int32_t> route_counted(const test::router_case& c, launch::expert_load& load, int layer) {
  auto d_x = test::to_device(c.x);
  auto d_w = test::to_device(c.w);
  auto ids = test::poisoned<int32_t>(size_t(c.n_tokens) * size_t(c.k));
  auto w = test::poisoned<float>(size_t(c.n_tokens) * size_t(c.k));
  auto k_used = test::poisoned<int32_t>(size_t(c.n_tokens));
  launch::router_workspace ws;
  Q35_REQUIRE_OK(ws.allocate(c.n_tokens, c.n_experts));
  launch::router_args<float> a;
  a.n_tokens = c.n_tokens, a.n_embd = c.n_embd, a.n_experts = c.n_experts, a.n_experts_used = c.k;
  a.x = d_x.data(), a.w_router = d_w.data(), a.ids = ids.data(), a.weights = w.data();
  a.maybe_k_used = k_used.data();
  a.maybe_expert_counts = load.counts(layer);
  a.workspace = ws.view();
  a.route = c.route;
  Q35_REQUIRE_OK(launch::router<Traits>(a));
  return test::to_host(ids);
}

TEST_CASE("expert_load: the histogram accumulates across launches, per layer, and resets" * test::needs_device()) {
  using T = test::router_traits<60, 4>;
  launch::expert_load load;
  Q35_REQUIRE_OK(load.allocate(3, 60));
  std::vector<uint64_t> want(60, 0);
  auto count = [&](const std::vector<int32_t>& ids) {
    for (int32_t id : ids)
      if (id >= 0) ++want[size_t(id)];
  };
  test::for_each_order([&] {
    count(route_counted<T>(test::make_case(37, 32, 60, 4, 11, true, false), load, 1));
    count(route_counted<T>(test::make_case(5, 32, 60, 4, 12, false, false), load, 1));
    auto adaptive = test::make_case(9, 32, 60, 4, 13, true, false);
    adaptive.route.adaptive = true;  // fewer selections per token: only those are counted
    count(route_counted<T>(adaptive, load, 1));
  });
  std::vector<uint64_t> got, other;
  Q35_REQUIRE_OK(load.read(1, got));
  CHECK(got == want);
  Q35_REQUIRE_OK(load.read(0, other));
  CHECK(other == std::vector<uint64_t>(60, 0));  // layer 0 untouched
  Q35_REQUIRE_OK(load.read(2, other));
  CHECK(other == std::vector<uint64_t>(60, 0));
  std::vector<std::vector<uint64_t>> all;  // every layer in one read
  Q35_REQUIRE_OK(load.read_all(all));
  CHECK(all == std::vector<std::vector<uint64_t>>{std::vector<uint64_t>(60, 0), want, std::vector<uint64_t>(60, 0)});

  // The device histogram's summary against statistics of the host count, computed independently of
  // summarize(): first minimum / maximum by std::min_element / max_element, and the variance exactly
  // in integers, var = (n * sum c^2 - (sum c)^2) / n^2. summarize() works in doubles: each of the 60
  // squared deviations is within a few ulp, so the standard deviation is within 1e-12 relative.
  launch::expert_load_summary s;
  Q35_REQUIRE_OK(load.summary(1, s));
  const uint64_t n = want.size();
  uint64_t total = 0, sum_sq = 0;
  for (uint64_t c : want) total += c, sum_sq += c * c;
  const auto least = std::min_element(want.begin(), want.end());
  const auto most = std::max_element(want.begin(), want.end());
  const double want_stddev = std::sqrt(double(n * sum_sq - total * total)) / double(n);
  REQUIRE(total > 0);
  CHECK(s.total == total);
  CHECK(s.least_used == int(least - want.begin()));
  CHECK(s.least_count == *least);
  CHECK(s.most_used == int(most - want.begin()));
  CHECK(s.most_count == *most);
  CHECK(s.mean == doctest::Approx(double(total) / double(n)).epsilon(1e-15));
  CHECK(s.stddev == doctest::Approx(want_stddev).epsilon(1e-12));
  CHECK(want_stddev > 0);

  Q35_REQUIRE_OK(load.reset(1));
  Q35_REQUIRE_OK(load.read(1, got));
  CHECK(got == std::vector<uint64_t>(60, 0));
  CHECK_FALSE(load.read(3, got).ok());
}

#if Q35_BACKEND_SIM
// The router's last block of a token tile reads the logits of every block of the tile through
// load_coherent after their fences; in the sim's delay_stores mode a block's logits reach it only
// through that block's fence, so a missing fence would change the ids. Same ids and histogram as
// the default mode (whose ids test_router.cpp checks against the float64 reference).
TEST_CASE("expert_load: routing with delayed store visibility gives the same ids and counts") {
  using T = test::router_traits<60, 4>;
  const auto c = test::make_case(37, 32, 60, 4, 21, true, false);
  launch::expert_load load;
  Q35_REQUIRE_OK(load.allocate(2, 60));
  const std::vector<int32_t> ids = route_counted<T>(c, load, 0);
  sim::options o = sim::current_options();
  o.delay_stores = true;
  sim::scoped_options delay(o);
  CHECK(route_counted<T>(c, load, 1) == ids);
  std::vector<uint64_t> plain, delayed;
  Q35_REQUIRE_OK(load.read(0, plain));
  Q35_REQUIRE_OK(load.read(1, delayed));
  CHECK(delayed == plain);
}
#endif

}  // namespace
