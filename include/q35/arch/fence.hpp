// Device-wide memory ordering between blocks of one kernel: the fence and the L1-bypassing load that
// the "last block finishes the work" pattern needs (CUDA's threadFenceReduction sample).
#pragma once

#include "q35/arch/vector_load.hpp"
#include "q35/core/config.hpp"

#if Q35_BACKEND_SIM
#include <atomic>

#include "q35/sim/race_check.hpp"
#include "q35/sim/visibility.hpp"
#endif

namespace q35::arch {

// Orders this thread's global-memory writes before its later writes (an atomic that publishes
// them), as seen by every thread of the device; on the reading side, orders a preceding atomic
// before the reads that follow.
Q35_DEVICE void thread_fence() {
#if Q35_BACKEND_CUDA
  __threadfence();
#else
#if !defined(Q35_SIM_TSAN)  // (under ThreadSanitizer the sim's atomics acquire and release instead)
  std::atomic_thread_fence(std::memory_order_seq_cst);
#endif
  if (sim::store_visibility* v = sim::detail::tls_visibility) v->publish();  // options::delay_stores
#endif
}

// Loads *p through L2 only (ld.global.cg): for data other blocks wrote during this kernel, which
// the read-only path (load_16, __ldg) may not see.
template <class T>
Q35_DEVICE T load_coherent(const T* p) {
#if Q35_BACKEND_CUDA
  return __ldcg(p);
#else
  // ld.global.cg of a shared address is a global load of its generic address on the GPU (vector_load.hpp)
  if (sim::in_block_shared(p, 1))
    detail::sim_load_fail("ld.global.cg (load_coherent) from shared memory: " +
                          std::to_string(reinterpret_cast<uintptr_t>(p)));
  if (const sim::store_visibility* v = sim::detail::tls_visibility) {  // options::delay_stores
    T out;
    if (v->read(p, sizeof(T), &out)) return out;
  }
  return *p;
#endif
}

}  // namespace q35::arch
