// Device memory, pinned host memory and streams behind one interface: CUDA runtime calls on cuda, host
// memory on sim (which counts the calls, sim/api_counters.hpp).
// Host code (launchers, tests, the example) uses only these, so it does not change between backends.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "q35/core/config.hpp"
#include "q35/core/status.hpp"

#if Q35_BACKEND_CUDA
#include <cuda_runtime.h>
#else
#include <cstdio>

#include "q35/sim/address_space.hpp"
#include "q35/sim/api_counters.hpp"
#include "q35/sim/options.hpp"
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
// The sim runs work on the null stream to completion before the call returns. A stream made by
// owned_stream is a sim_stream: a lazy one (sim::options::lazy_streams, the default, or a side stream
// made while options::side_stream_lag is set) queues its launches, copies and fills and runs them only
// when someone has to see them: synchronize, an event on it that is waited for or queried (a side
// stream answers "not yet" to `polls` queries first), a free, the stream's end. That is the latest a GPU
// could run them, so a test sees what a host reads, or overwrites, if it does not wait for the stream
// (arch/graph.hpp). A queued operation that fails is reported by the next synchronize, as a kernel fault
// is on CUDA.
//
// Host threads may share the streams, as CUDA's: a free runs every lazy stream's work on the freeing
// thread while the streams' owners queue more. One lock (detail::sim_streams_lock) guards every lazy
// stream's queue, counters and fault, the registry of lazy streams, and the events' view of them; it is
// held while queued work runs, so a stream's work runs on one thread at a time, in order. It is
// recursive because work may wait for another stream's (an event wait runs that stream's queue).
struct sim_capture;
namespace detail {
inline std::recursive_mutex& sim_streams_lock() {
  static std::recursive_mutex m;
  return m;
}
}  // namespace detail
struct sim_stream {
  bool lazy = false;  // queue work until it must be seen (else run it when issued)
  int polls = 0;      // event queries on a lazy stream that report "not yet" before its work runs
  std::deque<std::function<void()> > queued;
  uint64_t enqueued = 0, completed = 0;  // operations queued and run, since the stream was made
  sim_capture* capture = nullptr;        // the graph being recorded from this stream (arch/graph.hpp)
  status fault;                          // the first queued operation that failed, until synchronize
  // What an event or another stream's wait holds on to: null once the stream has ended (its work has
  // all run then), as a CUDA event recorded on a destroyed stream simply completes.
  std::shared_ptr<sim_stream*> handle = std::make_shared<sim_stream*>(this);

  sim_stream() = default;
  sim_stream(const sim_stream&) = delete;
  sim_stream& operator=(const sim_stream&) = delete;
  ~sim_stream() {
    std::lock_guard<std::recursive_mutex> lock(detail::sim_streams_lock());
    *handle = nullptr;
  }

  // Runs f now (its status), or queues it on a lazy stream.
  status submit(std::function<status()> f) {
    if (!lazy) return f();
    std::lock_guard<std::recursive_mutex> lock(detail::sim_streams_lock());
    queued.push_back([this, f = std::move(f)] {
      if (status s = f(); !s.ok() && fault.ok()) fault = std::move(s);
    });
    ++enqueued;
    return status::success();
  }
  // Runs the queued operations up to the n-th.
  void run_to(uint64_t n) {
    std::lock_guard<std::recursive_mutex> lock(detail::sim_streams_lock());
    while (completed < n && !queued.empty()) {
      std::function<void()> f = std::move(queued.front());
      queued.pop_front();
      ++completed;
      f();
    }
  }
  void run_all() { run_to(enqueued); }
  // The first failure of the work run so far (cleared).
  status take_fault() {
    std::lock_guard<std::recursive_mutex> lock(detail::sim_streams_lock());
    return std::exchange(fault, status::success());
  }
};
using stream_t = sim_stream*;

