// The sim backend's execution model: indices, barriers, shared memory, orders, workers, and the
// misuse it must report (partial barriers, partial or disagreeing warp collectives, deadlocks).
#include <algorithm>
#include <chrono>
#include <cstring>
#include <numeric>

#include "q35/arch/shuffle.hpp"
#include "q35/arch/thread.hpp"
#include "q35/arch/vector_load.hpp"
#include "q35/launch/launch.hpp"
#include "q35/warp/reduce.hpp"
#include "test_util.hpp"

#if Q35_BACKEND_SIM
#include "q35/sim/options.hpp"
#endif

namespace sim_test_executor {

using namespace q35;

// Writes every thread's global coordinates; block shape bx x by x bz, grid gx x gy x gz.
struct coords_kernel {
  struct params {
    int* out;  // [n_threads_total, 6]: thread x,y,z, block x,y,z by linear global id
    dim3 grid_shape, block_shape;
  };
  struct shared_storage {};
  static constexpr int threads = 64;
  static dim3 grid(const params& p) { return p.grid_shape; }
  static dim3 block(const params& p) { return p.block_shape; }
  Q35_DEVICE void operator()(const params& p, shared_storage&) const {
    const dim3 t = arch::thread_idx(), b = arch::block_idx();
    const int64_t gid = arch::block_rank() * arch::block_threads() + arch::thread_rank();
    int* o = p.out + gid * 6;
    o[0] = int(t.x), o[1] = int(t.y), o[2] = int(t.z), o[3] = int(b.x), o[4] = int(b.y), o[5] = int(b.z);
  }
};

TEST_CASE("sim: 1-3D grids and blocks give every thread its indices" * test::needs_device()) {
  struct shape {
    dim3 g, b;
  };
  const shape shapes[] = {{dim3(3), dim3(64)}, {dim3(2, 3), dim3(16, 4)}, {dim3(2, 2, 2), dim3(4, 4, 4)}};
  for (const auto& s : shapes) {
    const int64_t n = volume(s.g) * 64;
    auto out = test::poisoned<int>(size_t(n * 6));
    Q35_REQUIRE_OK(launch::launch<coords_kernel>({out.data(), s.g, s.b}));
    auto h = test::to_host(out);
    for (int64_t gid = 0; gid < n; ++gid) {
      const int64_t blk = gid / 64, r = gid % 64;
      const int* o = &h[size_t(gid * 6)];
      CHECK(o[0] == r % s.b.x);
      CHECK(o[1] == r / s.b.x % s.b.y);
      CHECK(o[2] == r / (s.b.x * s.b.y));
      CHECK(o[3] == blk % s.g.x);
      CHECK(o[4] == blk / s.g.x % s.g.y);
      CHECK(o[5] == blk / (s.g.x * s.g.y));
    }
  }
}

// Reverses 256 values through shared memory; `with_barrier` false is the classic forgotten barrier.
template <bool WithBarrier>
struct reverse_kernel {
  struct params {
    const float* in;  // [256]
    float* out;       // [256]
  };
  struct shared_storage {
    float v[256];
  };
  static constexpr int threads = 256;
  static dim3 grid(const params&) { return dim3(1); }
  Q35_DEVICE void operator()(const params& p, shared_storage& s) const {
    const int t = arch::thread_rank();
    s.v[t] = p.in[t];
    if constexpr (WithBarrier) arch::sync_block();
    p.out[t] = s.v[255 - t];
  }
};

template <bool WithBarrier>
std::vector<float> run_reverse(const std::vector<float>& in) {
  auto d_in = test::to_device(in);
  auto d_out = test::poisoned<float>(256);
  Q35_REQUIRE_OK(launch::launch<reverse_kernel<WithBarrier>>({d_in.data(), d_out.data()}));
  return test::to_host(d_out);
}

TEST_CASE("sim: a barrier orders shared-memory writes before reads under every thread order" * test::needs_device()) {
  const auto in = test::random_floats(256, 1);
  test::for_each_order([&] {
    auto out = run_reverse<true>(in);
    for (int i = 0; i < 256; ++i) REQUIRE(out[size_t(i)] == in[size_t(255 - i)]);
  });
}

#if Q35_BACKEND_SIM

sim::options with_order(sim::thread_order o, uint64_t seed = 1) {
  sim::options opt = sim::current_options();
  opt.order = o;
  opt.seed = seed;
  return opt;
}

// (Skipped under ThreadSanitizer, where this kernel's race is reported and stops the run: the
// sim.race_check tests, tests/sim/race_demo.cpp, check that report.)
TEST_CASE("sim: a missing barrier gives wrong, order-dependent results instead of passing by luck" *
          doctest::skip(sim::race::enabled)) {
  const auto in = test::random_floats(256, 2);
  int wrong_orders = 0;
  std::vector<std::vector<float>> results;
  for (auto o : {sim::thread_order::forward, sim::thread_order::reverse, sim::thread_order::shuffled}) {
    sim::scoped_options scope(with_order(o));
    auto out = run_reverse<false>(in);
    bool ok = true;
    for (int i = 0; i < 256; ++i) ok = ok && out[size_t(i)] == in[size_t(255 - i)];
    wrong_orders += !ok;
    results.push_back(out);
  }
  // Forward order: thread t reads s.v[255 - t] before thread 255 - t wrote it (t < 128).
  CHECK(wrong_orders >= 2);
  CHECK(std::memcmp(results[0].data(), results[1].data(), 256 * sizeof(float)) != 0);
}

// Returns early on some threads and then waits at a barrier: a partial barrier.
struct early_return_kernel {
  struct params {
    int* out;
  };
  struct shared_storage {};
  static constexpr int threads = 64;
  static dim3 grid(const params&) { return dim3(2); }
  Q35_DEVICE void operator()(const params& p, shared_storage&) const {
    if (arch::block_idx().x == 1 && arch::thread_rank() >= 40) return;
    arch::sync_block();
    p.out[arch::thread_rank()] = 1;
  }
};

TEST_CASE("sim: a barrier reached by part of the block is an error naming kernel, block and thread") {
  auto out = test::poisoned<int>(64);
  status s = launch::launch<early_return_kernel>({out.data()});
  REQUIRE_FALSE(s.ok());
  CHECK(s.code() == status_code::kernel_fault);
  INFO(s.message());
  CHECK(s.message().find("early_return_kernel") != std::string::npos);
  CHECK(s.message().find("block (1,0,0)") != std::string::npos);
  CHECK(s.message().find("sync_block() reached by 40 of 64 threads") != std::string::npos);
  CHECK(s.message().find("thread (") != std::string::npos);
}

// Lanes 0-15 shuffle with a full mask while lanes 16-31 go to a barrier: they never meet.
struct divergent_collective_kernel {
  struct params {
    float* out;
  };
  struct shared_storage {};
  static constexpr int threads = 32;
  static dim3 grid(const params&) { return dim3(1); }
  Q35_DEVICE void operator()(const params& p, shared_storage&) const {
    float v = float(arch::lane_id());
    if (arch::lane_id() < 16)
      v = arch::shfl_xor(v, 1);
    else
      arch::sync_block();
    p.out[arch::lane_id()] = v;
  }
};

TEST_CASE("sim: a warp collective reached by part of the warp is reported as a deadlock") {
  auto out = test::poisoned<float>(32);
  status s = launch::launch<divergent_collective_kernel>({out.data()});
  REQUIRE_FALSE(s.ok());
  INFO(s.message());
  CHECK(s.message().find("deadlock") != std::string::npos);
  CHECK(s.message().find("divergent_collective_kernel") != std::string::npos);
  CHECK(
      s.message().find("shfl_xor with mask 0xffffffff reached by lanes 0-15 only; lanes 16-31 wait at sync_block()") !=
      std::string::npos);
}

// Lanes >= 24 return; the rest reduce over a full mask that still names the exited lanes.
struct exited_lane_kernel {
  struct params {
    float* out;
  };
  struct shared_storage {};
  static constexpr int threads = 32;
  static dim3 grid(const params&) { return dim3(1); }
  Q35_DEVICE void operator()(const params& p, shared_storage&) const {
    if (arch::lane_id() >= 24) return;
    p.out[arch::lane_id()] = warp::reduce_sum(1.0f);
  }
};

TEST_CASE("sim: a collective whose mask names an exited lane is an error under every order") {
  for (auto o : {sim::thread_order::forward, sim::thread_order::reverse, sim::thread_order::shuffled}) {
    sim::scoped_options scope(with_order(o));
    auto out = test::poisoned<float>(32);
    status s = launch::launch<exited_lane_kernel>({out.data()});
    REQUIRE_FALSE(s.ok());
    INFO(s.message());
    const bool named = s.message().find("already exited") != std::string::npos ||
                       s.message().find("returned while lanes") != std::string::npos;
    CHECK(named);
    CHECK(s.message().find("exited_lane_kernel") != std::string::npos);
  }
}

// Misuse cases of the mask itself, picked by p.mode.
struct mask_misuse_kernel {
  struct params {
    int mode;  // 0: mask omits the caller, 1: shfl reads a lane outside the mask, 2: lanes disagree on the kind
    float* out;
  };
  struct shared_storage {};
  static constexpr int threads = 32;
  static dim3 grid(const params&) { return dim3(1); }
  Q35_DEVICE void operator()(const params& p, shared_storage&) const {
    const int lane = arch::lane_id();
    float v = float(lane);
    if (p.mode == 0 && lane == 5) v = arch::shfl_xor(v, 1, 32, 0x0000000fu);
    if (p.mode == 1 && lane < 16) v = arch::shfl_idx(v, 20, 32, 0x0000ffffu);
    if (p.mode == 2) v = lane < 16 ? arch::shfl_xor(v, 1) : arch::shfl_down(v, 1);
    p.out[lane] = v;
  }
};

TEST_CASE("sim: collective masks that do not name the caller, inactive source lanes and disagreeing lanes fail") {
  const char* expected[] = {"does not name the calling lane", "reads lane 20, which is not in mask 0xffff",
                            "the lanes of a warp disagree on the collective"};
  for (int mode = 0; mode < 3; ++mode) {
    CAPTURE(mode);
    auto out = test::poisoned<float>(32);
    status s = launch::launch<mask_misuse_kernel>({mode, out.data()});
    REQUIRE_FALSE(s.ok());
    INFO(s.message());
    CHECK(s.message().find(expected[mode]) != std::string::npos);
    CHECK(s.message().find("mask_misuse_kernel: block (0,0,0) thread (") != std::string::npos);
  }
}

// Warp 0 calls sync_block() three times, warp 1 twice. Barriers match by count, as on the GPU, so
// warp 1's second barrier pairs with warp 0's second, and warp 0's third waits for threads that returned.
struct double_barrier_kernel {
  struct params {
    int* out;
  };
  struct shared_storage {};
  static constexpr int threads = 64;
  static dim3 grid(const params&) { return dim3(1); }
  Q35_DEVICE void operator()(const params& p, shared_storage&) const {
    arch::sync_block();
    if (arch::warp_id() == 1) {
      arch::sync_block();
    } else {
      arch::sync_warp();
      arch::shfl_xor(1, 1, 32, 0xffffffffu);
      arch::sync_block();
      arch::sync_block();
    }
    p.out[arch::thread_rank()] = 1;
  }
};

TEST_CASE("sim: mismatched barriers are reported, never hang") {
  auto out = test::poisoned<int>(64);
  status s = launch::launch<double_barrier_kernel>({out.data()});
  REQUIRE_FALSE(s.ok());
  INFO(s.message());
  CHECK(s.message().find("double_barrier_kernel: block (0,0,0) thread (0,0,0)") != std::string::npos);
  CHECK(s.message().find("sync_block() reached by 32 of 64 threads; the others had returned") != std::string::npos);
}

// Throws through a checked access: a host exception inside a kernel becomes a kernel_fault status.
struct misaligned_kernel {
  struct params {
    const float* in;
    float* out;
  };
  struct shared_storage {};
  static constexpr int threads = 32;
  static dim3 grid(const params&) { return dim3(1); }
  Q35_DEVICE void operator()(const params& p, shared_storage&) const {
    auto v = arch::load_16(p.in + 1);
    p.out[arch::lane_id()] = v[0];
  }
};

TEST_CASE("sim: a misaligned 128-bit access is reported as a kernel fault") {
  auto in = test::to_device(std::vector<float>(64, 1.0f));
  auto out = test::poisoned<float>(32);
  status s = launch::launch<misaligned_kernel>({in.data(), out.data()});
  REQUIRE_FALSE(s.ok());
  CHECK(s.code() == status_code::kernel_fault);
  CHECK(s.message().find("not 16-byte aligned") != std::string::npos);
}

// Shared memory starts poisoned (options::fill, 0xff by default: NaN) for every block, so a read
// before any write is visible.
struct read_uninitialised_kernel {
  struct params {
    float* out;
  };
  struct shared_storage {
    float v[32];
  };
  static constexpr int threads = 32;
  static dim3 grid(const params&) { return dim3(3); }
  Q35_DEVICE void operator()(const params& p, shared_storage& s) const {
    const int t = arch::thread_rank();
    p.out[arch::block_rank() * 32 + t] = s.v[t];
    arch::sync_block();
    s.v[t] = 1.0f;  // the next block must not see this
  }
};

TEST_CASE("sim: shared memory is poisoned at the start of every block") {
  auto out = test::poisoned<float>(96);
  Q35_REQUIRE_OK(fill_bytes(out.data(), 0, out.bytes()));
  sim::options o = sim::current_options();
  o.fill = 0xff;
  {
    sim::scoped_options so(o);
    Q35_REQUIRE_OK(launch::launch<read_uninitialised_kernel>({out.data()}));
  }
  for (float v : test::to_host(out)) CHECK(std::isnan(v));
  o.fill = 0x3c;
  sim::scoped_options so(o);
  Q35_REQUIRE_OK(launch::launch<read_uninitialised_kernel>({out.data()}));
  uint32_t want = 0x3c3c3c3c;
  float w;
  std::memcpy(&w, &want, sizeof w);
  for (float v : test::to_host(out)) CHECK(v == w);
}

// Warp-per-token top-4 of 64 logits: 4 rounds of warp argmax, the sim's speed benchmark.
struct top4_of_64_kernel {
  struct params {
    const float* logits;  // [n_tokens, 64]
    int* ids;             // [n_tokens, 4]
    int n_tokens;
  };
  struct shared_storage {};
  static constexpr int threads = 128;  // 4 warps, one token each
  static dim3 grid(const params& p) { return dim3(unsigned((p.n_tokens + 3) / 4)); }
  Q35_DEVICE void operator()(const params& p, shared_storage&) const {
    const int token = int(arch::block_idx().x) * 4 + arch::warp_id();
    if (token >= p.n_tokens) return;  // whole warps leave together
    const int lane = arch::lane_id();
    float a = p.logits[token * 64 + lane], b = p.logits[token * 64 + 32 + lane];
    for (int k = 0; k < 4; ++k) {
      const warp::arg_value best =
          warp::precedes({a, lane}, {b, lane + 32}) ? warp::argmax(a, lane) : warp::argmax(b, lane + 32);
      if (lane == 0) p.ids[token * 4 + k] = best.index;
      if (best.index == lane) a = -INFINITY;
      if (best.index == lane + 32) b = -INFINITY;
    }
  }
};

// Correctness only: a wall-clock bound would be flaky on a shared CI machine (CI runs this binary a
// second time on two workers of two cores). The time is printed for whoever watches sim speed.
TEST_CASE("sim: warp-per-token top-4 of 64 over 4096 tokens") {
  const int n = 4096;
  auto logits = test::random_floats(size_t(n) * 64, 3);
  auto d_logits = test::to_device(logits);
  auto d_ids = test::poisoned<int>(size_t(n) * 4);
  const auto t0 = std::chrono::steady_clock::now();
  Q35_REQUIRE_OK(launch::launch<top4_of_64_kernel>({d_logits.data(), d_ids.data(), n}));
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  MESSAGE("top-4 of 64, 4096 tokens on sim: " << seconds * 1e3 << " ms (informational, not asserted)");
  auto ids = test::to_host(d_ids);
  for (int t = 0; t < n; ++t) {
    std::vector<int> idx(64);
    std::iota(idx.begin(), idx.end(), 0);
    std::stable_sort(idx.begin(), idx.end(),
                     [&](int x, int y) { return logits[size_t(t * 64 + x)] > logits[size_t(t * 64 + y)]; });
    for (int k = 0; k < 4; ++k) REQUIRE(ids[size_t(t * 4 + k)] == idx[size_t(k)]);
  }
}

TEST_CASE("sim: results do not depend on the number of worker threads or the order") {
  const int n = 1000;
  auto logits = test::random_floats(size_t(n) * 64, 4);
  auto d_logits = test::to_device(logits);
  std::vector<std::vector<int>> results;
  for (int workers : {1, 2}) {
    for (auto o : {sim::thread_order::forward, sim::thread_order::shuffled}) {
      sim::options opt = with_order(o, 99);
      opt.workers = workers;
      sim::scoped_options scope(opt);
      auto d_ids = test::poisoned<int>(size_t(n) * 4);
      Q35_REQUIRE_OK(launch::launch<top4_of_64_kernel>({d_logits.data(), d_ids.data(), n}));
      results.push_back(test::to_host(d_ids));
    }
  }
  for (size_t i = 1; i < results.size(); ++i) CHECK(results[i] == results[0]);
}

#endif  // Q35_BACKEND_SIM

}  // namespace sim_test_executor
