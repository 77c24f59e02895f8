// block::exclusive_sum and warp::inclusive_sum at several block sizes, and arch::popcount /
// arch::lowest_set_bit, against host sums and std::popcount / std::countr_zero, exactly (integers).
#include <bit>
#include <cstdint>
#include <vector>

#include "q35/arch/bits.hpp"
#include "q35/arch/thread.hpp"
#include "q35/block/scan.hpp"
#include "q35/launch/launch.hpp"
#include "q35/warp/scan.hpp"
#include "test_util.hpp"

namespace block_test_scan {

using namespace q35;

// Per thread: the warp's inclusive sum, the block's exclusive sum and total, twice (warp totals reused
// past a barrier); and the bit counts of one word per thread.
template <int Threads>
struct scan_kernel {
  struct params {
    const uint64_t* own;    // [Threads]
    const uint32_t* words;  // [Threads]
    uint64_t* out;          // [Threads][5]: warp inclusive, before, total, second before, second total
    int32_t* bits;          // [Threads][2]: popcount, lowest set bit (-1 for 0)
  };
  struct shared_storage {
    uint64_t warp_total[Threads / warp_size];
  };
  static constexpr int threads = Threads;
  static dim3 grid(const params&) { return dim3(1); }
  Q35_DEVICE void operator()(const params& p, shared_storage& s) const {
    const int t = arch::thread_rank();
    uint64_t* o = p.out + 5 * t;
    o[0] = warp::inclusive_sum(p.own[t]);
    block::exclusive_sum<Threads>(p.own[t], s.warp_total, o[1], o[2]);
    arch::sync_block();  // warp_total rewritten below
    block::exclusive_sum<Threads>(3 * p.own[t] + 1, s.warp_total, o[3], o[4]);
    p.bits[2 * t] = arch::popcount(p.words[t]);
    p.bits[2 * t + 1] = p.words[t] ? arch::lowest_set_bit(p.words[t]) : -1;
  }
};

TEST_CASE_TEMPLATE("block: exclusive_sum and warp inclusive_sum, every thread order; bit counts" * test::needs_device(),
                   T, std::integral_constant<int, 32>, std::integral_constant<int, 256>,
                   std::integral_constant<int, 1024>) {
  constexpr int threads = T::value;
  std::vector<uint64_t> own(threads);
  std::vector<uint32_t> words(threads);
  for (int t = 0; t < threads; ++t) {
    own[size_t(t)] = (uint64_t(t) * 0x9e3779b97f4a7c15ull) >> 20;  // up to 2^44: sums need 64 bits
    words[size_t(t)] = t % 17 == 0 ? 0u : uint32_t(uint64_t(t) * 0x2545f4914f6cdd1dull >> (t % 29));
  }
  words[1] = 0x80000000u, words[2] = 0xffffffffu;
  auto d_own = test::to_device(own);
  auto d_words = test::to_device(words);
  test::for_each_order([&] {
    auto d_out = test::poisoned<uint64_t>(size_t(5) * threads);
    auto d_bits = test::poisoned<int32_t>(size_t(2) * threads);
    Q35_REQUIRE_OK(launch::launch<scan_kernel<threads>>({d_own.data(), d_words.data(), d_out.data(), d_bits.data()}));
    const auto out = test::to_host(d_out);
    const auto bits = test::to_host(d_bits);
    uint64_t before = 0, before2 = 0, total = 0, total2 = 0, warp = 0;
    for (int t = 0; t < threads; ++t) total += own[size_t(t)], total2 += 3 * own[size_t(t)] + 1;
    for (int t = 0; t < threads; ++t) {
      CAPTURE(t);
      if (t % warp_size == 0) warp = 0;
      warp += own[size_t(t)];
      const uint64_t* o = out.data() + 5 * t;
      CHECK(o[0] == warp);
      CHECK(o[1] == before);
      CHECK(o[2] == total);
      CHECK(o[3] == before2);
      CHECK(o[4] == total2);
      before += own[size_t(t)], before2 += 3 * own[size_t(t)] + 1;
      const uint32_t w = words[size_t(t)];
      CHECK(bits[size_t(2 * t)] == std::popcount(w));
      CHECK(bits[size_t(2 * t + 1)] == (w ? std::countr_zero(w) : -1));
    }
  });
}

}  // namespace block_test_scan
