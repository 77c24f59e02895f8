// warp::top_k against a host stable sort: ties (lower index wins), NaN last, +-inf, element counts
// that are not a multiple of 32, every k up to 32, every lane's slot.
#include <cmath>
#include <cstring>
#include <random>
#include <type_traits>
#include <vector>

#include "q35/arch/thread.hpp"
#include "q35/core/vec.hpp"
#include "q35/launch/launch.hpp"
#include "q35/warp/top_k.hpp"
#include "reference/router_reference.hpp"
#include "test_util.hpp"

// A named namespace: nvcc's generated host code cannot name a kernel declared in an anonymous namespace
// when doctest instantiates it from its own nested anonymous namespace.
namespace q35_test_top_k {

using namespace q35;

// One warp per row: out_ids/out_vals[row, lane] = what lane `lane` got from top_k(row, n, k).
template <int ItemsPerLane>
struct top_k_kernel {
  struct params {
    const float* x;   // [n_rows, n]
    int* out_ids;     // [n_rows, 32]
    float* out_vals;  // [n_rows, 32]
    int n_rows, n, k;
  };
  struct shared_storage {};
  static constexpr int threads = 64;
  static dim3 grid(const params& p) { return dim3(unsigned(ceil_div(p.n_rows, 2))); }
  Q35_DEVICE void operator()(const params& p, shared_storage&) const {
    const int64_t row = arch::block_rank() * 2 + arch::warp_id();
    if (row >= p.n_rows) return;  // whole warps leave together
    const int lane = arch::lane_id();
    float v[ItemsPerLane];
    for (int j = 0; j < ItemsPerLane; ++j) {
      const int i = warp::strided_index(lane, j);
      v[j] = i < p.n ? p.x[row * p.n + i] : 0.0f;  // past n: must be ignored whatever it holds
    }
    const warp::arg_value r = warp::top_k(v, p.n, p.k);
    p.out_ids[row * 32 + lane] = r.index;
    p.out_vals[row * 32 + lane] = r.value;
  }
};

}  // namespace q35_test_top_k

namespace {

using namespace q35;
using q35_test_top_k::top_k_kernel;

// Values with many ties and some non-finite ones.
std::vector<float> tie_heavy(size_t n, uint64_t seed, bool non_finite) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int> d(-6, 6);
  std::vector<float> v(n);
  for (auto& x : v) {
    const int r = d(rng);
    x = float(r) * 0.5f;
    if (non_finite && r == 6) x = std::nanf("");
    if (non_finite && r == -6) x = -INFINITY;
    if (non_finite && r == 5) x = INFINITY;
  }
  return v;
}

template <int ItemsPerLane>
void check_top_k(const std::vector<float>& x, int n_rows, int n, int k) {
  CAPTURE(n);
  CAPTURE(k);
  auto d_x = test::to_device(x);
  test::for_each_order([&] {
    auto ids = test::poisoned<int>(size_t(n_rows) * 32);
    auto vals = test::poisoned<float>(size_t(n_rows) * 32);
    Q35_REQUIRE_OK(launch::launch<top_k_kernel<ItemsPerLane>>({d_x.data(), ids.data(), vals.data(), n_rows, n, k}));
    const auto h_ids = test::to_host(ids);
    const auto h_vals = test::to_host(vals);
    for (int r = 0; r < n_rows; ++r) {
      std::vector<double> row(static_cast<size_t>(n));
      for (int i = 0; i < n; ++i) row[size_t(i)] = x[size_t(r) * n + i];
      const auto order = reference::rank_experts(row.data(), n);
      for (int lane = 0; lane < 32; ++lane) {
        const int id = h_ids[size_t(r) * 32 + lane];
        const float val = h_vals[size_t(r) * 32 + lane];
        if (lane < k) {
          REQUIRE(id == order[size_t(lane)]);
          const float want = x[size_t(r) * n + id];
          CHECK((std::memcmp(&val, &want, 4) == 0 || (std::isnan(val) && std::isnan(want))));
        } else {
          REQUIRE(id == warp::no_index);
          CHECK(std::isnan(val));
        }
      }
    }
  });
}

TEST_CASE_TEMPLATE("warp: top_k matches a stable sort, ties to the lower index" * test::needs_device(), P,
                   std::integral_constant<int, 1>, std::integral_constant<int, 2>, std::integral_constant<int, 8>,
                   std::integral_constant<int, 16>) {
  constexpr int ipl = P::value;
  const int n_rows = 5;  // not a multiple of the 2 rows per block
  for (int n : {32 * ipl, 32 * ipl - 4, ipl == 1 ? 8 : 32 * ipl - 37}) {
    for (int k : {1, 2, 4, 8, 16, 32}) {
      if (k > n) continue;
      for (uint64_t seed = 0; seed < 3; ++seed) {
        check_top_k<ipl>(test::random_floats(size_t(n_rows) * n, 100 + seed * 7 + uint64_t(n + k)), n_rows, n, k);
        check_top_k<ipl>(tie_heavy(size_t(n_rows) * n, 200 + seed * 7 + uint64_t(n + k), false), n_rows, n, k);
      }
    }
  }
}

TEST_CASE("warp: top_k with NaN and +-inf: NaN ranks last, ids stay distinct and in range" * test::needs_device()) {
  const int n_rows = 7, n = 60;
  for (uint64_t seed = 0; seed < 4; ++seed)
    for (int k : {1, 4, 16, 32}) check_top_k<2>(tie_heavy(size_t(n_rows) * n, 300 + seed, true), n_rows, n, k);
  // All NaN: the k lowest indices, in order.
  check_top_k<2>(std::vector<float>(size_t(n_rows) * n, std::nanf("")), n_rows, n, 16);
  // All -inf: the same.
  check_top_k<2>(std::vector<float>(size_t(n_rows) * n, -INFINITY), n_rows, n, 8);
}

TEST_CASE("warp: top_k with k = 0 and with k past n gives sentinels" * test::needs_device()) {
  const auto x = test::random_floats(10, 5);
  auto d_x = test::to_device(x);
  for (int k : {0, 12}) {
    auto ids = test::poisoned<int>(32);
    auto vals = test::poisoned<float>(32);
    Q35_REQUIRE_OK(launch::launch<top_k_kernel<1>>({d_x.data(), ids.data(), vals.data(), 1, 10, k}));
    const auto h = test::to_host(ids);
    for (int lane = 0; lane < 32; ++lane)
      CHECK((lane < std::min(k, 10) ? h[size_t(lane)] != warp::no_index : h[size_t(lane)] == warp::no_index));
  }
}

}  // namespace
