// arch/cp_async.hpp: a 3-stage pipeline (commit + wait_group<1>) that sums tiles, 4/8/16-byte copies
// and zero-fill, and on the sim: a read before the wait sees the old shared bytes, a pipeline that
// waits for too few groups gives wrong sums, and misaligned copies are reported.
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "q35/arch/cp_async.hpp"
#include "q35/arch/thread.hpp"
#include "q35/launch/launch.hpp"
#include "test_util.hpp"

namespace arch_test_cp_async {

using namespace q35;

constexpr int pipe_threads = 64;
constexpr int tile_floats = pipe_threads * 4;  // one 16-byte chunk per thread

// Tiles of `src` stream through Stages shared buffers; thread t copies chunk t of each tile and sums
// chunk (63 - t), which another thread copied, so both the wait and the barrier matter. WaitN is
// Stages - 2 in a correct pipeline (tile t has landed while the next Stages - 2 are in flight).
template <int Stages, int WaitN>
struct pipeline_kernel {
  struct params {
    const float* src;  // [n_tiles][tile_floats]
    float* out;        // [pipe_threads][4]: sum over tiles of chunk (63 - t)
    int n_tiles;
  };
  struct shared_storage {
    alignas(16) float stage[Stages][tile_floats];
  };
  static constexpr int threads = pipe_threads;
  static dim3 grid(const params&) { return dim3(1); }
  Q35_DEVICE void operator()(const params& p, shared_storage& s) const {
    const int t = arch::thread_rank();
    auto issue = [&](int tile) {
      if (tile < p.n_tiles)
        arch::cp_async<16>(&s.stage[tile % Stages][4 * t], &p.src[int64_t(tile) * tile_floats + 4 * t]);
      arch::cp_async_commit();  // empty past the last tile: keeps the group count uniform
    };
    for (int tile = 0; tile < Stages - 1; ++tile) issue(tile);
    float acc[4] = {0, 0, 0, 0};
    for (int tile = 0; tile < p.n_tiles; ++tile) {
      arch::cp_async_wait<WaitN>();  // this thread's copies of `tile` have landed
      arch::sync_block();            // everyone's have; and stage (tile - 1) % Stages is consumed
      issue(tile + Stages - 1);
      const float* chunk = &s.stage[tile % Stages][4 * (pipe_threads - 1 - t)];
      for (int e = 0; e < 4; ++e) acc[e] += chunk[e];
    }
    arch::cp_async_wait_all();
    for (int e = 0; e < 4; ++e) p.out[4 * t + e] = acc[e];
  }
};

template <int Stages, int WaitN>
bool pipeline_sums_right(int n_tiles) {
  std::vector<float> src(size_t(n_tiles) * tile_floats);
  for (size_t i = 0; i < src.size(); ++i) src[i] = float(int(i * 37 % 101) - 50);
  auto d_src = test::to_device(src);
  auto out = test::poisoned<float>(pipe_threads * 4);
  Q35_REQUIRE_OK(launch::launch<pipeline_kernel<Stages, WaitN>>({d_src.data(), out.data(), n_tiles}));
  const auto h = test::to_host(out);
  bool right = true;
  for (int t = 0; t < pipe_threads; ++t) {
    for (int e = 0; e < 4; ++e) {
      double want = 0;
      for (int tile = 0; tile < n_tiles; ++tile)
        want += src[size_t(tile * tile_floats + 4 * (pipe_threads - 1 - t) + e)];
      right = right && double(h[size_t(4 * t + e)]) == want;
    }
  }
  return right;
}

TEST_CASE("arch: a 3-stage cp.async pipeline (commit, wait_group<1>) sums every tile" * test::needs_device()) {
  test::for_each_order([] {
    CHECK(pipeline_sums_right<3, 1>(7));
    CHECK(pipeline_sums_right<3, 1>(1));  // fewer tiles than stages
    CHECK(pipeline_sums_right<4, 2>(9));
    CHECK(pipeline_sums_right<2, 0>(5));
  });
}

TEST_CASE("arch: on the sim, a pipeline that waits for too few groups reads stale stages" *
          doctest::skip(!Q35_BACKEND_SIM)) {
  CHECK_FALSE(pipeline_sums_right<3, 2>(7));
}

// Every size and the zero-fill: thread t copies word t with cp_async<4>, words 32.. with <8>, and a
// zfill<16> of which only src_bytes = 4 * (t % 5) come from the source.
struct sizes_kernel {
  struct params {
    const uint32_t* src;  // [32 + 64 + 128]
    uint32_t* out;        // [32 + 64 + 128]
  };
  struct shared_storage {
    alignas(16) uint32_t w4[32];
    alignas(16) uint32_t w8[64];
    alignas(16) uint32_t w16[128];
  };
  static constexpr int threads = 32;
  static dim3 grid(const params&) { return dim3(1); }
  Q35_DEVICE void operator()(const params& p, shared_storage& s) const {
    const int t = arch::thread_rank();
    arch::cp_async<4>(&s.w4[t], &p.src[t]);
    arch::cp_async<8>(&s.w8[2 * t], &p.src[32 + 2 * t]);
    arch::cp_async_commit();
    arch::cp_async_zfill<16>(&s.w16[4 * t], &p.src[96 + 4 * t], 4 * (t % 5));
    arch::cp_async_wait_all();  // also covers the uncommitted zfill
    arch::sync_block();
    for (int i = t; i < 224; i += 32) p.out[i] = i < 32 ? s.w4[i] : i < 96 ? s.w8[i - 32] : s.w16[i - 96];
  }
};

TEST_CASE("arch: cp_async of 4, 8 and 16 bytes, and zero-fill past src_bytes" * test::needs_device()) {
  std::vector<uint32_t> src(224);
  for (size_t i = 0; i < src.size(); ++i) src[i] = 0xa0000000u + uint32_t(i);
  auto d_src = test::to_device(src);
  auto out = test::poisoned<uint32_t>(224);
  Q35_REQUIRE_OK(launch::launch<sizes_kernel>({d_src.data(), out.data()}));
  const auto h = test::to_host(out);
  for (int i = 0; i < 96; ++i) CHECK(h[size_t(i)] == src[size_t(i)]);
  for (int i = 96; i < 224; ++i) {
    const int t = (i - 96) / 4, word = (i - 96) % 4;
    CAPTURE(i);
    CHECK(h[size_t(i)] == (word < t % 5 ? src[size_t(i)] : 0u));
  }
}

// Reads its shared word before and after the wait: on the sim the copy lands only at the wait.
struct early_read_kernel {
  struct params {
    const float* src;  // [32 * 4]
    float* before;     // [32 * 4]
    float* after;      // [32 * 4]
  };
  struct shared_storage {
    alignas(16) float buf[32 * 4];
  };
  static constexpr int threads = 32;
  static dim3 grid(const params&) { return dim3(1); }
  Q35_DEVICE void operator()(const params& p, shared_storage& s) const {
    const int t = arch::thread_rank();
    for (int e = 0; e < 4; ++e) s.buf[4 * t + e] = -1.0f;
    arch::cp_async<16>(&s.buf[4 * t], &p.src[4 * t]);
    arch::cp_async_commit();
    for (int e = 0; e < 4; ++e) p.before[4 * t + e] = s.buf[4 * t + e];  // a race on a GPU: missing wait
    arch::cp_async_wait<0>();
    for (int e = 0; e < 4; ++e) p.after[4 * t + e] = s.buf[4 * t + e];
  }
};

TEST_CASE("arch: cp_async lands at the wait; on the sim a read before it sees the old bytes" * test::needs_device()) {
  std::vector<float> src(128);
  for (size_t i = 0; i < src.size(); ++i) src[i] = float(i) + 0.5f;
  auto d_src = test::to_device(src);
  auto before = test::poisoned<float>(128);
  auto after = test::poisoned<float>(128);
  Q35_REQUIRE_OK(launch::launch<early_read_kernel>({d_src.data(), before.data(), after.data()}));
  const auto hb = test::to_host(before), ha = test::to_host(after);
  for (size_t i = 0; i < 128; ++i) {
    CHECK(ha[i] == src[i]);
    if (Q35_BACKEND_SIM) CHECK(hb[i] == -1.0f);  // the sim would catch the missing wait
  }
}

#if Q35_BACKEND_SIM
// Thread 5 gives a bad address: its destination off by 8 bytes (mode 0) or in global memory (2); its
// source off by 4 bytes (1) or in shared memory (3).
struct bad_copy_kernel {
  struct params {
    const uint32_t* src;
    uint32_t* global;  // 16-byte aligned (mode 2)
    int mode;
  };
  struct shared_storage {
    alignas(16) uint32_t buf[64];
  };
  static constexpr int threads = 32;
  static dim3 grid(const params&) { return dim3(1); }
  Q35_DEVICE void operator()(const params& p, shared_storage& s) const {
    const int t = arch::thread_rank();
    uint32_t* dst = &s.buf[0];
    const uint32_t* src = p.src;
    if (t == 5) {
      if (p.mode == 0) dst = &s.buf[2];
      if (p.mode == 1) src = p.src + 1;
      if (p.mode == 2) dst = p.global;
      if (p.mode == 3) src = &s.buf[8];
    }
    arch::cp_async<16>(dst, src);
    arch::cp_async_wait_all();
  }
};

TEST_CASE("arch: the sim reports cp_async addresses not aligned to the copy size or in the wrong memory") {
  std::vector<uint32_t> src(64, 1);
  auto d_src = test::to_device(src);
  auto d_global = test::to_device(std::vector<uint32_t>(4, 0));
  const char* const want[] = {"destination address", "source address", "destination address", "source address"};
  const char* const problem[] = {"is not 16-byte aligned", "is not 16-byte aligned",
                                 "is not in the block's shared memory", "is in shared memory, not global"};
  for (int mode = 0; mode < 4; ++mode) {
    const status s = launch::launch<bad_copy_kernel>({d_src.data(), d_global.data(), mode});
    REQUIRE_FALSE(s.ok());
    INFO(s.message());
    CHECK(s.code() == status_code::kernel_fault);
    CHECK(s.message().find("[warp 0 lane 5]") != std::string::npos);
    CHECK(s.message().find(want[mode]) != std::string::npos);
    CHECK(s.message().find(problem[mode]) != std::string::npos);
  }
  CHECK(test::to_host(d_global) == std::vector<uint32_t>(4, 0));  // the copy never ran
  // The failed launches left copies queued; a following launch is unaffected.
  CHECK(pipeline_sums_right<3, 1>(4));
}
#endif

}  // namespace arch_test_cp_async
