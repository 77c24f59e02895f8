// Benchmark harness: CUDA-event timing, the measured copy bandwidth of this GPU, L2-defeating
// buffer rotation and the counters every q35 benchmark reports. Without a GPU every benchmark skips.
#pragma once

#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "q35/arch/memory.hpp"
#include "q35/core/config.hpp"
#include "q35/core/status.hpp"

namespace q35::bench {

// Skips the benchmark (with a message) where no timing is meaningful: the sim, or no visible GPU.
inline bool skip_without_gpu(benchmark::State& state) {
#if Q35_BACKEND_CUDA
  const status s = device_status();
  if (s.ok()) return false;
  state.SkipWithError((s.message() + ": GPU benchmarks skipped").c_str());
#else
  state.SkipWithError("sim backend: timings on the host emulator mean nothing; build with CUDA and run on a GPU");
#endif
  return true;
}

#if Q35_BACKEND_CUDA

// Times one kernel launch sequence with CUDA events on the default stream.
class gpu_timer {
 public:
  gpu_timer() {
    cudaEventCreate(&start_);
    cudaEventCreate(&stop_);
  }
  ~gpu_timer() {
    cudaEventDestroy(start_);
    cudaEventDestroy(stop_);
  }
  void start(cudaStream_t s = nullptr) { cudaEventRecord(start_, s); }
  // Seconds since start().
  double stop(cudaStream_t s = nullptr) {
    cudaEventRecord(stop_, s);
    cudaEventSynchronize(stop_);
    float ms = 0;
    cudaEventElapsedTime(&ms, start_, stop_);
    return double(ms) * 1e-3;
  }

 private:
  cudaEvent_t start_{}, stop_{};
};

// Bytes of L2 on the current device (buffers rotated over > 2x this come from HBM).
inline size_t l2_bytes() {
  int dev = 0, l2 = 0;
  cudaGetDevice(&dev);
  cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, dev);
  return size_t(l2);
}

// Device-to-device cudaMemcpy bandwidth (read + write bytes / time), median of 20 runs over 1 GiB:
// the "measured bandwidth" all q35 results are a fraction of. Measured once per process.
inline double measured_copy_gbps() {
  static const double gbps = [] {
    const size_t bytes = size_t(1) << 30;
    void *a = nullptr, *b = nullptr;
    if (!device_alloc(&a, bytes).ok() || !device_alloc(&b, bytes).ok()) return 0.0;
    gpu_timer t;
    std::vector<double> s;
    for (int i = 0; i < 23; ++i) {
      t.start();
      cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice);
      const double sec = t.stop();
      if (i >= 3) s.push_back(sec);
    }
    device_free(a);
    device_free(b);
    std::sort(s.begin(), s.end());
    return 2.0 * double(bytes) / s[s.size() / 2] * 1e-9;
  }();
  return gbps;
}

inline std::string device_name() {
  cudaDeviceProp p{};
  int dev = 0;
  cudaGetDevice(&dev);
  cudaGetDeviceProperties(&p, dev);
  return p.name;
}

// Times launch(i) (a call returning q35::status; i counts calls, for rotating inputs) with CUDA
// events, `reps` calls per timed sample. A failed call (warm-up or timed) skips the benchmark with its message.
template <class Launch>
void time_launches(benchmark::State& state, Launch&& launch, int reps = 1) {
  const status warm = launch(0);
  const status synced = warm.ok() ? synchronize() : warm;
  if (!synced.ok()) {
    state.SkipWithError(synced.to_string().c_str());
    return;
  }
  gpu_timer t;
  int i = 1;
  std::string failed;  // the first launch error while timing, if any
  for (auto _ : state) {
    t.start();
    for (int r = 0; r < reps; ++r)
      if (const status ls = launch(i++); !ls.ok() && failed.empty()) failed = ls.to_string();
    state.SetIterationTime(t.stop() / reps);
  }
  if (!failed.empty()) state.SkipWithError(failed.c_str());
}

#endif  // Q35_BACKEND_CUDA

// Counters every weight-streaming benchmark reports: bytes per iteration, GB/s, % of copy bandwidth.
inline void report_bytes(benchmark::State& state, double bytes_per_iteration) {
  state.counters["bytes"] = bytes_per_iteration;
  state.counters["GB/s"] =
      benchmark::Counter(bytes_per_iteration * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
#if Q35_BACKEND_CUDA
  const double copy = measured_copy_gbps();
  if (copy > 0)
    state.counters["%copy_bw"] =
        benchmark::Counter(bytes_per_iteration * 1e-9 * 100.0 / copy, benchmark::Counter::kIsIterationInvariantRate);
#endif
}

}  // namespace q35::bench
