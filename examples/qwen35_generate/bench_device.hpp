// --bench's clock and device facts: timestamps on the decoder's stream (CUDA events, or on the sim the
// host clock), and the device's name, memory and measured copy and zero-copy bandwidths.
#pragma once

#include <chrono>
#include <stdexcept>
#include <string>
#include <vector>

#include "bench_report.hpp"
#include "q35/core/status.hpp"
#include "q35/launch/launch.hpp"

namespace q35::cli::bench {

using clock_type = std::chrono::steady_clock;

// A failed status as an exception naming what failed (--bench reports it and exits 1).
inline void check(const status& s, const std::string& what) {
  if (!s.ok()) throw std::runtime_error(what + ": " + s.message());
}

// Timestamps on a stream: CUDA events, or on the sim the host clock once the stream has run what was
// queued before (its streams may be lazy: run when the host waits).
class timeline {
 public:
  timeline() = default;
  timeline(const timeline&) = delete;
  timeline& operator=(const timeline&) = delete;
  ~timeline() {
#if Q35_BACKEND_CUDA
    for (cudaEvent_t e : events_) cudaEventDestroy(e);
#endif
  }
  // Makes room for n timestamps (created up front: creating one inside a timed step would add host time).
  void reserve(size_t n) {
#if Q35_BACKEND_CUDA
    while (events_.size() < n) {
      cudaEvent_t e = nullptr;
      check(detail::cuda_status(cudaEventCreate(&e), "cudaEventCreate"), "--bench");
      events_.push_back(e);
    }
#else
    times_.resize(std::max(times_.size(), n));
#endif
  }
  void clear() { used_ = 0; }
  // Records a timestamp on `s`; returns its index.
  size_t record(stream_t s) {
    reserve(used_ + 1);
#if Q35_BACKEND_CUDA
    check(detail::cuda_status(cudaEventRecord(events_[used_], s), "cudaEventRecord"), "--bench");
#else
    check(synchronize(s), "--bench");
    times_[used_] = clock_type::now();
#endif
    return used_++;
  }
  // Milliseconds from timestamp i to j (waits for j).
  double ms(size_t i, size_t j) const {
#if Q35_BACKEND_CUDA
    check(detail::cuda_status(cudaEventSynchronize(events_[j]), "cudaEventSynchronize", status_code::kernel_fault),
          "--bench");
    float t = 0;
    check(detail::cuda_status(cudaEventElapsedTime(&t, events_[i], events_[j]), "cudaEventElapsedTime"), "--bench");
    return double(t);
#else
    return std::chrono::duration<double, std::milli>(times_[j] - times_[i]).count();
#endif
  }

 private:
#if Q35_BACKEND_CUDA
  std::vector<cudaEvent_t> events_;
#else
  std::vector<clock_type::time_point> times_;
#endif
  size_t used_ = 0;
};

// The device's name and memory, its copy bandwidth and (host_experts) the rate a kernel reads pinned host
// memory at; on the sim, device_facts' defaults.
device_facts query_device(bool host_experts);

}  // namespace q35::cli::bench