namespace detail {
// The lazy streams that exist (a free runs their work first, as cudaFree waits for the device);
// guarded by sim_streams_lock.
inline std::vector<sim_stream*>& lazy_streams() {
  static std::vector<sim_stream*> streams;
  return streams;
}
inline void run_lazy_streams() {
  std::lock_guard<std::recursive_mutex> lock(sim_streams_lock());
  for (sim_stream* s : lazy_streams()) s->run_all();
}

// Whether [ptr, ptr + bytes) is pinned host memory (host_pinned_alloc): a copy on a stream to or from
// other host memory is pageable, which CUDA does not copy asynchronously.
inline bool is_pinned(const void* ptr, size_t bytes) { return sim::in_space(ptr, bytes, sim::memory_space::pinned); }

// The error of a copy or fill (`what`) whose `side` ("destination", "source") at `p` is not where
// cudaMemcpyAsync / cudaMemsetAsync need it: in one device allocation (device == true) or outside every
// device allocation. On the sim all memory is host memory, so such a call would otherwise copy the right
// bytes; on a GPU it fails (cudaErrorInvalidValue) or reads host memory as a device address.
inline status check_side(const char* what, const char* side, const void* p, size_t bytes, bool device) {
  constexpr auto dev = sim::memory_space::device;
  if (device ? sim::in_space(p, bytes, dev) : !sim::in_space(p, 1, dev)) return status::success();
  const auto g = sim::allocation_at(p);
  char addr[32];
  std::snprintf(addr, sizeof addr, "%p", p);
  std::string is;
  if (!g)
    is = "is host memory outside every device allocation";
  else if (g->space != sim::memory_space::device)
    is = "is pinned host memory, not device memory";
  else if (device)
    is = "runs past the end of its " + std::to_string(g->bytes) + "-byte device allocation (at byte offset " +
         std::to_string(reinterpret_cast<uintptr_t>(p) - g->base) + ")";
  else
    is = "is device memory";
  return error(status_code::invalid_argument, std::string("sim: ") + what + ": the " + side + " (" +
                                                  std::to_string(bytes) + " bytes at " + addr + ") " + is +
                                                  (device ? "; it must be device memory" : "; it must be host memory"));
}
}  // namespace detail

// A CUDA graph as the sim records it (launch_graph::capture, arch/graph.hpp): while `stream` is being
// captured, what is issued on it is recorded, not run: kernels with their parameters as they were at
// the launch, copies and fills with their addresses (the bytes are read when the graph runs). What
// would run once at capture instead of at every replay, or what CUDA's thread-local capture mode
// forbids, makes the capture invalid: its end reports the first such call, as
// cudaStreamEndCapture reports cudaErrorStreamCaptureInvalidated.
//   - allocating or freeing device or pinned memory (cudaMalloc, cudaFree, cudaMallocHost, ...);
//   - synchronizing any stream;
//   - a launch, copy or fill on another stream or the null stream, a copy from or to pageable host
//     memory (its bytes would be staged once), an event recorded or waited for, and a graph replay
//     (CUDA would accept some of these: the sim is stricter, since work outside the graph runs once,
//     at capture, which in a replayed step is a bug).
struct sim_capture {
  sim_stream* stream = nullptr;
  std::vector<std::function<status()> > ops;
  std::string invalid;    // the first call that invalidated the capture; empty while it is valid
  int64_t fault_at = -1;  // sim_fail_next_capture: the recorded operation that fails, or -1
};

namespace detail {
inline int64_t& next_capture_fault() {
  static thread_local int64_t at = -1;
  return at;
}
}  // namespace detail

// Fault injection for tests of what runs after a failed capture (the decoder's eager fallback): the
// next capture begun on this host thread fails at its operation `at_op` (0: the first kernel launch,
// copy or fill it would record), as a CUDA capture fails at a call it cannot record; that call returns
// the error and the capture reports it. A capture with no operation `at_op` succeeds, and the fault is
// spent either way; -1 disarms it.
inline void sim_fail_next_capture(int64_t at_op) { detail::next_capture_fault() = at_op; }

namespace detail {
// The capture in progress on this host thread, or null.
inline sim_capture*& active_capture() {
  static thread_local sim_capture* c = nullptr;
  return c;
}
// Marks the capture in progress invalid because of `what`, and returns the error that call reports.
inline status invalidate_capture(const std::string& what) {
  sim_capture* c = active_capture();
  const std::string msg = what + " while a stream is being captured into a graph";
  if (c && c->invalid.empty()) c->invalid = msg;
  return error(status_code::launch_failed, "sim: " + msg);
}
// Whether work issued on `stream` now is recorded into a graph (true), runs now (false, success), or
// is an error: it is not the captured stream but a capture is in progress.
inline status check_capture(stream_t stream, const char* what, bool& record) {
  record = stream && stream->capture;
  if (record || !active_capture()) return status::success();
  return invalidate_capture(std::string(what) + (stream ? " on another stream" : " on the null stream"));
}
// Issues `op` (`what`, for messages) on `stream`: into the graph being captured from it, queued on a
// lazy stream, or run now.
inline status issue(stream_t stream, const char* what, std::function<status()> op) {
  bool record = false;
  Q35_TRY(check_capture(stream, what, record));
  if (record) {
    sim_capture& cap = *stream->capture;
    if (cap.fault_at == int64_t(cap.ops.size()))
      return invalidate_capture(std::string(what) + " (operation " + std::to_string(cap.fault_at) +
                                ", failed by sim_fail_next_capture)");
    cap.ops.push_back(std::move(op));
    return status::success();
  }
  return stream ? stream->submit(std::move(op)) : op();
}
}  // namespace detail
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
  if (detail::active_capture()) return detail::invalidate_capture("device_alloc (cudaMalloc)");
  if (bytes > SIZE_MAX - 255)
    return error(status_code::out_of_memory, "sim: cannot allocate " + std::to_string(bytes) + " bytes");
  *ptr = std::aligned_alloc(256, (bytes + 255) / 256 * 256);
  if (!*ptr) return error(status_code::out_of_memory, "sim: cannot allocate " + std::to_string(bytes) + " bytes");
  sim::fill_unwritten(*ptr, bytes);
  sim::register_allocation(*ptr, bytes, sim::memory_space::device);  // sim/address_space.hpp
  return status::success();
