// arch/fence.hpp: the "last block finishes the work" pattern across blocks (and sim workers).
#include <cmath>
#include <cstdint>

#include "q35/arch/atomic.hpp"
#include "q35/arch/fence.hpp"
#include "q35/arch/thread.hpp"
#include "q35/block/reduce.hpp"
#include "q35/launch/launch.hpp"
#include "test_util.hpp"

namespace arch_test_fence {

using namespace q35;

// Each block sums its slice of x into partial[block]; the last block to arrive sums the partials
// into *total and resets the counter, so the kernel can be launched again on the same workspace.
struct last_block_sum_kernel {
  using reduce = block::reduce<float, 128>;
  struct params {
    const float* x;     // [n_blocks * 128]
    float* partial;     // [n_blocks]
    uint32_t* counter;  // [1], 0 between launches
    float* total;       // [1]
    int n_blocks;
  };
  struct shared_storage {
    reduce::storage red;
    bool is_last;
  };
  static constexpr int threads = 128;
  static dim3 grid(const params& p) { return dim3(unsigned(p.n_blocks)); }
  Q35_DEVICE void operator()(const params& p, shared_storage& s) const {
    const int64_t b = arch::block_rank();
    const float sum = reduce::sum(p.x[b * threads + arch::thread_rank()], s.red);
    if (arch::thread_rank() == 0) {
      p.partial[b] = sum;
      arch::thread_fence();  // the partial is visible before the counter says so
      s.is_last = arch::atomic_add(p.counter, 1u) + 1 == uint32_t(p.n_blocks);
    }
    arch::sync_block();
    if (!s.is_last || arch::thread_rank() != 0) return;
    arch::thread_fence();
    float total = 0;
    for (int i = 0; i < p.n_blocks; ++i) total += arch::load_coherent(p.partial + i);  // in block order
    *p.total = total;
    arch::atomic_exchange(p.counter, 0u);
  }
};

// What this case proves depends on the backend:
// - cuda (a GPU): the fences. Without the writer's fence the counter can be seen before the partial and
//   the last block sums a stale (poisoned: NaN) partial; without the reader's fence its loads may be
//   ordered before the atomic. A missing fence is a race, so a pass is evidence, not proof.
// - sim: only the counter logic (exactly one last block, the reset for the next launch, every partial
//   summed) across thread orders (and two workers in CI's second run). It passes with both fences deleted: the blocks
//   of one worker run one after another, and between workers x86 keeps stores in program order and the atomic is a
//   locked instruction, so a partial is always visible before the count that publishes it. The sim cannot delay plain
//   stores (they are ordinary host stores it does not see), so it has no mode that would expose a missing fence.
TEST_CASE("arch: thread_fence + atomic counter lets the last block read every block's result" * test::needs_device()) {
  const int n_blocks = 61;
  auto x = test::random_floats(size_t(n_blocks) * 128, 70);
  // x in multiples of 1/64 keeps every partial and the total exact, whatever the summation order
  for (auto& v : x) v = std::round(v * 64) / 64;
  double want = 0;
  for (float v : x) want += v;
  auto d_x = test::to_device(x);
  auto partial = test::poisoned<float>(n_blocks);
  auto counter = test::to_device(std::vector<uint32_t>{0});
  test::for_each_order([&] {
    for (int launch_no = 0; launch_no < 2; ++launch_no) {
      auto total = test::poisoned<float>(1);
      Q35_REQUIRE_OK(
          launch::launch<last_block_sum_kernel>({d_x.data(), partial.data(), counter.data(), total.data(), n_blocks}));
      CHECK(double(test::to_host(total)[0]) == want);
      CHECK(test::to_host(counter)[0] == 0u);
    }
  });
}

}  // namespace arch_test_fence
