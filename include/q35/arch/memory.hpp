// Device memory, pinned host memory and streams behind one interface: CUDA runtime calls on cuda, host
// memory on sim (which counts the calls, sim/api_counters.hpp).
// Host code (launchers, tests, the example) uses only these, so it does not change between backends.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>

#include "q35/core/config.hpp"
#include "q35/core/status.hpp"

#if Q35_BACKEND_CUDA
#include <cuda_runtime.h>
#else
#include "q35/sim/api_counters.hpp"
#include "q35/sim/visibility.hpp"
#endif

namespace q35 {

#if Q35_BACKEND_CUDA
using stream_t = cudaStream_t;
namespace detail {
// The status of a runtime call `what` that returned e. A failed call also leaves e as the thread's
// "last error" (cudaGetLastError), where a later, innocent check would find it again and blame
// itself: the error is taken from there here, where it becomes a status naming the call that failed.
// (A sticky error, an earlier kernel's fault, stays: every later call reports it, as it should.)
inline status cuda_status(cudaError_t e, const char* what, status_code code = status_code::launch_failed) {
  if (e == cudaSuccess) return status::success();
  (void)cudaGetLastError();
  if (e == cudaErrorMemoryAllocation) code = status_code::out_of_memory;
  return error(code, std::string(what) + ": " + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")");
}
}  // namespace detail
#else
struct sim_stream;  // the sim runs every launch to completion before returning: streams are tags
using stream_t = sim_stream*;
#endif

// Allocates `bytes` of device memory (256-byte aligned); *ptr is null for 0 bytes.
inline status device_alloc(void** ptr, size_t bytes) {
  *ptr = nullptr;
  if (bytes == 0) return status::success();
#if Q35_BACKEND_CUDA
  // out_of_memory only for cudaErrorMemoryAllocation (cuda_status); a driver or context error is not
  // reported as a full device
  return detail::cuda_status(cudaMalloc(ptr, bytes), "cudaMalloc");
#else
  if (bytes > SIZE_MAX - 255)
    return error(status_code::out_of_memory, "sim: cannot allocate " + std::to_string(bytes) + " bytes");
  *ptr = std::aligned_alloc(256, (bytes + 255) / 256 * 256);
  if (!*ptr) return error(status_code::out_of_memory, "sim: cannot allocate " + std::to_string(bytes) + " bytes");
  sim::register_allocation(*ptr, bytes);  // for options::delay_stores
  return status::success();
#endif
}

inline void device_free(void* ptr) {
  if (!ptr) return;
#if Q35_BACKEND_CUDA
  cudaFree(ptr);
#else
  sim::unregister_allocation(ptr);
  std::free(ptr);
#endif
}

enum class copy_kind { host_to_device, device_to_host, device_to_device };

// Copies `bytes`; asynchronous with respect to the host on cuda (ordered on `stream`).
inline status copy(void* dst, const void* src, size_t bytes, copy_kind kind, stream_t stream = nullptr) {
  if (bytes == 0) return status::success();
#if Q35_BACKEND_CUDA
  const cudaMemcpyKind k = kind == copy_kind::host_to_device   ? cudaMemcpyHostToDevice
                           : kind == copy_kind::device_to_host ? cudaMemcpyDeviceToHost
                                                               : cudaMemcpyDeviceToDevice;
  return detail::cuda_status(cudaMemcpyAsync(dst, src, bytes, k, stream), "cudaMemcpyAsync");
#else
  (void)stream;
  auto& n = kind == copy_kind::host_to_device   ? sim::counters().h2d_copies
            : kind == copy_kind::device_to_host ? sim::counters().d2h_copies
                                                : sim::counters().d2d_copies;
  ++n;
  std::memmove(dst, src, bytes);
  return status::success();
#endif
}

// Sets `bytes` of device memory to `byte`.
inline status fill_bytes(void* dst, int byte, size_t bytes, stream_t stream = nullptr) {
  if (bytes == 0) return status::success();
#if Q35_BACKEND_CUDA
  return detail::cuda_status(cudaMemsetAsync(dst, byte, bytes, stream), "cudaMemsetAsync");
#else
  (void)stream;
  ++sim::counters().fills;
  std::memset(dst, byte, bytes);
  return status::success();
#endif
}

// Waits until all work on `stream` has finished; reports asynchronous kernel faults.
inline status synchronize(stream_t stream = nullptr) {
#if Q35_BACKEND_CUDA
  return detail::cuda_status(cudaStreamSynchronize(stream), "cudaStreamSynchronize", status_code::kernel_fault);
#else
  (void)stream;
  ++sim::counters().synchronizations;
  return status::success();
#endif
}

// Whether kernels can run here: always on sim; on cuda, when a device is visible.
inline bool device_available() {
#if Q35_BACKEND_CUDA
  int n = 0;
  if (cudaGetDeviceCount(&n) == cudaSuccess) return n > 0;
  (void)cudaGetLastError();  // "no device" is this function's answer, not a pending error
  return false;
#else
  return true;
#endif
}

// An owning, move-only array of T in device memory.
template <class T>
class device_buffer {
 public:
  device_buffer() = default;
  ~device_buffer() { device_free(ptr_); }
  device_buffer(device_buffer&& o) noexcept : ptr_(std::exchange(o.ptr_, nullptr)), size_(std::exchange(o.size_, 0)) {}
  device_buffer& operator=(device_buffer&& o) noexcept {
    if (this != &o) {
      device_free(ptr_);
      ptr_ = std::exchange(o.ptr_, nullptr);
      size_ = std::exchange(o.size_, 0);
    }
    return *this;
  }
  device_buffer(const device_buffer&) = delete;
  device_buffer& operator=(const device_buffer&) = delete;

