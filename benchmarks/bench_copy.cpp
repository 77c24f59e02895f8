// Copy kernel through arch::load_16/store_16: the achieved fraction of the measured cudaMemcpy
// bandwidth, the sanity anchor for every weight-streaming kernel.
#include "bench_util.hpp"
#include "q35/arch/thread.hpp"
#include "q35/arch/vector_load.hpp"
#include "q35/launch/launch.hpp"

namespace {

using namespace q35;

// y = x, 16 bytes per thread per step; grid-stride over n_vec 16-byte vectors.
struct copy_kernel {
  struct params {
    const float* x;  // [n_vec * 4]
    float* y;        // [n_vec * 4]
    int64_t n_vec;
  };
  struct shared_storage {};
  static constexpr int threads = 256;
  static dim3 grid(const params& p) {
    return dim3(unsigned(std::min<int64_t>(ceil_div<int64_t>(p.n_vec, threads), 8192)));
  }
  Q35_DEVICE void operator()(const params& p, shared_storage&) const {
    const int64_t stride = int64_t(arch::grid_dim().x) * threads;
    for (int64_t i = arch::block_rank() * threads + arch::thread_rank(); i < p.n_vec; i += stride)
      arch::store_16(p.y + i * 4, arch::load_16_stream(p.x + i * 4));
  }
};

void bm_copy_kernel(benchmark::State& state) {
  if (bench::skip_without_gpu(state)) return;
#if Q35_BACKEND_CUDA
  const int64_t bytes = state.range(0);
  device_buffer<float> x, y;
  if (!x.allocate(size_t(bytes / 4)).ok() || !y.allocate(size_t(bytes / 4)).ok()) {
    state.SkipWithError("allocation failed");
    return;
  }
  const copy_kernel::params p{x.data(), y.data(), bytes / 16};
  bench::time_launches(state, [&](int) { return launch::launch<copy_kernel>(p); });
  bench::report_bytes(state, 2.0 * double(bytes));
  state.SetLabel(bench::device_name());
#endif
}
BENCHMARK(bm_copy_kernel)->Arg(int64_t(1) << 28)->Arg(int64_t(1) << 30)->UseManualTime()->Unit(benchmark::kMicrosecond);

}  // namespace
