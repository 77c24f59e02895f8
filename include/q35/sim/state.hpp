// The state of one emulated block: its threads (fibers), warps, barrier and shared memory.
#pragma once

#include <boost/context/fiber.hpp>
#include <cstdint>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "q35/core/dim3.hpp"
#include "q35/sim/asan_fiber.hpp"
#include "q35/sim/race_check.hpp"

namespace q35::sim {

// Thrown (inside a fiber) when a kernel misuses the SIMT model; the launch turns it into a status.
struct kernel_error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Warp collectives the sim implements; the lanes of one collective must all call the same one.
enum class collective_kind : uint8_t { shfl_idx, shfl_up, shfl_down, shfl_xor, ballot, any, all, sync_warp };

inline const char* to_string(collective_kind k) {
  switch (k) {
    case collective_kind::shfl_idx:
      return "shfl_idx";
    case collective_kind::shfl_up:
      return "shfl_up";
    case collective_kind::shfl_down:
      return "shfl_down";
    case collective_kind::shfl_xor:
      return "shfl_xor";
    case collective_kind::ballot:
      return "ballot";
    case collective_kind::any:
      return "any";
    case collective_kind::all:
      return "all";
    case collective_kind::sync_warp:
      return "sync_warp";
  }
  return "?";
}

namespace detail {

enum class run_state : uint8_t { ready, at_barrier, in_collective, done };

struct thread_state {
  dim3 tid;
  int rank = 0;                     // x + y * bx + z * bx * by
  boost::context::fiber self;       // suspended fiber of this thread
  boost::context::fiber scheduler;  // where the fiber returns when it yields
  run_state state = run_state::ready;
  // Current collective arrival: operand, per-lane argument, result.
  uint64_t value = 0;
  int arg = 0;
  uint64_t result = 0;
  race::fiber_slot* race_fiber = nullptr;  // its TSan fiber (race_check.hpp; null in other builds)
  // AddressSanitizer builds (asan_fiber.hpp): the fiber's stack, the scheduler's (learned when the
  // fiber arrives), and the fiber's fake stack while it is switched out
  boost::context::stack_context stack;
  asan::stack_bounds scheduler_stack;
  void* asan_fake = nullptr;
  uint32_t barriers = 0;  // sync_block() calls passed: picks block_state::barrier_sync
};

// One group of lanes waiting in the same collective (same mask).
struct pending_collective {
  uint32_t mask = 0;     // lanes that must arrive
  uint32_t arrived = 0;  // lanes that have
  collective_kind kind = collective_kind::sync_warp;
  int width = 32;
};

struct warp_state {
  uint32_t existing = 0;  // lanes that exist in this (possibly partial) warp
  uint32_t exited = 0;    // lanes whose thread has returned
  std::vector<pending_collective> pending;
  // Words each lane can publish to the others between two sync_warp collectives (sim::warp_scratch):
  // what moves more than a shuffle's 64 bits at once, such as the fragments of an mma.
  uint32_t scratch[32][16] = {};
};

struct block_state {
  const char* kernel_name = "";
  dim3 block_idx, block_dim, grid_dim;
  unsigned char* shared = nullptr;
  size_t shared_bytes = 0;  // static + dynamic shared memory at `shared`
  std::vector<thread_state> threads;
  std::vector<warp_state> warps;
  int n_done = 0;
  int n_at_barrier = 0;
  char barrier_sync[2] = {};  // TSan sync objects of even and odd barriers (race_check.hpp)
  std::string error;          // first failure; non-empty aborts the block

  std::string where(const thread_state& t) const {
    std::ostringstream os;
    os << "kernel " << kernel_name << ": block (" << block_idx.x << ',' << block_idx.y << ',' << block_idx.z
       << ") thread (" << t.tid.x << ',' << t.tid.y << ',' << t.tid.z << ") [warp " << t.rank / 32 << " lane "
       << t.rank % 32 << "]";
    return os.str();
  }
};

// The thread a fiber is emulating and its block; set by the scheduler before every resume.
inline thread_local thread_state* tls_thread = nullptr;
inline thread_local block_state* tls_block = nullptr;

inline thread_state& current_thread() {
  thread_state* t;
  {
    race::ignore_scope sim_bookkeeping;  // the scheduler sets it before every resume
    t = tls_thread;
  }
  if (!t) throw std::logic_error("q35 sim: a device function was called outside a kernel launch");
  return *t;
}

// Suspends the running fiber and returns to the block scheduler.
inline void yield_to_scheduler(thread_state& t) {
  race::ignore_scope sim_bookkeeping;  // (race_check.hpp)
  if constexpr (!asan::enabled) {
    t.scheduler = std::move(t.scheduler).resume();
  } else {
    asan::start_switch(&t.asan_fake, t.scheduler_stack);
    try {
      t.scheduler = std::move(t.scheduler).resume();
    } catch (const boost::context::detail::forced_unwind&) {
      // the block is over and the scheduler unwinds this fiber: it has arrived, and it ends when the
      // unwind leaves it (boost jumps back to the scheduler)
      asan::finish_switch(t.asan_fake, &t.scheduler_stack);
      asan::start_switch(nullptr, t.scheduler_stack);
      throw;
    }
    asan::finish_switch(t.asan_fake, &t.scheduler_stack);
  }
}

[[noreturn]] inline void fail(const std::string& what) {
  std::string where;
  {
    race::ignore_scope sim_bookkeeping;
    where = tls_block->where(*tls_thread);
  }
  throw kernel_error(where + ": " + what);
}

inline std::string lane_list(uint32_t lanes) {
  std::ostringstream os;
  bool first = true;
  for (int l = 0; l < 32;) {
    if (!(lanes >> l & 1u)) {
      ++l;
      continue;
    }
    int e = l;
    while (e + 1 < 32 && (lanes >> (e + 1) & 1u)) ++e;
    os << (first ? "" : ",") << l;
    if (e > l) os << '-' << e;
    first = false;
    l = e + 1;
  }
  return first ? std::string("none") : os.str();
}

inline std::string hex_mask(uint32_t m) {
  std::ostringstream os;
  os << "0x" << std::hex << m;
  return os.str();
}

}  // namespace detail
}  // namespace q35::sim