#endif
}

inline void device_free(void* ptr) {
  if (!ptr) return;
#if Q35_BACKEND_CUDA
  cudaFree(ptr);
#else
  if (detail::active_capture()) (void)detail::invalidate_capture("device_free (cudaFree)");
  detail::run_lazy_streams();  // no queued work may still use it
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
  auto& n = kind == copy_kind::host_to_device   ? sim::counters().h2d_copies
            : kind == copy_kind::device_to_host ? sim::counters().d2h_copies
                                                : sim::counters().d2d_copies;
  ++n;
  Q35_TRY(detail::check_side("copy", "destination", dst, bytes, kind != copy_kind::device_to_host));
  Q35_TRY(detail::check_side("copy", "source", src, bytes, kind != copy_kind::host_to_device));
  // Pageable host memory (not from host_pinned_alloc), as cudaMemcpyAsync treats it: the bytes to
  // upload are staged before the call returns (a later change of the source does not reach the
  // device), and a download returns only once the copy, after the stream's earlier work, is done.
  const bool pageable_src = stream && kind == copy_kind::host_to_device && !detail::is_pinned(src, bytes);
  const bool pageable_dst = stream && kind == copy_kind::device_to_host && !detail::is_pinned(dst, bytes);
  if ((pageable_src || pageable_dst) && detail::active_capture())
    return detail::invalidate_capture("a copy from or to pageable host memory");
  if (pageable_src) {
    auto staged = std::make_shared<std::vector<unsigned char> >(static_cast<const unsigned char*>(src),
                                                                static_cast<const unsigned char*>(src) + bytes);
    return detail::issue(stream, "a copy", [dst, staged] {
      std::memcpy(dst, staged->data(), staged->size());
      return status::success();
    });
  }
  if (pageable_dst) {
    stream->run_all();
    std::memmove(dst, src, bytes);
    return status::success();
  }
  return detail::issue(stream, "a copy", [=] {
    std::memmove(dst, src, bytes);
    return status::success();
  });
#endif
}

// Sets `bytes` of device memory to `byte`.
inline status fill_bytes(void* dst, int byte, size_t bytes, stream_t stream = nullptr) {
  if (bytes == 0) return status::success();
#if Q35_BACKEND_CUDA
  return detail::cuda_status(cudaMemsetAsync(dst, byte, bytes, stream), "cudaMemsetAsync");
#else
  ++sim::counters().fills;
  Q35_TRY(detail::check_side("fill", "destination", dst, bytes, true));
  return detail::issue(stream, "a fill", [=] {
    std::memset(dst, byte, bytes);
    return status::success();
  });
#endif
}

// Waits until all work on `stream` has finished; reports asynchronous kernel faults.
inline status synchronize(stream_t stream = nullptr) {
#if Q35_BACKEND_CUDA
  return detail::cuda_status(cudaStreamSynchronize(stream), "cudaStreamSynchronize", status_code::kernel_fault);
#else
  ++sim::counters().synchronizations;
  if (detail::active_capture()) return detail::invalidate_capture("synchronize (cudaStreamSynchronize)");
  if (!stream) return status::success();
  stream->run_all();
  return stream->take_fault();
#endif
}

// Whether kernels can run here, and if not why: always on sim; on cuda, when a device is visible.
// The error names the runtime's reason (cudaErrorNoDevice, cudaErrorInsufficientDriver: a driver older
// than the toolkit, ...), so that a machine that cannot run kernels says which of these it is.
inline status device_status() {
#if Q35_BACKEND_CUDA
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e == cudaSuccess && n > 0) return status::success();
  (void)cudaGetLastError();  // this function's answer, not a pending error
  if (e == cudaSuccess) return error(status_code::launch_failed, "no CUDA device visible (cudaGetDeviceCount: 0)");
  return error(status_code::launch_failed, std::string("no CUDA device usable: cudaGetDeviceCount: ") +
                                               cudaGetErrorName(e) + ": " + cudaGetErrorString(e));
#else
  return status::success();
#endif
}
inline bool device_available() { return device_status().ok(); }

