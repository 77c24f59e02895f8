// launch/launch.hpp: shapes, dynamic shared memory beyond 48 KB, empty grids, and launch errors; an
// error is reported by the call that caused it, never by the next, innocent one.
#include "q35/arch/graph.hpp"
#include "q35/arch/thread.hpp"
#include "q35/launch/launch.hpp"
#include "test_util.hpp"

namespace launch_test_launch {

using namespace q35;

// Fills n_floats of dynamic shared memory, then sums them back per block: needs > 48 KB opt-in.
struct big_shared_kernel {
  struct params {
    float* out;  // [n_blocks]
    int n_floats;
    int n_blocks;
  };
  struct shared_storage {
    float total;
  };
  static constexpr int threads = 256;
  static dim3 grid(const params& p) { return dim3(unsigned(p.n_blocks)); }
  static size_t dynamic_shared_bytes(const params& p) { return size_t(p.n_floats) * sizeof(float); }
  Q35_DEVICE void operator()(const params& p, shared_storage& s) const {
    float* buf = arch::shared_tail<float>(s);  // [n_floats]
    for (int i = arch::thread_rank(); i < p.n_floats; i += threads) buf[i] = float(i % 7);
    arch::sync_block();
    if (arch::thread_rank() == 0) {
      s.total = 0;
      for (int i = 0; i < p.n_floats; ++i) s.total += buf[i];
      p.out[arch::block_rank()] = s.total;
    }
  }
};

TEST_CASE("launch: more than 48 KB of dynamic shared memory" * test::needs_device()) {
  const int n = 20000;  // 80 KB
  auto out = test::poisoned<float>(3);
  Q35_REQUIRE_OK(launch::launch<big_shared_kernel>({out.data(), n, 3}));
  double want = 0;
  for (int i = 0; i < n; ++i) want += i % 7;
  for (float v : test::to_host(out)) CHECK(v == float(want));
}

TEST_CASE("launch: an empty grid is a successful no-op" * test::needs_device()) {
  auto out = test::poisoned<float>(1);
  Q35_REQUIRE_OK(launch::launch<big_shared_kernel>({out.data(), 16, 0}));
  CHECK(std::isnan(test::to_host(out)[0]));
}

TEST_CASE("launch: shared memory beyond the device limit is a launch error naming the kernel" * test::needs_device()) {
  auto out = test::poisoned<float>(1);
  status s = launch::launch<big_shared_kernel>({out.data(), 300 * 1024 / 4, 1});
  REQUIRE_FALSE(s.ok());
  CHECK(s.code() == status_code::launch_failed);
  INFO(s.message());
  CHECK(s.message().find("big_shared_kernel") != std::string::npos);
}

// A 2-D block whose volume does not match K::threads.
struct wrong_block_kernel {
  struct params {
    int* out;
  };
  struct shared_storage {};
  static constexpr int threads = 64;
  static dim3 grid(const params&) { return dim3(1); }
  static dim3 block(const params&) { return dim3(16, 8); }
  Q35_DEVICE void operator()(const params& p, shared_storage&) const { p.out[arch::thread_rank()] = 1; }
};

TEST_CASE("launch: a block shape that does not hold K::threads is rejected before launch") {
  int dummy = 0;
  status s = launch::launch<wrong_block_kernel>({&dummy});
  REQUIRE_FALSE(s.ok());
  CHECK(s.message().find("block shape 16x8x1 does not hold K::threads = 64") != std::string::npos);
}

struct no_grid {
  struct params {};
  struct shared_storage {};
  static constexpr int threads = 32;
};
struct too_many_threads {
  struct params {};
  struct shared_storage {};
  static constexpr int threads = 2048;
  static dim3 grid(const params&) { return dim3(1); }
};

// The kernel contract concept rejects incomplete functors (checked when this file compiles).
// y[i] = v for i < n: the innocent launch after a failure.
struct fill_kernel {
  struct params {
    float* y;  // [n]
    int n;
    float v;
  };
  struct shared_storage {};
  static constexpr int threads = 64;
  static dim3 grid(const params& p) { return dim3(unsigned((p.n + threads - 1) / threads)); }
  Q35_DEVICE void operator()(const params& p, shared_storage&) const {
    const int i = int(arch::block_idx().x) * threads + arch::thread_rank();
    if (i < p.n) p.y[i] = p.v;
  }
};

// A launch after `failed` (a status that must not be ok) succeeds and writes its values.
void check_next_launch_is_clean(const status& failed, stream_t stream = nullptr) {
  INFO(failed.message());
  CHECK_FALSE(failed.ok());
  auto y = test::poisoned<float>(100);
  const status s = launch::launch<fill_kernel>({y.data(), 100, 2.5f}, stream);
  INFO(s.message());
  REQUIRE(s.ok());
  Q35_REQUIRE_OK(synchronize(stream));
  for (float v : test::to_host(y)) CHECK(v == 2.5f);
}

// On CUDA a failed runtime call also leaves its error as the thread's "last error"; a launch that
// checked cudaGetLastError() reported it as its own ("out of memory" for a fill kernel). These fail
// on a GPU without the fix (the sim has no such state: there they check the statuses only).
TEST_CASE("launch: a failed allocation is not reported by the next launch" * test::needs_device()) {
  void* p = nullptr;
  const status s = device_alloc(&p, size_t(1) << 50);  // 1 PiB
  CHECK(s.code() == status_code::out_of_memory);
  CHECK(p == nullptr);
  check_next_launch_is_clean(s);
}

TEST_CASE("launch: a launch over the shared-memory limit is not reported by the next launch" * test::needs_device()) {
  auto out = test::poisoned<float>(1);
  const status s = launch::launch<big_shared_kernel>({out.data(), 300 * 1024 / 4, 1});
  CHECK(s.message().find("big_shared_kernel") != std::string::npos);
  check_next_launch_is_clean(s);
}

TEST_CASE("launch: after a failed graph capture the same stream runs eagerly" * test::needs_device()) {
  owned_stream stream;
  Q35_REQUIRE_OK(stream.create());
  auto y = test::poisoned<float>(100);
  launch_graph g;
  // Synchronizing a stream that is being captured is illegal on CUDA (it invalidates the capture);
  // the sim has no graphs at all. Either way capture fails, and the decoder then runs eagerly.
  const status s = g.capture(stream.get(), [&] {
    Q35_TRY(launch::launch<fill_kernel>({y.data(), 100, 1.0f}, stream.get()));
    return synchronize(stream.get());
  });
  CHECK_FALSE(g.ready());
  check_next_launch_is_clean(s, stream.get());
}

static_assert(!launch::kernel_functor<no_grid>);
static_assert(!launch::kernel_functor<too_many_threads>);
static_assert(launch::kernel_functor<big_shared_kernel>);

}  // namespace launch_test_launch
