// 16-byte (128-bit) global loads and stores: one LDG.E.128 / STG.E.128 per call on the GPU.
#pragma once

#include <cstdint>
#include <cstring>

#include "q35/core/config.hpp"
#include "q35/core/vec.hpp"

#if Q35_BACKEND_SIM
#include <stdexcept>
#include <string>
#endif

namespace q35::arch {

namespace detail {
Q35_DEVICE void check_16_byte_aligned(const void* p) {
#if Q35_BACKEND_SIM
  // A misaligned vector access faults on the GPU; the sim reports it.
  if (reinterpret_cast<uintptr_t>(p) % 16 != 0) {
    throw std::invalid_argument("128-bit access at an address that is not 16-byte aligned: " +
                                std::to_string(reinterpret_cast<uintptr_t>(p)));
  }
#else
  (void)p;
#endif
}
}  // namespace detail

// Loads 16 bytes at p (16-byte aligned) through the read-only path.
template <class T>
Q35_DEVICE vec16<T> load_16(const T* p) {
  detail::check_16_byte_aligned(p);
  vec16<T> r;
#if Q35_BACKEND_CUDA
  const uint4 u = __ldg(reinterpret_cast<const uint4*>(p));
  std::memcpy(&r, &u, 16);
#else
  std::memcpy(&r, p, 16);
#endif
  return r;
}

// Loads 16 bytes at p bypassing L1 allocation: for weights read exactly once (streamed).
template <class T>
Q35_DEVICE vec16<T> load_16_stream(const T* p) {
  detail::check_16_byte_aligned(p);
  vec16<T> r;
#if Q35_BACKEND_CUDA
  uint4 u;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
               : "=r"(u.x), "=r"(u.y), "=r"(u.z), "=r"(u.w)
               : "l"(p));
  std::memcpy(&r, &u, 16);
#else
  std::memcpy(&r, p, 16);
#endif
  return r;
}

// Stores 16 bytes at p (16-byte aligned).
template <class T>
Q35_DEVICE void store_16(T* p, const vec16<T>& v) {
  detail::check_16_byte_aligned(p);
#if Q35_BACKEND_CUDA
  uint4 u;
  std::memcpy(&u, &v, 16);
  *reinterpret_cast<uint4*>(p) = u;
#else
  std::memcpy(p, &v, 16);
#endif
}

}  // namespace q35::arch
