// Atomics on global or shared memory; each returns the value held before the operation.
#pragma once

#include <cstdint>
#include <type_traits>

#include "q35/core/config.hpp"

#if Q35_BACKEND_SIM
#include <atomic>

#include "q35/sim/race_check.hpp"
#endif

namespace q35::arch {

#if Q35_BACKEND_SIM
namespace detail {
// Relaxed, as a GPU's atomics are; under ThreadSanitizer acquire/release, since TSan ignores the
// thread_fence that pairs with them on a GPU (sim/race_check.hpp): stronger, so no false race.
inline constexpr std::memory_order sim_rmw = sim::race::enabled ? std::memory_order_acq_rel : std::memory_order_relaxed;
inline constexpr std::memory_order sim_load =
    sim::race::enabled ? std::memory_order_acquire : std::memory_order_relaxed;
}  // namespace detail
#endif

// *addr += v  (T: int32_t, uint32_t, uint64_t, float, double)
template <class T>
Q35_DEVICE T atomic_add(T* addr, T v) {
#if Q35_BACKEND_CUDA
  if constexpr (std::is_same_v<T, uint64_t>) {
    return T(atomicAdd(reinterpret_cast<unsigned long long*>(addr), static_cast<unsigned long long>(v)));
  } else {
    return atomicAdd(addr, v);
  }
#else
  return std::atomic_ref<T>(*addr).fetch_add(v, detail::sim_rmw);
#endif
}

// *addr = max(*addr, v)  (integers)
template <class T>
Q35_DEVICE T atomic_max(T* addr, T v) {
  static_assert(std::is_integral_v<T>, "atomic_max: integer types only");
#if Q35_BACKEND_CUDA
  if constexpr (std::is_same_v<T, uint64_t>) {
    return T(atomicMax(reinterpret_cast<unsigned long long*>(addr), static_cast<unsigned long long>(v)));
  } else {
    return atomicMax(addr, v);
  }
#else
  std::atomic_ref<T> a(*addr);
  T old = a.load(detail::sim_load);
  while (old < v && !a.compare_exchange_weak(old, v, detail::sim_rmw, detail::sim_load)) {
  }
  return old;
#endif
}

// *addr = min(*addr, v)  (integers)
template <class T>
Q35_DEVICE T atomic_min(T* addr, T v) {
  static_assert(std::is_integral_v<T>, "atomic_min: integer types only");
#if Q35_BACKEND_CUDA
  if constexpr (std::is_same_v<T, uint64_t>) {
    return T(atomicMin(reinterpret_cast<unsigned long long*>(addr), static_cast<unsigned long long>(v)));
  } else {
    return atomicMin(addr, v);
  }
#else
  std::atomic_ref<T> a(*addr);
  T old = a.load(detail::sim_load);
  while (v < old && !a.compare_exchange_weak(old, v, detail::sim_rmw, detail::sim_load)) {
  }
  return old;
#endif
}

// if (*addr == expected) *addr = desired  (int32_t, uint32_t, uint64_t)
template <class T>
Q35_DEVICE T atomic_cas(T* addr, T expected, T desired) {
#if Q35_BACKEND_CUDA
  if constexpr (std::is_same_v<T, uint64_t>) {
    return T(atomicCAS(reinterpret_cast<unsigned long long*>(addr), static_cast<unsigned long long>(expected),
                       static_cast<unsigned long long>(desired)));
  } else {
    return atomicCAS(addr, expected, desired);
  }
#else
  std::atomic_ref<T>(*addr).compare_exchange_strong(expected, desired, detail::sim_rmw, detail::sim_load);
  return expected;
#endif
}

// *addr = v
template <class T>
Q35_DEVICE T atomic_exchange(T* addr, T v) {
#if Q35_BACKEND_CUDA
  if constexpr (std::is_same_v<T, uint64_t>) {
    return T(atomicExch(reinterpret_cast<unsigned long long*>(addr), static_cast<unsigned long long>(v)));
  } else {
    return atomicExch(addr, v);
  }
#else
  return std::atomic_ref<T>(*addr).exchange(v, detail::sim_rmw);
#endif
}

// *flag = 1, from any number of threads and blocks at once: the error flags kernels raise for the host
// to read after the launch. On a GPU a plain store (every writer stores the same word); on the sim a
// relaxed atomic store, which is what it is in the memory model (and so for sim/race_check.hpp).
Q35_DEVICE void raise_flag(int* flag) {
#if Q35_BACKEND_CUDA
  *flag = 1;
#else
  std::atomic_ref<int>(*flag).store(1, std::memory_order_relaxed);
#endif
}

}  // namespace q35::arch
