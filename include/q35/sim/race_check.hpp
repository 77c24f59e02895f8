// ThreadSanitizer support for the sim (Q35_SANITIZER=thread scripts/sanitize.sh): a race detector for kernels.
//
// In a build with -fsanitize=thread, each emulated thread of a block runs as its own TSan fiber, and the
// executor switches TSan to it around every resume *without* synchronizing, so that TSan orders two
// emulated threads only where the SIMT model does:
//   - a block barrier (sync_block): every thread releases the barrier's sync object on arrival and
//     acquires it on leaving (two objects, alternating by barrier generation);
//   - a warp collective (shuffles, votes, sync_warp): each lane releases its warp's sync object on
//     arrival and acquires it once the collective completes;
//   - the launch: the block's fibers are started once, synchronized with the scheduler, before any runs
//     kernel code (what the host wrote before the launch happens before every thread);
//   - atomics, which use acquire/release orders in this build (TSan ignores std::atomic_thread_fence,
//     and a GPU's __threadfence + atomic is what publishes data between blocks).
// Every shared- or global-memory access of kernel code between those points is checked: a read of
// another thread's write with no barrier between them is reported as a data race, whether or not the
// sim's schedule happened to produce the right bytes (what compute-sanitizer's racecheck finds on a
// GPU). Across blocks, races show with more than one worker (Q35_SIM_WORKERS).
// Precision: the model adds orderings the hardware does not promise in two places, so it can miss races
// there but never reports accesses the SIMT model orders: atomics (above, acquire/release even without a fence), and
// warps: a warp has one sync object for all its collectives, so a lane that leaves a collective late acquires what
// faster lanes released at the next one, and a race between two lanes of one warp in that window goes unreported.
// Streams are not modelled: the sim runs every stream's work on the host thread, in the order its
// options choose (options::side_stream_lag), so an overlap of two streams on a GPU is this detector's
// blind spot; the expert store's promotion protocol has its own tests for that.
//
// The sim's own bookkeeping (thread states, collective arrivals, cp.async queues) is shared by the
// fibers of one OS thread outside that model and is accessed with TSan's reads and writes ignored
// (race::ignore_scope). Each switch back to the scheduler synchronizes the fiber into it, so the
// scheduler's view is the whole block's; switches into a fiber do not.
//
// The switch annotations are placed around the resume calls in the scheduler only (never in the fiber
// before it jumps): the frames between a switch annotation and the jump are then entered and left on
// the same TSan fiber, so TSan's shadow call stacks stay balanced, including for a fiber that returns.
// The price: the scheduler's code between the jump back and its annotation (boost's resume() moving
// the fiber handle through the scheduler's stack) still counts as the fiber's, so a fiber ignores its
// accesses from just before it jumps until it runs again (yield_to_scheduler), and from its return on.
//
// In every other build these functions are empty and `enabled` is false.
#pragma once

#include <cstddef>
#include <mutex>
#include <vector>

#if defined(__SANITIZE_THREAD__)
#define Q35_SIM_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define Q35_SIM_TSAN 1
#endif
#endif

#if defined(Q35_SIM_TSAN)
extern "C" {
void* __tsan_get_current_fiber();
void* __tsan_create_fiber(unsigned flags);
void __tsan_switch_to_fiber(void* fiber, unsigned flags);
void __tsan_func_exit();
void __tsan_acquire(void* addr);
void __tsan_release(void* addr);
void AnnotateIgnoreReadsBegin(const char* file, int line);
void AnnotateIgnoreReadsEnd(const char* file, int line);
void AnnotateIgnoreWritesBegin(const char* file, int line);
void AnnotateIgnoreWritesEnd(const char* file, int line);
}
#endif

