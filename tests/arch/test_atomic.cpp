// arch/atomic.hpp on global and shared memory, contended by every thread of many blocks.
#include <cstdint>

#include "q35/arch/atomic.hpp"
#include "q35/arch/thread.hpp"
#include "q35/launch/launch.hpp"
#include "test_util.hpp"

namespace arch_test_atomic {

using namespace q35;

// counters: [0] int add, [1] uint32 max, [2] int min, [3] cas-acquired count, [4..5] uint64 add
// floats: [0] float add of 0.5 (exact in float at these counts)
struct atomic_kernel {
  struct params {
    int32_t* i32;        // [4]
    uint64_t* u64;       // [1]
    float* f32;          // [1]
    int32_t* per_block;  // [n_blocks]: shared-memory count per block
    int n_blocks;
  };
  struct shared_storage {
    int32_t count;
  };
  static constexpr int threads = 128;
  static dim3 grid(const params& p) { return dim3(unsigned(p.n_blocks)); }
  Q35_DEVICE void operator()(const params& p, shared_storage& s) const {
    const int t = arch::thread_rank();
    const int64_t gid = arch::block_rank() * threads + t;
    if (t == 0) s.count = 0;
    arch::sync_block();
    arch::atomic_add(&s.count, 1);
    arch::atomic_add(&p.i32[0], 1);
    arch::atomic_max(reinterpret_cast<uint32_t*>(&p.i32[1]), uint32_t(gid));
    arch::atomic_min(&p.i32[2], int32_t(-gid));
    if (arch::atomic_cas(&p.i32[3], 0, 1) == 0) arch::atomic_exchange(&p.i32[3], 7);  // exactly one winner
    arch::atomic_add(&p.u64[0], uint64_t(1) << 33);
    arch::atomic_add(&p.f32[0], 0.5f);
    arch::sync_block();
    if (t == 0) p.per_block[arch::block_rank()] = s.count;
  }
};

TEST_CASE("arch: atomics on global and shared memory count every thread exactly once" * test::needs_device()) {
  const int n_blocks = 37;
  const int64_t n = int64_t(n_blocks) * 128;
  auto i32 = test::to_device(std::vector<int32_t>{0, 0, 0, 0});
  auto u64 = test::to_device(std::vector<uint64_t>{5});
  auto f32 = test::to_device(std::vector<float>{0.0f});
  auto per_block = test::poisoned<int32_t>(n_blocks);
  Q35_REQUIRE_OK(launch::launch<atomic_kernel>({i32.data(), u64.data(), f32.data(), per_block.data(), n_blocks}));
  auto hi = test::to_host(i32);
  CHECK(hi[0] == n);
  CHECK(uint32_t(hi[1]) == uint32_t(n - 1));
  CHECK(hi[2] == -(n - 1));
  CHECK(hi[3] == 7);
  CHECK(test::to_host(u64)[0] == 5 + (uint64_t(n) << 33));
  CHECK(test::to_host(f32)[0] == 0.5f * float(n));
  for (int32_t c : test::to_host(per_block)) CHECK(c == 128);
}

}  // namespace arch_test_atomic
