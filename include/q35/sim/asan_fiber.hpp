// AddressSanitizer's view of the sim's fibers (scripts/sanitize.sh builds the sim with ASan). ASan
// keeps one stack per OS thread; code that runs on a fiber stack it was not told about makes
// __asan_handle_no_return (every throw) give up with "False positive error reports may follow", and
// the frames an exception unwinds keep their redzones' poison. A kernel misuse that the sim reports
// by throwing inside the fiber, or a forced unwind of a suspended fiber, then leaves poison that the
// next frames there (or the next kernel's) hit as a stack-buffer-overflow that never happened.
//
// So every switch between the block scheduler and a fiber is announced (compiler-rt's fiber API):
// the side that leaves calls start_switch with the stack it goes to (a fiber that is ending passes no
// save slot, so ASan drops its fake stack); the side that arrives calls finish_switch with what it
// saved when it left, and learns the stack it came from. The executor starts every fiber before the
// block runs in these builds, so a fiber that is unwound has always arrived once (and knows the
// scheduler's stack). No-ops in other builds.
#pragma once

#include <boost/context/stack_context.hpp>
#include <cstddef>

#if defined(__SANITIZE_ADDRESS__)
#define Q35_SIM_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define Q35_SIM_ASAN 1
#endif
#endif
#if defined(Q35_SIM_ASAN)
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif

namespace q35::sim::asan {

#if defined(Q35_SIM_ASAN)
inline constexpr bool enabled = true;
#else
inline constexpr bool enabled = false;
#endif

// A stack as the fiber API names it: its lowest address and its size.
struct stack_bounds {
  const void* bottom = nullptr;
  size_t size = 0;
};

inline stack_bounds bounds_of(const boost::context::stack_context& sc) {
  return {static_cast<const char*>(sc.sp) - sc.size, sc.size};
}

// Before switching to `to`; `save` keeps the leaving side's fake stack (null: the side is ending).
inline void start_switch(void** save, stack_bounds to) {
#if defined(Q35_SIM_ASAN)
  __sanitizer_start_switch_fiber(save, to.bottom, to.size);
#else
  (void)save, (void)to;
#endif
}

// After arriving: `saved` is what start_switch stored when this side left (null on a fiber's first
// arrival); `from`, when given, receives the stack the switch came from.
inline void finish_switch(void* saved, stack_bounds* from = nullptr) {
#if defined(Q35_SIM_ASAN)
  const void* bottom = nullptr;
  size_t size = 0;
  __sanitizer_finish_switch_fiber(saved, &bottom, &size);
  if (from) *from = {bottom, size};
#else
  (void)saved, (void)from;
#endif
}

// Marks [p, p + n) addressable again: a stack going back to the pool (or unmapped) may still hold the
// shadow of frames that never returned normally; a reused stack, or memory mapped later where a pool
// was, would otherwise read as a stack overflow.
inline void unpoison(void* p, size_t n) {
#if defined(Q35_SIM_ASAN)
  ASAN_UNPOISON_MEMORY_REGION(p, n);
#else
  (void)p, (void)n;
#endif
}

}  // namespace q35::sim::asan
