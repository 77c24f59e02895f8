// launch/launch.hpp: shapes, dynamic shared memory beyond 48 KB, empty grids, and launch errors; an
// error is reported by the call that caused it, never by the next, innocent one. And arch/graph.hpp's
// streams, events and graphs, with the sim's lazy streams and recorded graphs.
#include <algorithm>
#include <cmath>
#include <vector>

#include "fill_kernel.hpp"
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

#if Q35_BACKEND_SIM
TEST_CASE("sim: a block gets the shared memory of the smallest supported GPU (99 KB: sm_86, sm_89)") {
  auto out = test::poisoned<float>(1);
  const int head = int(arch::shared_tail_offset<big_shared_kernel::shared_storage>);  // 16: `total`, padded
  const int fits = (99 * 1024 - head) / 4;
  REQUIRE(launch::shared_bytes<big_shared_kernel>({out.data(), fits, 1}) == 99 * 1024);
  Q35_REQUIRE_OK(launch::launch<big_shared_kernel>({out.data(), fits, 1}));
  double want = 0;
  for (int i = 0; i < fits; ++i) want += i % 7;
  CHECK(test::to_host(out)[0] == float(want));
  // 4 bytes more would fit an A100 or an H100, not an RTX 3090 or 4090
  const status s = launch::launch<big_shared_kernel>({out.data(), fits + 1, 1});
  REQUIRE_FALSE(s.ok());
  CHECK(s.code() == status_code::launch_failed);
  INFO(s.message());
  CHECK(s.message().find("big_shared_kernel") != std::string::npos);
  CHECK(s.message().find(std::to_string(99 * 1024 + 4) + " bytes of shared memory exceed the " +
                         std::to_string(99 * 1024) + "-byte limit") != std::string::npos);
  CHECK(launch::max_shared_bytes() == 99 * 1024);
  // emulating an H100 / H200, it fits
  sim::options o = sim::current_options();
  o.max_shared_bytes = 227 * 1024;
  sim::scoped_options scope(o);
  CHECK(launch::max_shared_bytes() == 227 * 1024);
  Q35_REQUIRE_OK(launch::launch<big_shared_kernel>({out.data(), fits + 1, 1}));
  CHECK(test::to_host(out)[0] == float(want + (fits % 7)));
}
#endif

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
using launch_test::fill_kernel;  // the innocent launch after a failure

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
  // Synchronizing a stream that is being captured is illegal on CUDA (it invalidates the capture), and
  // on the sim: capture fails, and the decoder then runs eagerly.
  const status s = g.capture(stream.get(), [&] {
    Q35_TRY(launch::launch<fill_kernel>({y.data(), 100, 1.0f}, stream.get()));
    return synchronize(stream.get());
  });
  CHECK_FALSE(g.ready());
  check_next_launch_is_clean(s, stream.get());
}

// y[i] += a * x[i] for i < n.
struct axpy_kernel {
  struct params {
    float* y;        // [n]
    const float* x;  // [n]
    int n;
    float a;
  };
  struct shared_storage {};
  static constexpr int threads = 64;
  static dim3 grid(const params& p) { return dim3(unsigned((p.n + threads - 1) / threads)); }
  Q35_DEVICE void operator()(const params& p, shared_storage&) const {
    const int i = int(arch::block_idx().x) * threads + arch::thread_rank();
    if (i < p.n) p.y[i] += p.a * p.x[i];
  }
};

