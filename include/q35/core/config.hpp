// Backend selection and the function-qualifier macros every q35 header uses.
#pragma once

// Exactly one backend is active per translation unit:
//   cuda: compiled by nvcc (or another CUDA compiler); kernels run on the GPU.
//   sim:  compiled by a plain host C++20 compiler; kernels run on the host SIMT emulator.
#if defined(__CUDACC__)
#define Q35_BACKEND_CUDA 1
#define Q35_BACKEND_SIM 0
#define Q35_BACKEND_NAME "cuda"
#else
#define Q35_BACKEND_CUDA 0
#define Q35_BACKEND_SIM 1
#define Q35_BACKEND_NAME "sim"
#endif

// True only in the device compilation pass of nvcc (where device intrinsics exist).
#if defined(__CUDA_ARCH__)
#define Q35_DEVICE_PASS 1
#else
#define Q35_DEVICE_PASS 0
#endif

#if Q35_BACKEND_CUDA
#define Q35_DEVICE __device__ __forceinline__
#define Q35_HOST_DEVICE __host__ __device__ __forceinline__
#define Q35_GLOBAL __global__
#else
#define Q35_DEVICE inline
#define Q35_HOST_DEVICE inline
#define Q35_GLOBAL
#endif

// Full unrolling of the next loop on the GPU; the host compiler decides for itself.
#if Q35_BACKEND_CUDA
#define Q35_UNROLL _Pragma("unroll")
#else
#define Q35_UNROLL
#endif

// Keeps the next loop rolled on the GPU (a rarely taken loop that would otherwise cost registers).
#ifndef Q35_NO_UNROLL
#if Q35_BACKEND_CUDA
#define Q35_NO_UNROLL _Pragma("unroll 1")
#else
#define Q35_NO_UNROLL
#endif
#endif

#define Q35_STRINGIFY_(x) #x
#define Q35_STRINGIFY(x) Q35_STRINGIFY_(x)

namespace q35 {

// Threads per warp on every supported GPU (sm_80 ... sm_90) and in the sim.
inline constexpr int warp_size = 32;

// Largest block the CUDA architectures we target (and the sim) accept.
inline constexpr int max_block_threads = 1024;

}  // namespace q35
