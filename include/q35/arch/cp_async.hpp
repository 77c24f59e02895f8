// Asynchronous global -> shared copies for multistage pipelines (PTX cp.async, sm_80+): issue copies,
// close them into a group with cp_async_commit(), and wait until all but the N most recent groups
// have landed with cp_async_wait<N>() (cp_async_wait_all(): every copy, committed or not).
//
// A wait covers only the calling thread's copies; other threads see them after a sync_block().
// Sizes are 4, 8 or 16 bytes, source and destination aligned to the size; the destination in the
// block's shared memory, the source not (global state space); the sim checks all four.
// 16-byte copies bypass L1 (.cg), 4- and 8-byte ones go through it (.ca).
//
// The sim defers every copy to the wait that completes it, so a kernel that reads shared memory
// before waiting (or waits for too few groups) reads the old (poisoned) bytes, as a GPU may. The
// queues live per OS thread, one per emulated thread of the running block (a block runs on one OS
// thread); they are dropped when another block starts. Limitation: copies a thread never waits for
// are dropped, not performed, and the sim cannot tell a relaunch of the same kernel, block and
// addresses from the block before it, so such leftovers can reach a later launch's wait: wait for
// every copy before returning (a pipeline's trailing groups are usually empty anyway).
#pragma once

#include <cstdint>
#include <cstring>

#include "q35/core/config.hpp"

#if Q35_BACKEND_SIM
#include <deque>
#include <string>
#include <vector>

#include "q35/sim/device_api.hpp"
#endif

namespace q35::arch {

#if Q35_BACKEND_SIM
namespace detail {

struct sim_async_copy {
  unsigned char* dst;
  const unsigned char* src;
  int bytes, src_bytes;  // copies src_bytes, zero-fills the rest
  void run() const {
    std::memcpy(dst, src, size_t(src_bytes));
    std::memset(dst + src_bytes, 0, size_t(bytes - src_bytes));
  }
};

struct sim_async_thread {
  std::vector<sim_async_copy> open;                // issued, not yet committed
  std::deque<std::vector<sim_async_copy>> groups;  // committed, oldest first
};

// The queues of the block running on this OS thread; the key tells when another block has started.
struct sim_async_block {
  const void* block = nullptr;
  const void* threads = nullptr;
  const unsigned char* shared = nullptr;
  const char* kernel = nullptr;
  dim3 block_idx;
  std::vector<sim_async_thread> per_thread;
};

inline thread_local sim_async_block tls_async;

inline sim_async_thread& sim_async_queue() {
  auto& t = sim::detail::current_thread();
  const auto& b = *sim::detail::tls_block;
  auto& q = tls_async;
  if (q.block != &b || q.threads != b.threads.data() || q.shared != b.shared || q.kernel != b.kernel_name ||
      q.block_idx.x != b.block_idx.x || q.block_idx.y != b.block_idx.y || q.block_idx.z != b.block_idx.z) {
    q.block = &b, q.threads = b.threads.data(), q.shared = b.shared, q.kernel = b.kernel_name;
    q.block_idx = b.block_idx;
    q.per_thread.assign(b.threads.size(), {});
  }
  return q.per_thread[size_t(t.rank)];
}

[[noreturn]] inline void sim_async_fail(int bytes, const char* what, const void* p, const std::string& problem) {
  sim::detail::fail("cp_async<" + std::to_string(bytes) + "> " + what + " address " +
                    std::to_string(reinterpret_cast<uintptr_t>(p)) + " " + problem);
}
inline void sim_check_async_aligned(const void* p, int bytes, const char* what) {
  if (reinterpret_cast<uintptr_t>(p) % uintptr_t(bytes) != 0)
    sim_async_fail(bytes, what, p, "is not " + std::to_string(bytes) + "-byte aligned");
}

}  // namespace detail
#endif

// Starts copying Bytes from global `src` to shared `dst`, of which the first src_bytes (0..Bytes) come
// from src and the rest are zero-filled (src_bytes = 0 reads nothing: for predicated-off tiles).
template <int Bytes>
Q35_DEVICE void cp_async_zfill(void* dst, const void* src, int src_bytes) {
  static_assert(Bytes == 4 || Bytes == 8 || Bytes == 16, "cp_async copies 4, 8 or 16 bytes");
#if Q35_BACKEND_CUDA
  const uint32_t d = uint32_t(__cvta_generic_to_shared(dst));
  if constexpr (Bytes == 16)
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(d), "l"(src), "r"(src_bytes) : "memory");
  else
    asm volatile("cp.async.ca.shared.global [%0], [%1], %2, %3;\n" ::"r"(d), "l"(src), "n"(Bytes), "r"(src_bytes)
                 : "memory");
#else
  detail::sim_check_async_aligned(dst, Bytes, "destination");
  if (!sim::in_block_shared(dst, Bytes))
    detail::sim_async_fail(Bytes, "destination", dst, "is not in the block's shared memory");
  if (src_bytes < 0 || src_bytes > Bytes)
    sim::detail::fail("cp_async_zfill<" + std::to_string(Bytes) + "> with src_bytes " + std::to_string(src_bytes));
  if (src_bytes > 0) {
    detail::sim_check_async_aligned(src, Bytes, "source");
    // cp.async reads the global state space: a shared address there is not this memory on a GPU
    if (sim::in_block_shared(src, 1)) detail::sim_async_fail(Bytes, "source", src, "is in shared memory, not global");
  }
  sim::race::ignore_scope sim_bookkeeping;  // (the queues are the OS thread's: sim/race_check.hpp)
  detail::sim_async_queue().open.push_back(
      {static_cast<unsigned char*>(dst), static_cast<const unsigned char*>(src), Bytes, src_bytes});
#endif
}