// What the decoder relies on when it replays a decode step: capture runs nothing; a replay runs every
// captured operation again, kernels with the parameters they had when they were launched (a host
// variable changed afterwards does not reach them) and copies reading their source when the replay
// reaches them.
TEST_CASE("graphs: a replay reruns the captured work with the parameters of the capture" * test::needs_device()) {
  const int n = 100;
  owned_stream stream;
  Q35_REQUIRE_OK(stream.create());
  pinned_buffer<float> src;
  Q35_REQUIRE_OK(src.allocate(n));
  device_buffer<float> x, y;
  Q35_REQUIRE_OK(x.allocate(n));
  Q35_REQUIRE_OK(y.allocate(n));
  Q35_REQUIRE_OK(fill_bytes(y.data(), 0, n * 4, stream.get()));
  Q35_REQUIRE_OK(synchronize(stream.get()));
  launch_graph g;
  float a = 2.0f;
  Q35_REQUIRE_OK(g.capture(stream.get(), [&] {
    Q35_TRY(copy(x.data(), src.data(), n * 4, copy_kind::host_to_device, stream.get()));
    Q35_TRY(launch::launch<axpy_kernel>({y.data(), x.data(), n, a}, stream.get()));
    a = 100.0f;  // after the launch: not in the graph
    return status::success();
  }));
  REQUIRE(g.ready());
  Q35_REQUIRE_OK(synchronize(stream.get()));
  CHECK(test::to_host(y) == std::vector<float>(n, 0.0f));  // capture ran nothing
  std::vector<float> want(n, 0.0f);
  for (int r = 0; r < 3; ++r) {
    for (int i = 0; i < n; ++i) src[size_t(i)] = float(r * 1000 + i), want[size_t(i)] += 2.0f * float(r * 1000 + i);
    Q35_REQUIRE_OK(g.replay(stream.get()));
    Q35_REQUIRE_OK(synchronize(stream.get()));
    CHECK(test::to_host(y) == want);
  }
}

// CUDA's thread-local capture mode forbids allocating while a stream is being captured: the call fails
// and so does the capture, and the stream then runs eagerly (the decoder's fallback).
TEST_CASE("graphs: an allocation during capture invalidates it" * test::needs_device()) {
  owned_stream stream;
  Q35_REQUIRE_OK(stream.create());
  auto y = test::poisoned<float>(100);
  launch_graph g;
  void* p = nullptr;
  const status s = g.capture(stream.get(), [&] {
    Q35_TRY(launch::launch<fill_kernel>({y.data(), 100, 1.0f}, stream.get()));
    (void)device_alloc(&p, 1024);  // ignored here: the capture must still fail
    return status::success();
  });
  CHECK(p == nullptr);
  CHECK_FALSE(g.ready());
  check_next_launch_is_clean(s, stream.get());
}

#if !Q35_BACKEND_CUDA
// The sim is stricter than CUDA where work would escape the graph: a launch or copy on another stream
// during capture runs once, at capture, not at each replay, which in a replayed step is a bug.
TEST_CASE("sim graphs: work outside the captured stream invalidates the capture, and names the call") {
  owned_stream stream, other;
  Q35_REQUIRE_OK(stream.create());
  Q35_REQUIRE_OK(other.create());
  auto y = test::poisoned<float>(100);
  struct attempt {
    const char* name;
    std::function<status()> run;
    const char* message;
  };
  float host[4] = {};
  owned_event e;
  launch_graph inner;
  const attempt attempts[] = {
      {"null-stream launch",
       [&] {
         return launch::launch<fill_kernel>({y.data(), 100, 1.0f});
       },
       "a kernel launch on the null stream"},
      {"other-stream launch",
       [&] {
         return launch::launch<fill_kernel>({y.data(), 100, 1.0f}, other.get());
       },
       "a kernel launch on another stream"},
      {"null-stream copy", [&] { return copy(y.data(), host, 16, copy_kind::host_to_device); },
       "a copy on the null stream"},
      {"other-stream fill", [&] { return fill_bytes(y.data(), 0, 16, other.get()); }, "a fill on another stream"},
      {"synchronize", [&] { return synchronize(other.get()); }, "synchronize"},
      {"event record", [&] { return e.record(stream.get()); }, "an event record"},
      {"pinned allocation",
       [&] {
         pinned_buffer<float> b;
         return b.allocate(4);
       },
       "host_pinned_alloc"},
      {"replay", [&] { return inner.replay(stream.get()); }, "a graph replay"},
      {"pageable copy", [&] { return copy(y.data(), host, 16, copy_kind::host_to_device, stream.get()); },
       "a copy from or to pageable host memory"},
  };
  for (const attempt& a : attempts) {
    CAPTURE(a.name);
    launch_graph g;
    status inside = status::success();
    const status s = g.capture(stream.get(), [&] {
      Q35_TRY(launch::launch<fill_kernel>({y.data(), 100, 1.0f}, stream.get()));
      inside = a.run();
      return status::success();  // a caller that ignores the failed call still gets a failed capture
    });
    CHECK_FALSE(inside.ok());
    CHECK(inside.message().find(a.message) != std::string::npos);
    CHECK_FALSE(g.ready());
    CHECK(s.message().find(a.message) != std::string::npos);
  }
  // a free cannot report an error itself: the capture does
  {
    device_buffer<float> freed;
    Q35_REQUIRE_OK(freed.allocate(4));
    launch_graph g;
    const status s = g.capture(stream.get(), [&] {
      freed = device_buffer<float>();
      return status::success();
    });
    CHECK(freed.data() == nullptr);
    CHECK_FALSE(g.ready());
    CHECK(s.message().find("device_free (cudaFree)") != std::string::npos);
  }
  // a failing record() is reported as itself; a nested capture is refused
  launch_graph g;
  CHECK(g.capture(stream.get(), [] { return error(status_code::invalid_argument, "recorded failure"); }).message() ==
        "recorded failure");
  status nested = status::success();
  Q35_REQUIRE_OK(g.capture(stream.get(), [&] {
    launch_graph h;
    nested = h.capture(stream.get(), [] { return status::success(); });
    return status::success();
  }));
  CHECK(nested.message().find("a capture is in progress") != std::string::npos);
  CHECK(g.capture(nullptr, [] { return status::success(); }).message().find("null stream") != std::string::npos);
  check_next_launch_is_clean(error(status_code::launch_failed, "after the attempts"), stream.get());
}