namespace detail {

// An owning, move-only array of T in the memory of Memory (a struct with static alloc(void**, size_t)
// -> status, free(void*) and a name for messages): what device_buffer and pinned_buffer share.
template <class T, class Memory>
class owned_array {
 public:
  owned_array() = default;
  ~owned_array() { Memory::free(ptr_); }
  owned_array(owned_array&& o) noexcept : ptr_(std::exchange(o.ptr_, nullptr)), size_(std::exchange(o.size_, 0)) {}
  owned_array& operator=(owned_array&& o) noexcept {
    if (this != &o) {
      Memory::free(ptr_);
      ptr_ = std::exchange(o.ptr_, nullptr);
      size_ = std::exchange(o.size_, 0);
    }
    return *this;
  }
  owned_array(const owned_array&) = delete;
  owned_array& operator=(const owned_array&) = delete;

  // Replaces the contents with `n` uninitialised elements.
  status allocate(size_t n) {
    Memory::free(ptr_);
    ptr_ = nullptr;
    size_ = 0;
    if (n > SIZE_MAX / sizeof(T))
      return error(status_code::out_of_memory, std::string(Memory::name) + "::allocate: " + std::to_string(n) +
                                                   " elements of " + std::to_string(sizeof(T)) +
                                                   " bytes overflow size_t");
    void* p = nullptr;
    Q35_TRY(Memory::alloc(&p, n * sizeof(T)));
    ptr_ = static_cast<T*>(p);
    size_ = n;
    return status::success();
  }

  T* data() { return ptr_; }
  const T* data() const { return ptr_; }
  size_t size() const { return size_; }
  size_t bytes() const { return size_ * sizeof(T); }

 private:
  T* ptr_ = nullptr;
  size_t size_ = 0;
};

struct device_memory {
  static constexpr const char* name = "device_buffer";
  static status alloc(void** p, size_t bytes) { return device_alloc(p, bytes); }
  static void free(void* p) { device_free(p); }
};

}  // namespace detail

// An owning, move-only array of T in device memory.
template <class T>
class device_buffer : public detail::owned_array<T, detail::device_memory> {
 public:
  status upload(const T* host, size_t n, stream_t s = nullptr) {
    if (n > this->size())
      return error(status_code::invalid_argument, "device_buffer::upload: more elements than allocated");
    return copy(this->data(), host, n * sizeof(T), copy_kind::host_to_device, s);
  }
  status download(T* host, size_t n, stream_t s = nullptr) const {
    if (n > this->size())
      return error(status_code::invalid_argument, "device_buffer::download: more elements than allocated");
    return copy(host, this->data(), n * sizeof(T), copy_kind::device_to_host, s);
  }
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
  if (detail::active_capture()) return detail::invalidate_capture("host_pinned_alloc (cudaMallocHost)");
  if (bytes > SIZE_MAX - 255)
    return error(status_code::out_of_memory, "sim: cannot allocate " + std::to_string(bytes) + " pinned bytes");
  *ptr = std::aligned_alloc(256, (bytes + 255) / 256 * 256);
  if (!*ptr)
    return error(status_code::out_of_memory, "sim: cannot allocate " + std::to_string(bytes) + " pinned bytes");
  sim::fill_unwritten(*ptr, bytes);
  sim::register_allocation(*ptr, bytes, sim::memory_space::pinned);
  return status::success();
#endif
}

inline void host_pinned_free(void* ptr) {
  if (!ptr) return;
#if Q35_BACKEND_CUDA
  cudaFreeHost(ptr);
#else
  if (detail::active_capture()) (void)detail::invalidate_capture("host_pinned_free (cudaFreeHost)");
  detail::run_lazy_streams();  // no queued copy may still read or write it
  sim::unregister_allocation(ptr);
  std::free(ptr);
#endif
}

#if Q35_BACKEND_SIM
// Sim only: the bytes of the pinned allocation holding `at`, from `at` to its end, become device memory
// (for sim/address_space.hpp's checks), as in a layout the GPU build makes from a pinned and a device
// allocation and the sim from one pinned block.
inline status sim_pinned_tail_to_device(const void* at) {
  const auto g = sim::allocation_at(at);
  if (!g || g->space != sim::memory_space::pinned || !sim::split_allocation(at, sim::memory_space::device))
    return error(status_code::invalid_argument,
                 "sim_pinned_tail_to_device: the address is not inside a pinned allocation");
  return status::success();
}
#endif

namespace detail {
struct pinned_memory {
  static constexpr const char* name = "pinned_buffer";
  static status alloc(void** p, size_t bytes) { return host_pinned_alloc(p, bytes); }
  static void free(void* p) { host_pinned_free(p); }
};
}  // namespace detail

// An owning, move-only array of T in pinned host memory (staging for asynchronous copies).
template <class T>
class pinned_buffer : public detail::owned_array<T, detail::pinned_memory> {
 public:
  T& operator[](size_t i) { return this->data()[i]; }
  const T& operator[](size_t i) const { return this->data()[i]; }
};

}  // namespace q35
