// Atomics on global or shared memory; each returns the value held before the operation.
#pragma once

#include <cstdint>
#include <type_traits>

#include "q35/core/config.hpp"

#if Q35_BACKEND_SIM
#include <atomic>
#endif

namespace q35::arch {

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
  return std::atomic_ref<T>(*addr).fetch_add(v, std::memory_order_relaxed);
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
  T old = a.load(std::memory_order_relaxed);
  while (old < v && !a.compare_exchange_weak(old, v, std::memory_order_relaxed)) {
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
  T old = a.load(std::memory_order_relaxed);
  while (v < old && !a.compare_exchange_weak(old, v, std::memory_order_relaxed)) {
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
  std::atomic_ref<T>(*addr).compare_exchange_strong(expected, desired, std::memory_order_relaxed);
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
  return std::atomic_ref<T>(*addr).exchange(v, std::memory_order_relaxed);
#endif
}

}  // namespace q35::arch