// The fault the decoder's tests inject to reach its eager fallback: the next capture fails at the
// operation asked for (the ones before it are recorded, the call at it returns the error), once.
TEST_CASE("sim graphs: sim_fail_next_capture fails the next capture at the operation it names, once") {
  owned_stream stream;
  Q35_REQUIRE_OK(stream.create());
  auto y = test::poisoned<float>(100);
  auto three = [&] {
    for (int i = 0; i < 3; ++i) Q35_TRY(launch::launch<fill_kernel>({y.data(), 100, float(i)}, stream.get()));
    return status::success();
  };
  launch_graph g;
  sim_fail_next_capture(1);
  int launched = 0;
  const status s = g.capture(stream.get(), [&] {
    for (int i = 0; i < 3; ++i, ++launched) Q35_TRY(launch::launch<fill_kernel>({y.data(), 100, 1.0f}, stream.get()));
    return status::success();
  });
  CHECK(launched == 1);  // the second launch failed
  CHECK_FALSE(g.ready());
  CHECK(s.message().find("a kernel launch (operation 1, failed by sim_fail_next_capture)") != std::string::npos);
  Q35_REQUIRE_OK(g.capture(stream.get(), three));  // spent
  CHECK(g.ready());
  sim_fail_next_capture(3);  // past the capture's last operation: it succeeds, and the fault is spent
  Q35_REQUIRE_OK(g.capture(stream.get(), three));
  sim_fail_next_capture(0);
  sim_fail_next_capture(-1);  // disarmed
  Q35_REQUIRE_OK(g.capture(stream.get(), three));
  check_next_launch_is_clean(error(status_code::launch_failed, "after the injected fault"), stream.get());
}
#endif

// A side stream's copy reaches another stream's kernel through an event, and the host through a query
// or a wait; an event never recorded has completed.
TEST_CASE("streams: a side stream's copy is seen through events" * test::needs_device()) {
  owned_stream work, side;
  Q35_REQUIRE_OK(work.create());
  Q35_REQUIRE_OK(side.create(stream_role::side));
  owned_event never;
  bool done = false;
  Q35_REQUIRE_OK(never.query(done));
  CHECK(done);
  Q35_REQUIRE_OK(never.synchronize());
  pinned_buffer<float> src;
  Q35_REQUIRE_OK(src.allocate(64));
  for (size_t i = 0; i < 64; ++i) src[i] = float(i) + 0.5f;
  auto a = test::poisoned<float>(64), b = test::poisoned<float>(64);
  owned_event copied;
  Q35_REQUIRE_OK(copy(a.data(), src.data(), 64 * 4, copy_kind::host_to_device, side.get()));
  Q35_REQUIRE_OK(copied.record(side.get()));
  Q35_REQUIRE_OK(copied.make_wait(work.get()));
  Q35_REQUIRE_OK(copy(b.data(), a.data(), 64 * 4, copy_kind::device_to_device, work.get()));
  Q35_REQUIRE_OK(synchronize(work.get()));
  CHECK(test::to_host(b) == std::vector<float>(src.data(), src.data() + 64));
  Q35_REQUIRE_OK(copied.synchronize());
  Q35_REQUIRE_OK(copied.query(done));
  CHECK(done);
}

