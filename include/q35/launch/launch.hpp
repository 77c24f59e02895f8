// The one launch path: launch<K>(params, stream) runs kernel functor K on the active backend.
//
// A kernel functor K provides (the CUTLASS-style contract, see docs/architecture.md):
//   struct params;                                   every pointer and size the kernel reads
//   struct shared_storage;                           trivially constructible, may be empty
//   static constexpr int threads;                    block size (1-1024), also __launch_bounds__
//   static dim3 grid(const params&);                 blocks to launch (zero volume: nothing runs)
//   Q35_DEVICE void operator()(const params&, shared_storage&) const;
// and optionally
//   static dim3 block(const params&);                a 2-D/3-D block shape whose volume is `threads`
//   static size_t dynamic_shared_bytes(const params&);  bytes after shared_storage (arch::shared_tail)
//   static constexpr int min_blocks_per_sm;          __launch_bounds__'s second argument: the register
//                                                    budget becomes 64K / (threads * min_blocks_per_sm);
//                                                    0 (or absent): none
//
// Without a minimum, ptxas (nvcc 13) picks the register count itself and may trim it to an
// occupancy step, which spilled 4-20 bytes in some router, GEMV and MoE instances; those kernels
// declare the blocks per SM they need instead.
//
// Run-time dispatchers (launch::matmul, the layer entry points, rmsnorm, sample, ...) are function
// templates, `template <int = 0>`, although nothing depends on the parameter: the body of a
// non-template inline function instantiates every kernel it can reach in every translation unit that
// includes its header, called or not (launch/matmul.hpp alone: 181 kernels, ~100 s of nvcc per GPU
// architecture). A template instantiates them only where it is called.
#pragma once

#include <atomic>
#include <concepts>
#include <cstddef>
#include <string>
#include <type_traits>
#include <typeinfo>

#include "q35/arch/memory.hpp"
#include "q35/arch/thread.hpp"
#include "q35/core/dim3.hpp"
#include "q35/core/status.hpp"

#if Q35_BACKEND_SIM
#include <cxxabi.h>

#include <cstdio>
#include <cstdlib>
#include <memory>

#include "q35/sim/address_space.hpp"
#include "q35/sim/executor.hpp"
#endif

namespace q35::launch {

template <class K>
concept kernel_functor = requires(const typename K::params& p) {
  typename K::params;
  typename K::shared_storage;
  { K::threads } -> std::convertible_to<int>;
  { K::grid(p) } -> std::convertible_to<dim3>;
}
&&std::is_trivially_default_constructible_v<typename K::shared_storage> && (K::threads >= 1) &&
    (K::threads <= max_block_threads) && std::is_trivially_copyable_v<typename K::params>;

template <kernel_functor K>
dim3 block_shape(const typename K::params& p) {
  if constexpr (requires { K::block(p); }) {
    return K::block(p);
  } else {
    return dim3(unsigned(K::threads));
  }
}

// Shared memory of one block: shared_storage, padded to 16 bytes, then the dynamic tail.
template <kernel_functor K>
size_t shared_bytes(const typename K::params& p) {
  size_t n = arch::shared_tail_offset<typename K::shared_storage>;
  if constexpr (requires { K::dynamic_shared_bytes(p); }) n += K::dynamic_shared_bytes(p);
  return n;
}

// Shared memory one block may use (with the opt-in above 48 KB): 227 KB on sm_90, 163 KB on sm_80 and
// sm_87, 99 KB on sm_86 and sm_89 (RTX 30x0 / 40x0, which run the sm_80 build). Every kernel has a
// tiling that fits the smallest; a kernel with a larger one for larger devices picks by
// max_shared_bytes() (attention prefill at head_dim 256).
inline constexpr size_t smallest_max_shared_bytes = 99 * 1024;
#if Q35_BACKEND_SIM
static_assert(sim::options{}.max_shared_bytes == smallest_max_shared_bytes, "the sim emulates the smallest by default");
#endif
// Above this a CUDA kernel must opt in to more dynamic shared memory.
inline constexpr size_t default_shared_limit_bytes = 48 * 1024;

// Streaming multiprocessors of the current device (the sim answers 132, an H100/H200), for grid sizing.
inline int sm_count() {
#if Q35_BACKEND_CUDA
  static const int n = [] {
    int dev = 0, v = 0;
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&v, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess) {
      (void)cudaGetLastError();  // handled here (a guess): not for a later check to report
      return 132;
    }
    return v;
  }();
  return n;
#else
  return 132;
#endif
}