namespace q35::sim::race {

#if defined(Q35_SIM_TSAN)
inline constexpr bool enabled = true;
#else
inline constexpr bool enabled = false;
#endif

// The TSan fiber the calling code runs on (the OS thread's own one in the scheduler); null otherwise.
inline void* current_fiber() {
#if defined(Q35_SIM_TSAN)
  return __tsan_get_current_fiber();
#else
  return nullptr;
#endif
}

// A TSan fiber for one emulated thread. `ignoring`: the emulated thread that last ran on it returned
// with its accesses ignored (see the executor), which the next one to run on it undoes.
struct fiber_slot {
  void* fiber = nullptr;
  bool ignoring = false;
};

// The TSan fibers of one block runner (an OS thread's share of a launch): taken from a process-wide
// pool and given back when the runner ends, so later launches reuse them (a TSan fiber is a TSan
// thread, with a shadow stack; creating them per launch would dominate the run and exhaust TSan's
// limit of 8,128 threads). Empty in other builds.
class fiber_lease {
 public:
  explicit fiber_lease(size_t n) {
#if defined(Q35_SIM_TSAN)
    auto& p = pool();
    std::lock_guard lock(p.mu);
    while (slots_.size() < n) {
      if (p.free.empty()) {
        slots_.push_back(new fiber_slot{__tsan_create_fiber(0), false});
      } else {
        slots_.push_back(p.free.back());
        p.free.pop_back();
      }
    }
#else
    (void)n;
#endif
  }
  ~fiber_lease() {
#if defined(Q35_SIM_TSAN)
    auto& p = pool();
    std::lock_guard lock(p.mu);
    p.free.insert(p.free.end(), slots_.begin(), slots_.end());
#endif
  }
  fiber_lease(const fiber_lease&) = delete;
  fiber_lease& operator=(const fiber_lease&) = delete;
  fiber_slot* operator[](size_t i) const { return slots_[i]; }

 private:
#if defined(Q35_SIM_TSAN)
  struct shared_pool {
    std::mutex mu;
    std::vector<fiber_slot*> free;  // (kept for the process's life)
  };
  static shared_pool& pool() {
    static shared_pool* p = new shared_pool;
    return *p;
  }
#endif
  std::vector<fiber_slot*> slots_;
};

// Tells TSan that the emulated thread of `slot` runs from here on (`sync`: everything the current fiber
// did happens before what it does next; otherwise nothing is implied). Reads no pointer in other builds.
inline void switch_to_thread(const fiber_slot* slot, bool sync) {
#if defined(Q35_SIM_TSAN)
  __tsan_switch_to_fiber(slot->fiber, sync ? 0u : 1u /* __tsan_switch_to_fiber_no_sync */);
#else
  (void)slot, (void)sync;
#endif
}

// Tells TSan that the scheduler (`fiber`, from current_fiber()) runs from here on, after everything the
// current fiber did.
inline void switch_to_scheduler(void* fiber) {
#if defined(Q35_SIM_TSAN)
  __tsan_switch_to_fiber(fiber, 0u);
#else
  (void)fiber;
#endif
}

// Called after constructing a boost fiber: the constructor jumps into the new fiber's entry function,
// which TSan sees entered on the calling fiber and which jumps back without returning, so each
// construction would leave one frame on the scheduler's shadow stack (TSan aborts at 65,536 frames).
inline void drop_fiber_entry_frame() {
#if defined(Q35_SIM_TSAN)
  __tsan_func_exit();
#endif
}

inline void release(const void* sync_object) {
#if defined(Q35_SIM_TSAN)
  __tsan_release(const_cast<void*>(sync_object));
#else
  (void)sync_object;
#endif
}

inline void acquire(const void* sync_object) {
#if defined(Q35_SIM_TSAN)
  __tsan_acquire(const_cast<void*>(sync_object));
#else
  (void)sync_object;
#endif
}

// From ignore_begin() to ignore_end(), TSan neither records nor checks the calling fiber's memory
// accesses (synchronization still counts).
inline void ignore_begin() {
#if defined(Q35_SIM_TSAN)
  AnnotateIgnoreReadsBegin(__FILE__, __LINE__);
  AnnotateIgnoreWritesBegin(__FILE__, __LINE__);
#endif
}
inline void ignore_end() {
#if defined(Q35_SIM_TSAN)
  AnnotateIgnoreWritesEnd(__FILE__, __LINE__);
  AnnotateIgnoreReadsEnd(__FILE__, __LINE__);
#endif
}

// While alive, TSan neither records nor checks the calling fiber's memory accesses (synchronization
// still counts): for the sim's bookkeeping.
class ignore_scope {
 public:
#if defined(Q35_SIM_TSAN)
  ignore_scope() { ignore_begin(); }
  ~ignore_scope() { ignore_end(); }
#else
  ignore_scope() {}  // user-provided: a scope object is not an unused variable
#endif
  ignore_scope(const ignore_scope&) = delete;
  ignore_scope& operator=(const ignore_scope&) = delete;
};

}  // namespace q35::sim::race
