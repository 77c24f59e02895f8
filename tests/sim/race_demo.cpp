// Kernels for the sim's race detector (sim/race_check.hpp), one per command-line case. Built in every
// sim build; registered as tests only in a ThreadSanitizer build (tests/CMakeLists.txt), where
//   race_demo clean             must finish without a report: correct uses of every synchronization the
//                               detector models (barriers, shuffles, sync_warp + warp scratch, cp.async
//                               + wait + barrier, atomics + fence between blocks);
//   race_demo <one of the rest> must be reported as a data race: each drops one of those.
// The race cases still print the sim's result (often right): the point is that TSan reports them
// whether or not this schedule happened to produce the right bytes.
#include <cstdio>
#include <cstring>
#include <string>

#include "q35/arch/atomic.hpp"
#include "q35/arch/cp_async.hpp"
#include "q35/arch/fence.hpp"
#include "q35/arch/memory.hpp"
#include "q35/arch/shuffle.hpp"
#include "q35/arch/thread.hpp"
#include "q35/launch/launch.hpp"
#include "q35/sim/device_api.hpp"
#include "q35/sim/options.hpp"

namespace {

using namespace q35;

constexpr int n_threads = 128;
constexpr int n_blocks = 32;

enum class mode : int {
  clean,
  missing_barrier,    // a thread reads a neighbour's shared-memory word with no barrier in between
  overwrite_early,    // reuses shared memory without the barrier after the last reads
  cp_async_no_sync,   // reads another thread's cp.async destination after its wait, with no barrier
  scratch_no_sync,    // reads another lane's warp-scratch row without sync_warp
  cross_block_plain,  // blocks add into one global word with plain loads and stores
};

struct demo_kernel {
  struct params {
    const float* in;    // [n_blocks * n_threads]
    float* out;         // [n_blocks * n_threads]
    float* total;       // [1]: the sum of `in` over the whole grid
    unsigned* arrived;  // [1]: blocks done (the last block reads the partials)
    float* partial;     // [n_blocks]
    int m;
  };
  struct shared_storage {
    float a[n_threads];
    float b[n_threads];
  };
  static constexpr int threads = n_threads;
  static dim3 grid(const params&) { return dim3(n_blocks); }

  Q35_DEVICE void operator()(const params& p, shared_storage& s) const {
    const mode m = mode(p.m);
    const int t = arch::thread_rank(), lane = arch::lane_id();
    const int64_t blk = arch::block_rank();
    const float x = p.in[blk * n_threads + t];

    // 1. shared-memory exchange through a barrier
    s.a[t] = x;
    if (m != mode::missing_barrier) arch::sync_block();
    float y = s.a[(t + 1) % n_threads];
    if (m != mode::overwrite_early) arch::sync_block();
    s.a[t] = 2 * y;  // the reuse the barrier above protects
    arch::sync_block();
    y += s.a[(t + 5) % n_threads];

    // 2. a warp reduction through shuffles
    float w = y;
    for (int o = 16; o > 0; o /= 2) w += arch::shfl_xor(w, o);

    // 3. cp.async into shared memory, each thread waiting for its own copy; others read it after a barrier
    arch::cp_async<4>(&s.b[t], &p.in[blk * n_threads + (t + 3) % n_threads]);
    arch::cp_async_wait_all();
    if (m != mode::cp_async_no_sync) arch::sync_block();
    const float z = s.b[(t + 1) % n_threads];

    // 4. the warp scratch: own row, sync_warp, a neighbour's row, sync_warp before rewriting
    uint32_t(&scratch)[32][16] = sim::warp_scratch();
    scratch[lane][0] = uint32_t(t);
    if (m != mode::scratch_no_sync) arch::sync_warp();
    const uint32_t nb = scratch[(lane + 1) % 32][0];
    arch::sync_warp();

    p.out[blk * n_threads + t] = w + z + float(nb);

    // 5. between blocks: each block's thread 0 publishes a partial, the last block to arrive adds them
    arch::sync_block();
    if (t == 0) {
      if (m == mode::cross_block_plain) {
        *p.total += x;  // a plain read-modify-write of one word by every block
      } else {
        p.partial[blk] = x;
        arch::thread_fence();
        if (arch::atomic_add(p.arrived, 1u) == unsigned(n_blocks - 1)) {
          arch::thread_fence();
          float sum = 0;
          for (int i = 0; i < n_blocks; ++i) sum += arch::load_coherent(&p.partial[i]);
          *p.total = sum;
        }
      }
    }
  }
};

}  // namespace

int main(int argc, char** argv) {
  const char* names[] = {"clean",           "missing_barrier",  "overwrite_early", "cp_async_no_sync",
                         "scratch_no_sync", "cross_block_plain"};
  int m = -1;
  for (int i = 0; i < 6 && argc == 2; ++i)
    if (std::strcmp(argv[1], names[i]) == 0) m = i;
  if (m < 0) {
    std::fprintf(stderr,
                 "usage: race_demo clean|missing_barrier|overwrite_early|cp_async_no_sync|"
                 "scratch_no_sync|cross_block_plain\n");
    return 2;
  }
  sim::options o = sim::current_options();
  o.workers = 2;  // blocks on two OS threads, so that races between blocks can show
  sim::scoped_options scope(o);

  constexpr int n = n_blocks * n_threads;
  float *in = nullptr, *out = nullptr, *total = nullptr, *partial = nullptr;
  unsigned* arrived = nullptr;
  bool ok = device_alloc(reinterpret_cast<void**>(&in), n * sizeof(float)).ok() &&
            device_alloc(reinterpret_cast<void**>(&out), n * sizeof(float)).ok() &&
            device_alloc(reinterpret_cast<void**>(&total), sizeof(float)).ok() &&
            device_alloc(reinterpret_cast<void**>(&partial), n_blocks * sizeof(float)).ok() &&
            device_alloc(reinterpret_cast<void**>(&arrived), sizeof(unsigned)).ok();
  if (!ok) return 1;
  for (int i = 0; i < n; ++i) in[i] = float(i % 7);
  *total = 0;
  *arrived = 0;
  // twice: the first launch creates the TSan fibers; in the second both workers start at once and take
  // blocks (a race between blocks shows only if each worker runs one)
  status st = launch::launch<demo_kernel>({in, out, total, arrived, partial, m});
  *total = 0;
  *arrived = 0;
  if (st.ok()) st = launch::launch<demo_kernel>({in, out, total, arrived, partial, m});
  if (!st.ok()) {
    std::fprintf(stderr, "race_demo %s: %s\n", names[m], st.message().c_str());
    return 1;
  }
  float expect = 0;
  for (int b = 0; b < n_blocks; ++b) expect += in[b * n_threads];
  std::printf("race_demo %s: total %g (expected %g)\n", names[m], double(*total), double(expect));
  if (m == int(mode::clean) && *total != expect) return 1;
  device_free(in), device_free(out), device_free(total), device_free(partial), device_free(arrived);
  return 0;
}