// What one block of a launch on the current device may use: its cudaDevAttrMaxSharedMemoryPerBlockOptin
// (asked once per device); on the sim, sim::options::max_shared_bytes (the smallest supported GPU's
// unless a test emulates another).
inline size_t max_shared_bytes() {
#if Q35_BACKEND_CUDA
  static std::atomic<int> known[16] = {};  // per device, 0: not asked yet
  int dev = 0, v = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) {
    (void)cudaGetLastError();  // handled here: the smallest is safe everywhere
    return smallest_max_shared_bytes;
  }
  const bool cached = dev >= 0 && dev < 16;
  if (cached && (v = known[dev].load(std::memory_order_relaxed)) > 0) return size_t(v);
  if (cudaDeviceGetAttribute(&v, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) != cudaSuccess || v <= 0) {
    (void)cudaGetLastError();
    return smallest_max_shared_bytes;
  }
  if (cached) known[dev].store(v, std::memory_order_relaxed);
  return size_t(v);
#else
  return sim::current_options().max_shared_bytes;
#endif
}

template <class K>
std::string kernel_name() {
#if Q35_BACKEND_SIM
  int rc = 0;
  std::unique_ptr<char, void (*)(void*)> d(abi::__cxa_demangle(typeid(K).name(), nullptr, nullptr, &rc), std::free);
  return rc == 0 && d ? std::string(d.get()) : std::string(typeid(K).name());
#else
  return typeid(K).name();
#endif
}

namespace detail {
// n rounded up to a multiple of 256 (the alignment of the regions carved out of a workspace).
inline size_t align_256(size_t n) { return (n + 255) / 256 * 256; }
template <class K>
constexpr int min_blocks_per_sm() {
  if constexpr (requires { K::min_blocks_per_sm; }) {
    static_assert(K::min_blocks_per_sm >= 0, "min_blocks_per_sm >= 0");
    return K::min_blocks_per_sm;
  } else {
    return 0;
  }
}

// Whether a launch shape is valid (no strings: the success path of a launch allocates nothing).
inline bool shape_ok(dim3 grid, dim3 block, int threads) {
  return volume(block) == threads && block.z <= 64 && grid.x <= 0x7fffffffu && grid.y <= 65535u && grid.z <= 65535u;
}

// The error naming what is wrong with a shape that is not shape_ok.
inline status check_shape(const std::string& name, dim3 grid, dim3 block, int threads) {
  auto bad = [&](const std::string& what) { return error(status_code::launch_failed, "kernel " + name + ": " + what); };
  if (volume(block) != threads)
    return bad("block shape " + std::to_string(block.x) + "x" + std::to_string(block.y) + "x" +
               std::to_string(block.z) + " does not hold K::threads = " + std::to_string(threads));
  if (block.z > 64) return bad("block.z = " + std::to_string(block.z) + " exceeds 64");
  if (grid.x > 0x7fffffffu || grid.y > 65535u || grid.z > 65535u)
    return bad("grid " + std::to_string(grid.x) + "x" + std::to_string(grid.y) + "x" + std::to_string(grid.z) +
               " exceeds the CUDA limits (2^31-1, 65535, 65535)");
  return status::success();
}

}  // namespace detail

#if Q35_BACKEND_SIM
namespace detail {
// The error of a launch whose parameters point into host memory a GPU cannot reach
// (sim/address_space.hpp).
inline status host_pointer_error(const std::string& kernel, const sim::host_pointer& h) {
  char addr[32];
  std::snprintf(addr, sizeof addr, "%#llx", static_cast<unsigned long long>(h.value));
  return error(status_code::launch_failed,
               "kernel " + kernel + ": the pointer parameter at byte offset " + std::to_string(h.offset) + " is " +
                   addr +
                   ", an address in host memory outside every device and pinned allocation, which a GPU "
                   "cannot reach (allocate it with device_alloc / device_buffer, or host_pinned_alloc)");
}

// Runs K's grid on the sim, to completion.
template <class K>
status sim_run(dim3 grid, dim3 block, size_t smem, const typename K::params& p) {
  const std::string name = kernel_name<K>();
  sim::launch_config cfg{name.c_str(),
                         grid,
                         block,
                         smem,
                         [](const void* ctx, unsigned char* shared) {
                           K{}(*static_cast<const typename K::params*>(ctx),
                               *reinterpret_cast<typename K::shared_storage*>(shared));
                         },
                         &p};
  try {
    return sim::execute(cfg, sim::current_options());
  } catch (const std::exception& e) {  // the sim's options from the environment are invalid
    return error(status_code::invalid_argument, e.what());
  }
}
}  // namespace detail
#endif

