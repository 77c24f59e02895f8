// --bench's device facts (bench_device.hpp).
#include "bench_device.hpp"

#include <algorithm>
#include <cstring>

#include "host_read.hpp"

namespace q35::cli::bench {

namespace {
#if Q35_BACKEND_CUDA
// The measurement of benchmarks/bench_util.hpp measured_copy_gbps: cudaMemcpy of 1 GiB, median of 20.
double measure_copy_gbps() {
  const size_t bytes = size_t(1) << 30;
  device_buffer<uint8_t> a, b;
  if (!a.allocate(bytes).ok() || !b.allocate(bytes).ok()) return 0;
  timeline t;
  std::vector<double> ms;
  for (int i = 0; i < 23; ++i) {
    t.clear();
    const size_t e0 = t.record(nullptr);
    check(copy(b.data(), a.data(), bytes, copy_kind::device_to_device), "--bench: copy bandwidth");
    const size_t e1 = t.record(nullptr);
    if (i >= 3) ms.push_back(t.ms(e0, e1));
  }
  std::sort(ms.begin(), ms.end());
  return 2.0 * double(bytes) / (ms[ms.size() / 2] * 1e-3) * 1e-9;
}

// Bytes / s a kernel reads from pinned host memory (the floor of an expert miss): 1 GiB, median of 7.
double measure_zero_copy_gbps() {
  const size_t bytes = size_t(1) << 30;
  pinned_buffer<uint32_t> host;
  device_buffer<uint32_t> sink;
  if (!host.allocate(bytes / 4).ok() || !sink.allocate(1).ok()) return 0;
  std::memset(host.data(), 0x5a, bytes);
  timeline t;
  std::vector<double> ms;
  for (int i = 0; i < 9; ++i) {
    t.clear();
    const size_t e0 = t.record(nullptr);
    check(launch::launch<gen::host_read_kernel>({host.data(), int64_t(bytes / 16), sink.data()}),
          "--bench: zero-copy read");
    const size_t e1 = t.record(nullptr);
    if (i >= 2) ms.push_back(t.ms(e0, e1));
  }
  std::sort(ms.begin(), ms.end());
  return double(bytes) / (ms[ms.size() / 2] * 1e-3) * 1e-9;
}
#endif

}  // namespace

device_facts query_device(bool host_experts) {
  device_facts d;
#if Q35_BACKEND_CUDA
  check(device_status(), "--bench");
  cudaDeviceProp p{};
  int dev = 0;
  check(detail::cuda_status(cudaGetDevice(&dev), "cudaGetDevice"), "--bench");
  check(detail::cuda_status(cudaGetDeviceProperties(&p, dev), "cudaGetDeviceProperties"), "--bench");
  d.gpu = true;
  d.name = p.name;
  d.copy_gbps = measure_copy_gbps();
  if (host_experts) d.zero_copy_gbps = measure_zero_copy_gbps();
  size_t f = 0, t = 0;
  check(detail::cuda_status(cudaMemGetInfo(&f, &t), "cudaMemGetInfo"), "--bench");
  d.free_bytes = f, d.total_bytes = t;
#else
  (void)host_experts;
#endif
  return d;
}

}  // namespace q35::cli::bench
