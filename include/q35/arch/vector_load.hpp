// Vectorized global loads and stores: 16-byte (one LDG.E.128 / STG.E.128 per call on the GPU), and
// the 8- and 4-byte read-only loads of items that are only that aligned.
#pragma once

#include <cstdint>
#include <cstring>

#include "q35/core/config.hpp"
#include "q35/core/vec.hpp"

#if Q35_BACKEND_SIM
#include <stdexcept>
#include <string>

#include "q35/sim/device_api.hpp"
#endif

namespace q35::arch {

namespace detail {
#if Q35_BACKEND_SIM
// In a kernel, the sim's report (naming the kernel, block and thread); elsewhere, an exception.
[[noreturn]] inline void sim_load_fail(const std::string& what) {
  if (sim::detail::tls_block && sim::detail::tls_thread) sim::detail::fail(what);
  throw std::invalid_argument(what);
}
#endif
template <int Bytes>
Q35_DEVICE void check_aligned(const void* p) {
#if Q35_BACKEND_SIM
  // A misaligned vector access faults on the GPU; the sim reports it.
  if (reinterpret_cast<uintptr_t>(p) % Bytes != 0)
    sim_load_fail(std::to_string(8 * Bytes) + "-bit access at an address that is not " + std::to_string(Bytes) +
                  "-byte aligned: " + std::to_string(reinterpret_cast<uintptr_t>(p)));
#else
  (void)p;
#endif
}
Q35_DEVICE void check_16_byte_aligned(const void* p) { check_aligned<16>(p); }

// The read-only loads are ld.global.nc: an address in shared memory is not that memory on the GPU (a
// wrong value or an illegal address); the sim, where all memory is one, reports it.
template <int Bytes>
Q35_DEVICE void check_global_read(const void* p) {
  check_aligned<Bytes>(p);
#if Q35_BACKEND_SIM
  if (sim::in_block_shared(p, 1))
    sim_load_fail(std::to_string(8 * Bytes) +
                  "-bit read-only (global) load from shared memory: " + std::to_string(reinterpret_cast<uintptr_t>(p)));
#endif
}
}  // namespace detail

// Loads 16 bytes at p (16-byte aligned) through the read-only path.
template <class T>
Q35_DEVICE vec16<T> load_16(const T* p) {
  detail::check_global_read<16>(p);
  vec16<T> r;
#if Q35_BACKEND_CUDA
  const uint4 u = __ldg(reinterpret_cast<const uint4*>(p));
  std::memcpy(&r, &u, 16);
#else
  std::memcpy(&r, p, 16);
#endif
  return r;
}

// Loads 8 bytes at p (8-byte aligned) as two words through the read-only path: one LDG.E.64.
Q35_DEVICE vec<uint32_t, 2> load_8(const uint32_t* p) {
  detail::check_global_read<8>(p);
  vec<uint32_t, 2> r;
#if Q35_BACKEND_CUDA
  const uint2 u = __ldg(reinterpret_cast<const uint2*>(p));
  r[0] = u.x, r[1] = u.y;
#else
  std::memcpy(&r, p, 8);
#endif
  return r;
}

// Loads the word at p (4-byte aligned) through the read-only path: one LDG.E.
Q35_DEVICE uint32_t load_4(const uint32_t* p) {
  detail::check_global_read<4>(p);
#if Q35_BACKEND_CUDA
  return __ldg(reinterpret_cast<const unsigned int*>(p));
#else
  uint32_t r;
  std::memcpy(&r, p, 4);
  return r;
#endif
}

// Loads 16 bytes at p bypassing L1 allocation: for weights read exactly once (streamed).
template <class T>
Q35_DEVICE vec16<T> load_16_stream(const T* p) {
  detail::check_global_read<16>(p);
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
