// block::reduce at several block sizes, against float64, with storage reused across two reductions.
#include <cmath>

#include "q35/arch/thread.hpp"
#include "q35/block/reduce.hpp"
#include "q35/launch/launch.hpp"
#include "test_util.hpp"

namespace block_test_reduce {

using namespace q35;

// One block per row of n values (strided over Threads); out[row] = {sum, max} of the row.
template <int Threads>
struct block_reduce_kernel {
  using reduce = block::reduce<float, Threads>;
  struct params {
    const float* x;  // [n_rows, n]
    float* out;      // [n_rows, 2]
    int n;
  };
  struct shared_storage {
    typename reduce::storage red;
  };
  static constexpr int threads = Threads;
  static dim3 grid(const params&) { return dim3(5); }
  Q35_DEVICE void operator()(const params& p, shared_storage& s) const {
    const int64_t row = arch::block_rank();
    float sum = 0, mx = -INFINITY;
    for (int i = arch::thread_rank(); i < p.n; i += Threads) {
      sum += p.x[row * p.n + i];
      mx = fmaxf(mx, p.x[row * p.n + i]);
    }
    const float total = reduce::sum(sum, s.red);
    arch::sync_block();  // storage reused below
    const float largest = reduce::max(mx, s.red);
    if (arch::thread_rank() == 0) p.out[row * 2] = total, p.out[row * 2 + 1] = largest;
  }
};

TEST_CASE_TEMPLATE("block: reduce sum and max, storage reused, every thread order" * test::needs_device(), T,
                   std::integral_constant<int, 32>, std::integral_constant<int, 128>, std::integral_constant<int, 256>,
                   std::integral_constant<int, 1024>) {
  constexpr int threads = T::value;
  const int n = 3001;
  auto x = test::random_floats(size_t(5) * n, 40 + threads);
  auto d_x = test::to_device(x);
  test::for_each_order([&] {
    auto d_out = test::poisoned<float>(10);
    Q35_REQUIRE_OK(launch::launch<block_reduce_kernel<threads>>({d_x.data(), d_out.data(), n}));
    auto out = test::to_host(d_out);
    for (int r = 0; r < 5; ++r) {
      double sum = 0;
      float mx = -INFINITY;
      for (int i = 0; i < n; ++i) sum += x[size_t(r * n + i)], mx = std::max(mx, x[size_t(r * n + i)]);
      // fp32 partial sums over <= 3001 terms in [-1, 1]: |error| <= n * eps * max|partial| ~ 3001 * 6e-8 * 60
      CHECK(std::fabs(out[size_t(r * 2)] - sum) <= 1e-2);
      CHECK(out[size_t(r * 2 + 1)] == mx);
    }
  });
}

}  // namespace block_test_reduce
