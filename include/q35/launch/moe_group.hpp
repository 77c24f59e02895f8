// launch::moe_group: the (token, slot) pairs of a routed call grouped by expert id on the device,
// for the grouped (prefill) GEMMs of launch::moe_ffn (launch/moe.hpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "q35/core/status.hpp"
#include "q35/kernels/moe_group.hpp"
#include "q35/launch/launch.hpp"

#if Q35_BACKEND_CUDA
#include <cub/device/device_radix_sort.cuh>
#endif

namespace q35::launch {

// The pair list sorted stably by expert, each expert's offsets, and its first tile of the grouped
// GEMM. CUDA: CUB's DeviceRadixSort::SortPairs between two small q35 kernels, with caller-owned
// temporary storage; sim (or on request): one q35 kernel doing the same stable counting sort.
enum class moe_group_backend {
  automatic,  // CUB on the CUDA backend, the q35 kernel on sim
  q35,        // the q35 counting-sort kernel on either backend
};

struct moe_group_args {
  const int32_t* ids = nullptr;     // [n_pairs] expert ids, device
  int32_t* sorted_pairs = nullptr;  // [n_pairs]: pairs of expert 0, then 1, ...; ascending within an expert
  int32_t* offsets = nullptr;       // [n_experts + 1]
  int32_t* tile_starts = nullptr;   // [n_experts + 1] (tiles of kernels::moe_group_tile pairs)
  int32_t n_pairs = 0;
  int n_experts = 0;
  int* error_flag = nullptr;  // device int, set to 1 on an id outside [0, n_experts); such pairs join no group
  void* temp = nullptr;       // device scratch of moe_group_temp_bytes(n_pairs, n_experts) bytes
  size_t temp_bytes = 0;
  moe_group_backend backend = moe_group_backend::automatic;
};

namespace detail {
// Bits of the radix sort's keys: ids 0 .. n_experts (n_experts marks an invalid id).
inline int moe_key_bits(int n_experts) {
  int b = 1;
  while ((1 << b) <= n_experts) ++b;
  return b;
}
}  // namespace detail

// Device scratch of moe_group: keys, values and sorted keys [n_pairs] each, plus CUB's temporary storage.
template <int = 0>
inline size_t moe_group_temp_bytes(int32_t n_pairs, int n_experts) {
  size_t cub_bytes = 0;
#if Q35_BACKEND_CUDA
  cub::DeviceRadixSort::SortPairs(nullptr, cub_bytes, static_cast<const int32_t*>(nullptr),
                                  static_cast<int32_t*>(nullptr), static_cast<const int32_t*>(nullptr),
                                  static_cast<int32_t*>(nullptr), int(n_pairs), 0, detail::moe_key_bits(n_experts));
#else
  (void)n_experts;
#endif
  return 3 * detail::align_256(size_t(n_pairs) * sizeof(int32_t)) + detail::align_256(cub_bytes);
}

template <int = 0>
inline status moe_group(const moe_group_args& a, stream_t stream = nullptr) {
  auto bad = [](const std::string& m) { return error(status_code::invalid_argument, "launch::moe_group: " + m); };
  if (a.n_pairs < 0) return bad("n_pairs = " + std::to_string(a.n_pairs) + " is negative");
  if (a.n_experts < 1) return bad("n_experts = " + std::to_string(a.n_experts) + " must be >= 1");
  if (!a.ids || !a.sorted_pairs || !a.offsets || !a.tile_starts || !a.error_flag) return bad("a pointer is null");
  const size_t need = moe_group_temp_bytes(a.n_pairs, a.n_experts);
  if (!a.temp || a.temp_bytes < need)
    return bad("temp of " + std::to_string(a.temp_bytes) + " bytes, " + std::to_string(need) + " needed");
  const size_t pair_bytes = detail::align_256(size_t(a.n_pairs) * sizeof(int32_t));
  auto* base = static_cast<uint8_t*>(a.temp);
  kernels::moe_group_params p{a.ids,
                              reinterpret_cast<int32_t*>(base),
                              reinterpret_cast<int32_t*>(base + pair_bytes),
                              reinterpret_cast<int32_t*>(base + 2 * pair_bytes),
                              a.sorted_pairs,
                              a.offsets,
                              a.tile_starts,
                              a.n_pairs,
                              a.n_experts,
                              a.error_flag};
#if Q35_BACKEND_CUDA
  if (a.backend == moe_group_backend::automatic) {
    Q35_TRY(launch<kernels::moe_keys_kernel>(p, stream));
    size_t cub_bytes = need - 3 * pair_bytes;
    Q35_TRY(q35::detail::cuda_status(
        cub::DeviceRadixSort::SortPairs(base + 3 * pair_bytes, cub_bytes, p.keys,
                                        reinterpret_cast<int32_t*>(base + 2 * pair_bytes), p.values, a.sorted_pairs,
                                        int(a.n_pairs), 0, detail::moe_key_bits(a.n_experts), stream),
        "cub::DeviceRadixSort::SortPairs"));
    return launch<kernels::moe_offsets_kernel>(p, stream);
  }
#endif
  return launch<kernels::moe_group_kernel>(p, stream);
}

}  // namespace q35::launch