#if Q35_BACKEND_CUDA
namespace detail {
template <class K>
__device__ __forceinline__ void run_block(const typename K::params& p) {
  extern __shared__ __align__(16) unsigned char q35_shared[];
  K{}(p, *reinterpret_cast<typename K::shared_storage*>(q35_shared));
}
}  // namespace detail

// The single generic __global__ entry: every q35 kernel runs through it (one of two overloads, by
// whether K asks for a minimum of blocks per SM).
template <class K>
requires(detail::min_blocks_per_sm<K>() == 0) __global__ void __launch_bounds__(K::threads)
    kernel_entry(const __grid_constant__ typename K::params p) {
  detail::run_block<K>(p);
}
template <class K>
requires(detail::min_blocks_per_sm<K>() > 0) __global__
    void __launch_bounds__(K::threads, detail::min_blocks_per_sm<K>())
        kernel_entry(const __grid_constant__ typename K::params p) {
  detail::run_block<K>(p);
}
#endif

// Launches K over K::grid(p). On cuda the launch is asynchronous on `stream` and only launch
// errors are reported here; on sim the grid runs to completion and misuse is reported.
template <kernel_functor K>
status launch(const typename K::params& p, stream_t stream = nullptr) {
  const dim3 grid = K::grid(p);
  const dim3 block = block_shape<K>(p);
  const size_t smem = shared_bytes<K>(p);
  if (volume(grid) == 0) return status::success();
  if (!detail::shape_ok(grid, block, K::threads)) return detail::check_shape(kernel_name<K>(), grid, block, K::threads);
#if Q35_BACKEND_CUDA
  // Messages (and the kernel's name) are built only when something failed: a launch that succeeds
  // allocates nothing on the host.
  if (smem > default_shared_limit_bytes) {
    const cudaError_t rc =
        cudaFuncSetAttribute(kernel_entry<K>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem));
    if (rc != cudaSuccess)
      return q35::detail::cuda_status(
          rc, ("cudaFuncSetAttribute(MaxDynamicSharedMemorySize) for " + kernel_name<K>()).c_str());
  }
  // cudaLaunchKernel returns this launch's own error; reading cudaGetLastError() after a <<<>>> launch
  // would also return an error some earlier call left pending and blame this kernel for it.
  void* args[] = {const_cast<typename K::params*>(&p)};
  const cudaError_t rc =
      cudaLaunchKernel(reinterpret_cast<const void*>(&kernel_entry<K>), grid, block, args, smem, stream);
  if (rc != cudaSuccess) return q35::detail::cuda_status(rc, ("launch of " + kernel_name<K>()).c_str());
  return status::success();
#else
  if (const size_t limit = max_shared_bytes(); smem > limit)
    return error(status_code::launch_failed, "kernel " + kernel_name<K>() + ": " + std::to_string(smem) +
                                                 " bytes of shared memory exceed the " + std::to_string(limit) +
                                                 "-byte limit of the emulated GPU (sim::options::max_shared_bytes; "
                                                 "by default the smallest supported, sm_86 / sm_89)");
  ++sim::counters().launches;  // sim/api_counters.hpp: host calls a test can count
  if (const auto h = sim::find_host_pointer(p)) return detail::host_pointer_error(kernel_name<K>(), *h);
  // Run now, queued on a lazy stream or recorded into a graph, with a copy of the parameters as they
  // are now (cudaLaunchKernel copies them): whatever the caller's variables hold later does not reach
  // the kernel. A queued kernel's failure is reported by the stream's next synchronize.
  auto params = std::make_shared<const typename K::params>(p);
  return q35::detail::issue(stream, "a kernel launch",
                            [params, grid, block, smem] { return detail::sim_run<K>(grid, block, smem, *params); });
#endif
}

}  // namespace q35::launch