#if !Q35_BACKEND_CUDA
// The sim's lagging side stream: its copies run as late as a GPU could run them, so that a reader who
// does not wait for the event sees the old bytes (what the expert cache's protocol is tested with).
TEST_CASE("sim: a lagging side stream runs its copies only when they must be seen") {
  sim::options o = sim::current_options();
  o.side_stream_lag = 2;
  o.lazy_streams = false;  // the work stream runs at once
  sim::scoped_options scoped(o);
  owned_stream side, work;
  Q35_REQUIRE_OK(side.create(stream_role::side));
  Q35_REQUIRE_OK(work.create());  // a work stream never lags
  device_buffer<int> d;
  Q35_REQUIRE_OK(d.allocate(4));
  int* dst = d.data();
  const std::vector<int> one(4, 1), two(4, 2);
  // what the device memory holds now (a download on the null stream, which waits for no other stream)
  const auto now = [&] {
    std::vector<int> h(4);
    REQUIRE(copy(h.data(), dst, 16, copy_kind::device_to_host).ok());
    return h;
  };
  Q35_REQUIRE_OK(copy(dst, one.data(), 16, copy_kind::host_to_device, work.get()));
  CHECK(now() == one);
  Q35_REQUIRE_OK(copy(dst, two.data(), 16, copy_kind::host_to_device, side.get()));
  CHECK(now() == one);  // queued
  owned_event e;
  Q35_REQUIRE_OK(e.record(side.get()));
  bool done = true;
  Q35_REQUIRE_OK(e.query(done));
  CHECK_FALSE(done);
  Q35_REQUIRE_OK(e.query(done));
  CHECK_FALSE(done);
  CHECK(now() == one);
  Q35_REQUIRE_OK(e.query(done));  // the lag is spent: the copy has run
  CHECK(done);
  CHECK(now() == two);
  // a wait from another stream runs the recorded work (and nothing queued after it); so does synchronize
  Q35_REQUIRE_OK(fill_bytes(dst, 0, 16, side.get()));
  Q35_REQUIRE_OK(e.record(side.get()));
  Q35_REQUIRE_OK(fill_bytes(dst, 0xff, 4, side.get()));
  Q35_REQUIRE_OK(e.make_wait(work.get()));
  CHECK(now() == std::vector<int>(4, 0));
  Q35_REQUIRE_OK(synchronize(side.get()));
  CHECK(now() == std::vector<int>{-1, 0, 0, 0});
}

// Reaches the barrier from part of the block only: the sim reports a kernel_fault.
struct partial_barrier_kernel {
  struct params {
    int* out;
  };
  struct shared_storage {};
  static constexpr int threads = 64;
  static dim3 grid(const params&) { return dim3(1); }
  Q35_DEVICE void operator()(const params& p, shared_storage&) const {
    if (arch::thread_rank() >= 40) return;
    arch::sync_block();
    p.out[arch::thread_rank()] = 1;
  }
};