  // Replaces the contents with `n` uninitialised elements.
  status allocate(size_t n) {
    device_free(ptr_);
    ptr_ = nullptr;
    size_ = 0;
    if (n > SIZE_MAX / sizeof(T))
      return error(status_code::out_of_memory, "device_buffer::allocate: " + std::to_string(n) + " elements of " +
                                                   std::to_string(sizeof(T)) + " bytes overflow size_t");
    void* p = nullptr;
    Q35_TRY(device_alloc(&p, n * sizeof(T)));
    ptr_ = static_cast<T*>(p);
    size_ = n;
    return status::success();
  }
  status upload(const T* host, size_t n, stream_t s = nullptr) {
    if (n > size_) return error(status_code::invalid_argument, "device_buffer::upload: more elements than allocated");
    return copy(ptr_, host, n * sizeof(T), copy_kind::host_to_device, s);
  }
  status download(T* host, size_t n, stream_t s = nullptr) const {
    if (n > size_) return error(status_code::invalid_argument, "device_buffer::download: more elements than allocated");
    return copy(host, ptr_, n * sizeof(T), copy_kind::device_to_host, s);
  }

  T* data() { return ptr_; }
  const T* data() const { return ptr_; }
  size_t size() const { return size_; }
  size_t bytes() const { return size_ * sizeof(T); }

 private:
  T* ptr_ = nullptr;
  size_t size_ = 0;
};

// Allocates `bytes` of page-locked host memory (256-byte aligned; *ptr is null for 0 bytes): a copy
// from or to it is truly asynchronous on cuda, so the host must not touch the bytes while a copy is
// pending. Plain host memory on sim.
inline status host_pinned_alloc(void** ptr, size_t bytes) {
  *ptr = nullptr;
  if (bytes == 0) return status::success();
#if Q35_BACKEND_CUDA
  return detail::cuda_status(cudaMallocHost(ptr, bytes), "cudaMallocHost");
#else
  if (bytes > SIZE_MAX - 255)
    return error(status_code::out_of_memory, "sim: cannot allocate " + std::to_string(bytes) + " pinned bytes");
  *ptr = std::aligned_alloc(256, (bytes + 255) / 256 * 256);
  if (!*ptr)
    return error(status_code::out_of_memory, "sim: cannot allocate " + std::to_string(bytes) + " pinned bytes");
  return status::success();
#endif
}

inline void host_pinned_free(void* ptr) {
  if (!ptr) return;
#if Q35_BACKEND_CUDA
  cudaFreeHost(ptr);
#else
  std::free(ptr);
#endif
}

// An owning, move-only array of T in pinned host memory (staging for asynchronous copies).
template <class T>
class pinned_buffer {
 public:
  pinned_buffer() = default;
  ~pinned_buffer() { host_pinned_free(ptr_); }
  pinned_buffer(pinned_buffer&& o) noexcept : ptr_(std::exchange(o.ptr_, nullptr)), size_(std::exchange(o.size_, 0)) {}
  pinned_buffer& operator=(pinned_buffer&& o) noexcept {
    if (this != &o) {
      host_pinned_free(ptr_);
      ptr_ = std::exchange(o.ptr_, nullptr);
      size_ = std::exchange(o.size_, 0);
    }
    return *this;
  }
  pinned_buffer(const pinned_buffer&) = delete;
  pinned_buffer& operator=(const pinned_buffer&) = delete;

  // Replaces the contents with `n` uninitialised elements.
  status allocate(size_t n) {
    host_pinned_free(ptr_);
    ptr_ = nullptr;
    size_ = 0;
    if (n > SIZE_MAX / sizeof(T))
      return error(status_code::out_of_memory, "pinned_buffer::allocate: " + std::to_string(n) + " elements of " +
                                                   std::to_string(sizeof(T)) + " bytes overflow size_t");
    void* p = nullptr;
    Q35_TRY(host_pinned_alloc(&p, n * sizeof(T)));
    ptr_ = static_cast<T*>(p);
    size_ = n;
    return status::success();
  }

  T* data() { return ptr_; }
  const T* data() const { return ptr_; }
  T& operator[](size_t i) { return ptr_[i]; }
  const T& operator[](size_t i) const { return ptr_[i]; }
  size_t size() const { return size_; }
  size_t bytes() const { return size_ * sizeof(T); }

 private:
  T* ptr_ = nullptr;
  size_t size_ = 0;
};

}  // namespace q35