// Starts copying Bytes (4, 8, 16) from global `src` to shared `dst`, both aligned to Bytes.
template <int Bytes>
Q35_DEVICE void cp_async(void* dst, const void* src) {
  static_assert(Bytes == 4 || Bytes == 8 || Bytes == 16, "cp_async copies 4, 8 or 16 bytes");
#if Q35_BACKEND_CUDA
  const uint32_t d = uint32_t(__cvta_generic_to_shared(dst));
  if constexpr (Bytes == 16)
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(d), "l"(src) : "memory");
  else
    asm volatile("cp.async.ca.shared.global [%0], [%1], %2;\n" ::"r"(d), "l"(src), "n"(Bytes) : "memory");
#else
  cp_async_zfill<Bytes>(dst, src, Bytes);
#endif
}

// Closes the calling thread's copies issued since the last commit into one group (possibly empty).
Q35_DEVICE void cp_async_commit() {
#if Q35_BACKEND_CUDA
  asm volatile("cp.async.commit_group;\n" ::: "memory");
#else
  sim::race::ignore_scope sim_bookkeeping;
  auto& q = detail::sim_async_queue();
  q.groups.push_back(std::move(q.open));
  q.open.clear();
#endif
}

// Waits until at most N of the calling thread's committed groups (the most recent) are in flight.
template <int N>
Q35_DEVICE void cp_async_wait() {
  static_assert(N >= 0 && N < 8, "cp_async_wait<N>: N is a small number of groups");
#if Q35_BACKEND_CUDA
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
#else
  if constexpr (sim::race::enabled) {
    // the copies are the calling thread's shared-memory writes, checked; the queues are not
    std::vector<std::vector<detail::sim_async_copy>> landed;
    {
      sim::race::ignore_scope sim_bookkeeping;
      auto& q = detail::sim_async_queue();
      while (q.groups.size() > size_t(N)) {
        landed.push_back(std::move(q.groups.front()));
        q.groups.pop_front();
      }
    }
    for (const auto& g : landed)
      for (size_t i = 0; i < g.size(); ++i) {
        detail::sim_async_copy c;
        {
          sim::race::ignore_scope sim_bookkeeping;
          c = g[i];
        }
        c.run();
      }
    sim::race::ignore_scope sim_bookkeeping;
    landed.clear();
  } else {
    auto& q = detail::sim_async_queue();
    while (q.groups.size() > size_t(N)) {
      for (const auto& c : q.groups.front()) c.run();
      q.groups.pop_front();
    }
  }
#endif
}

// Waits for every copy of the calling thread, committed or not (commit + wait_group 0).
Q35_DEVICE void cp_async_wait_all() {
#if Q35_BACKEND_CUDA
  asm volatile("cp.async.wait_all;\n" ::: "memory");
#else
  cp_async_commit();
  cp_async_wait<0>();
#endif
}

}  // namespace q35::arch