// The sim's streams are lazy by default (options::lazy_streams): their work runs when the host must see
// it, the latest a GPU may run it; pageable host memory is copied as cudaMemcpyAsync copies it.
TEST_CASE("sim: a lazy stream runs its work only when the host must see it") {
  sim::options o = sim::current_options();
  o.lazy_streams = true;
  sim::scoped_options scoped(o);
  owned_stream s;
  Q35_REQUIRE_OK(s.create());
  device_buffer<float> y;
  Q35_REQUIRE_OK(y.allocate(100));
  pinned_buffer<float> host;
  Q35_REQUIRE_OK(host.allocate(100));
  std::fill(host.data(), host.data() + 100, 0.0f);
  const std::vector<float> threes(100, 3.0f);

  // a launch and a download into pinned memory: nothing has run until the synchronization
  Q35_REQUIRE_OK(launch::launch<fill_kernel>({y.data(), 100, 3.0f}, s.get()));
  Q35_REQUIRE_OK(copy(host.data(), y.data(), 400, copy_kind::device_to_host, s.get()));
  CHECK(y.data()[0] != 3.0f);  // new memory still holds options::fill
  CHECK(host[99] == 0.0f);
  Q35_REQUIRE_OK(synchronize(s.get()));
  CHECK(std::vector<float>(host.data(), host.data() + 100) == threes);

  // an upload from pinned memory reads it when the stream gets there, one from pageable memory when issued
  std::vector<float> pageable(100, 5.0f);
  Q35_REQUIRE_OK(copy(y.data(), pageable.data(), 400, copy_kind::host_to_device, s.get()));
  pageable.assign(100, 6.0f);
  Q35_REQUIRE_OK(copy(y.data() + 50, host.data(), 200, copy_kind::host_to_device, s.get()));
  std::fill(host.data(), host.data() + 100, 7.0f);
  CHECK(y.data()[0] == 3.0f);
  Q35_REQUIRE_OK(synchronize(s.get()));
  CHECK(y.data()[0] == 5.0f);
  CHECK(y.data()[49] == 5.0f);
  CHECK(y.data()[50] == 7.0f);

  // a download into pageable memory returns once it is done, after the work before it
  Q35_REQUIRE_OK(launch::launch<fill_kernel>({y.data(), 100, 8.0f}, s.get()));
  Q35_REQUIRE_OK(copy(pageable.data(), y.data(), 400, copy_kind::device_to_host, s.get()));
  CHECK(pageable == std::vector<float>(100, 8.0f));

  // an event: a query runs the work it marks (no polls on a work stream); a free waits for all work
  Q35_REQUIRE_OK(fill_bytes(y.data(), 0, 400, s.get()));
  owned_event e;
  Q35_REQUIRE_OK(e.record(s.get()));
  Q35_REQUIRE_OK(launch::launch<fill_kernel>({y.data(), 10, 1.0f}, s.get()));
  bool done = false;
  Q35_REQUIRE_OK(e.query(done));
  CHECK(done);
  CHECK(y.data()[0] == 0.0f);
  {
    device_buffer<float> other;
    Q35_REQUIRE_OK(other.allocate(4));
  }  // freed: like cudaFree, it waits for the device
  CHECK(y.data()[0] == 1.0f);

  // an event recorded on a stream that has ended has completed (the stream ran its work when it ended)
  owned_event late;
  {
    owned_stream t;
    Q35_REQUIRE_OK(t.create());
    Q35_REQUIRE_OK(launch::launch<fill_kernel>({y.data(), 100, 4.0f}, t.get()));
    Q35_REQUIRE_OK(late.record(t.get()));
    CHECK(y.data()[99] == 0.0f);  // queued on t
  }
  CHECK(y.data()[99] == 4.0f);
  Q35_REQUIRE_OK(late.make_wait(s.get()));
  Q35_REQUIRE_OK(late.query(done));
  CHECK(done);
  Q35_REQUIRE_OK(late.synchronize());

  // a queued kernel's failure is reported by the next synchronization, once
  auto out = test::poisoned<int>(64);
  Q35_REQUIRE_OK(launch::launch<partial_barrier_kernel>({out.data()}, s.get()));
  const status f = synchronize(s.get());
  CHECK(f.code() == status_code::kernel_fault);
  CHECK(f.message().find("partial_barrier_kernel") != std::string::npos);
  Q35_REQUIRE_OK(synchronize(s.get()));

  // a stream made with lazy_streams off (Q35_SIM_STREAMS=eager) runs its work when it is issued
  o.lazy_streams = false;
  sim::scoped_options eager_scope(o);
  owned_stream eager;
  Q35_REQUIRE_OK(eager.create());
  Q35_REQUIRE_OK(launch::launch<fill_kernel>({y.data(), 10, 2.0f}, eager.get()));
  CHECK(y.data()[9] == 2.0f);
}
#endif

static_assert(!launch::kernel_functor<no_grid>);
static_assert(!launch::kernel_functor<too_many_threads>);
static_assert(launch::kernel_functor<big_shared_kernel>);

}  // namespace launch_test_launch
