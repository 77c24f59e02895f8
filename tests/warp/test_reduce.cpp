// warp::reduce (sum/max/min at every width) and warp::argmax (ties, NaN) against host references.
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>

#include "q35/arch/thread.hpp"
#include "q35/core/vec.hpp"
#include "q35/launch/launch.hpp"
#include "q35/warp/reduce.hpp"
#include "test_util.hpp"

namespace warp_test_reduce {

using namespace q35;

// One warp per row of 32 values; out[row, lane, 0..2] = sum, max, min over the lane's Width-segment.
template <int Width>
struct warp_reduce_kernel {
  struct params {
    const float* x;  // [n_rows, 32]
    float* out;      // [n_rows, 32, 3]
    int n_rows;
  };
  struct shared_storage {};
  static constexpr int threads = 64;
  static dim3 grid(const params& p) { return dim3(unsigned(ceil_div(p.n_rows, 2))); }
  Q35_DEVICE void operator()(const params& p, shared_storage&) const {
    const int64_t row = arch::block_rank() * 2 + arch::warp_id();
    if (row >= p.n_rows) return;  // whole warps leave together
    const int lane = arch::lane_id();
    const float v = p.x[row * 32 + lane];
    float* o = p.out + (row * 32 + lane) * 3;
    o[0] = warp::reduce_sum<Width>(v);
    o[1] = warp::reduce_max<Width>(v);
    o[2] = warp::reduce_min<Width>(v);
  }
};

TEST_CASE_TEMPLATE("warp: reduce sum/max/min over every segment width" * test::needs_device(), W,
                   std::integral_constant<int, 1>, std::integral_constant<int, 2>, std::integral_constant<int, 8>,
                   std::integral_constant<int, 16>, std::integral_constant<int, 32>) {
  constexpr int width = W::value;
  const int n_rows = 33;  // not a multiple of the 2 rows per block
  auto x = test::random_floats(size_t(n_rows) * 32, 20 + width, -100.0f, 100.0f);
  x[5] = std::nanf("");  // max/min ignore a NaN lane; sum propagates it
  auto d_x = test::to_device(x);
  test::for_each_order([&] {
    auto d_out = test::poisoned<float>(size_t(n_rows) * 32 * 3);
    Q35_REQUIRE_OK(launch::launch<warp_reduce_kernel<width>>({d_x.data(), d_out.data(), n_rows}));
    auto out = test::to_host(d_out);
    for (int r = 0; r < n_rows; ++r) {
      for (int lane = 0; lane < 32; ++lane) {
        const int seg = lane / width * width;
        double sum = 0;
        float mx = -INFINITY, mn = INFINITY;
        bool all_nan = true;
        for (int l = seg; l < seg + width; ++l) {
          const float v = x[size_t(r * 32 + l)];
          sum += v;
          if (!std::isnan(v)) mx = std::max(mx, v), mn = std::min(mn, v), all_nan = false;
        }
        const float* o = &out[size_t((r * 32 + lane) * 3)];
        if (std::isnan(sum)) {
          CHECK(std::isnan(o[0]));
        } else {
          // float sum of <= 32 terms of magnitude <= 100: error bound 32 * eps * sum|x|
          CHECK(std::fabs(o[0] - sum) <= 32 * 6e-8 * 100 * width);
        }
        if (all_nan) {
          CHECK(std::isnan(o[1]));
        } else {
          CHECK(o[1] == mx);
          CHECK(o[2] == mn);
        }
        // every lane of the segment holds the same bits
        CHECK(std::memcmp(o, &out[size_t((r * 32 + seg) * 3)], 3 * sizeof(float)) == 0);
      }
    }
  });
}

// out[row] = argmax over 32 lanes, index = lane.
struct argmax_kernel {
  struct params {
    const float* x;  // [n_rows, 32]
    int* index;      // [n_rows]
    float* value;    // [n_rows]
    int n_rows;
  };
  struct shared_storage {};
  static constexpr int threads = 32;
  static dim3 grid(const params& p) { return dim3(unsigned(p.n_rows)); }
  Q35_DEVICE void operator()(const params& p, shared_storage&) const {
    const int64_t row = arch::block_rank();
    const int lane = arch::lane_id();
    const warp::arg_value best = warp::argmax(p.x[row * 32 + lane], lane);
    if (lane == 0) p.index[row] = best.index, p.value[row] = best.value;
  }
};

TEST_CASE("warp: argmax takes the lower index on ties and ranks NaN last" * test::needs_device()) {
  const float nan = std::nanf(""), inf = INFINITY;
  std::vector<std::vector<float>> rows;
  rows.push_back(test::random_floats(32, 30));
  rows.push_back(std::vector<float>(32, 1.0f));  // all tied: lane 0
  {
    std::vector<float> r(32, -1.0f);
    r[9] = r[21] = r[30] = 5.0f;  // tie among 9, 21, 30: 9
    rows.push_back(r);
  }
  {
    std::vector<float> r(32, nan);
    r[17] = -inf;  // the only number wins over NaN
    rows.push_back(r);
  }
  rows.push_back(std::vector<float>(32, nan));  // all NaN: lane 0
  {
    std::vector<float> r = test::random_floats(32, 31);
    r[3] = inf, r[4] = nan, r[0] = nan;
    rows.push_back(r);
  }
  std::vector<float> x;
  for (auto& r : rows) x.insert(x.end(), r.begin(), r.end());
  const int n = int(rows.size());
  auto d_x = test::to_device(x);
  auto d_i = test::poisoned<int>(size_t(n));
  auto d_v = test::poisoned<float>(size_t(n));
  Q35_REQUIRE_OK(launch::launch<argmax_kernel>({d_x.data(), d_i.data(), d_v.data(), n}));
  auto idx = test::to_host(d_i);
  for (int r = 0; r < n; ++r) {
    // reference: first index of the largest non-NaN value; 0 when all are NaN
    int best = -1;
    for (int l = 0; l < 32; ++l) {
      const float v = rows[size_t(r)][size_t(l)];
      if (!std::isnan(v) && (best < 0 || v > rows[size_t(r)][size_t(best)])) best = l;
    }
    if (best < 0) best = 0;
    CAPTURE(r);
    CHECK(idx[size_t(r)] == best);
  }
}

}  // namespace warp_test_reduce
