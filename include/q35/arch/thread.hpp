// Thread, block and grid indices, the block barrier, and the block's shared storage.
#pragma once

#include <cstddef>
#include <cstdint>

#include "q35/core/config.hpp"
#include "q35/core/dim3.hpp"

#if Q35_BACKEND_SIM
#include "q35/sim/device_api.hpp"
#endif

namespace q35::arch {

#if Q35_BACKEND_CUDA
Q35_DEVICE dim3 thread_idx() { return dim3(threadIdx.x, threadIdx.y, threadIdx.z); }
Q35_DEVICE dim3 block_idx() { return dim3(blockIdx.x, blockIdx.y, blockIdx.z); }
Q35_DEVICE dim3 block_dim() { return dim3(blockDim.x, blockDim.y, blockDim.z); }
Q35_DEVICE dim3 grid_dim() { return dim3(gridDim.x, gridDim.y, gridDim.z); }
// Every thread of the block waits here until all have arrived; shared writes before it are visible after it.
Q35_DEVICE void sync_block() { __syncthreads(); }
#else
inline dim3 thread_idx() { return sim::thread_idx(); }
inline dim3 block_idx() { return sim::block_idx(); }
inline dim3 block_dim() { return sim::block_dim(); }
inline dim3 grid_dim() { return sim::grid_dim(); }
inline void sync_block() { sim::sync_block(); }
#endif

// Linear thread index within the block: x + y * bx + z * bx * by.
Q35_DEVICE int thread_rank() {
  const dim3 t = thread_idx(), b = block_dim();
  return int(t.x + b.x * (t.y + b.y * t.z));
}
Q35_DEVICE int block_threads() { return int(volume(block_dim())); }
Q35_DEVICE int lane_id() { return thread_rank() & (warp_size - 1); }
Q35_DEVICE int warp_id() { return thread_rank() / warp_size; }
// Linear block index within the grid, 64-bit.
Q35_DEVICE int64_t block_rank() {
  const dim3 i = block_idx(), g = grid_dim();
  return int64_t(i.x) + int64_t(g.x) * (int64_t(i.y) + int64_t(g.y) * i.z);
}

// Offset of the dynamic part of a kernel's shared memory, which follows its shared_storage object.
template <class SharedStorage>
inline constexpr size_t shared_tail_offset = (sizeof(SharedStorage) + 15) / 16 * 16;

// The dynamic shared memory of a kernel (the bytes after its shared_storage), as T*.
template <class T, class SharedStorage>
Q35_DEVICE T* shared_tail(SharedStorage& s) {
  return reinterpret_cast<T*>(reinterpret_cast<unsigned char*>(&s) + shared_tail_offset<SharedStorage>);
}

}  // namespace q35::arch
