// Warp collectives: shuffles (idx/up/down/xor) over a logical width, votes and warp sync.
//
// Every lane named in `mask` must call the same collective with the same mask and width (the sim
// checks this); T is any trivially copyable type of up to 8 bytes, or a multiple of 4 bytes.
#pragma once

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "q35/core/config.hpp"

#if Q35_BACKEND_SIM
#include "q35/sim/device_api.hpp"
#endif

namespace q35::arch {

inline constexpr uint32_t full_mask = 0xffffffffu;

namespace detail {

enum class shfl_mode { idx, up, down, bxor };

#if Q35_BACKEND_SIM
template <shfl_mode Mode>
inline constexpr sim::collective_kind sim_kind = Mode == shfl_mode::idx    ? sim::collective_kind::shfl_idx
                                                 : Mode == shfl_mode::up   ? sim::collective_kind::shfl_up
                                                 : Mode == shfl_mode::down ? sim::collective_kind::shfl_down
                                                                           : sim::collective_kind::shfl_xor;
#endif

template <shfl_mode Mode>
Q35_DEVICE uint32_t shfl_word(uint32_t mask, uint32_t v, int arg, int width) {
#if Q35_BACKEND_CUDA
  if constexpr (Mode == shfl_mode::idx) return __shfl_sync(mask, v, arg, width);
  if constexpr (Mode == shfl_mode::up) return __shfl_up_sync(mask, v, unsigned(arg), width);
  if constexpr (Mode == shfl_mode::down) return __shfl_down_sync(mask, v, unsigned(arg), width);
  if constexpr (Mode == shfl_mode::bxor) return __shfl_xor_sync(mask, v, arg, width);
#else
  return uint32_t(sim::warp_collective(sim_kind<Mode>, mask, width, v, arg));
#endif
}

template <shfl_mode Mode, class T>
Q35_DEVICE T shfl(uint32_t mask, T v, int arg, int width) {
  static_assert(std::is_trivially_copyable_v<T>, "shuffled types must be trivially copyable");
  static_assert(sizeof(T) <= 4 || sizeof(T) % 4 == 0, "shuffled types: up to 4 bytes, or a multiple of 4");
#if Q35_BACKEND_SIM
  if constexpr (sizeof(T) <= 8) {  // the sim moves up to 64 bits per collective
    uint64_t u = 0;
    std::memcpy(&u, &v, sizeof(T));
    u = sim::warp_collective(sim_kind<Mode>, mask, width, u, arg);
    T r;
    std::memcpy(&r, &u, sizeof(T));
    return r;
  }
#endif
  constexpr int words = int((sizeof(T) + 3) / 4);
  uint32_t w[words] = {};
  std::memcpy(w, &v, sizeof(T));
  Q35_UNROLL
  for (int i = 0; i < words; ++i) w[i] = shfl_word<Mode>(mask, w[i], arg, width);
  T r;
  std::memcpy(&r, w, sizeof(T));
  return r;
}

}  // namespace detail

// Value of `v` held by lane `src_lane` (modulo width, within the caller's width-sized segment).
template <class T>
Q35_DEVICE T shfl_idx(T v, int src_lane, int width = warp_size, uint32_t mask = full_mask) {
  return detail::shfl<detail::shfl_mode::idx>(mask, v, src_lane, width);
}
// Value of lane (lane - delta); lanes below delta in their segment keep their own.
template <class T>
Q35_DEVICE T shfl_up(T v, int delta, int width = warp_size, uint32_t mask = full_mask) {
  return detail::shfl<detail::shfl_mode::up>(mask, v, delta, width);
}
// Value of lane (lane + delta); lanes whose source is past their segment keep their own.
template <class T>
Q35_DEVICE T shfl_down(T v, int delta, int width = warp_size, uint32_t mask = full_mask) {
  return detail::shfl<detail::shfl_mode::down>(mask, v, delta, width);
}
// Value of lane (lane ^ lane_mask); a source in a later segment returns the caller's own value.
template <class T>
Q35_DEVICE T shfl_xor(T v, int lane_mask, int width = warp_size, uint32_t mask = full_mask) {
  return detail::shfl<detail::shfl_mode::bxor>(mask, v, lane_mask, width);
}

// Bit l set when lane l (named in mask) passed a true predicate.
Q35_DEVICE uint32_t ballot(bool pred, uint32_t mask = full_mask) {
#if Q35_BACKEND_CUDA
  return __ballot_sync(mask, pred);
#else
  return uint32_t(sim::warp_collective(sim::collective_kind::ballot, mask, warp_size, pred, 0));
#endif
}
Q35_DEVICE bool any(bool pred, uint32_t mask = full_mask) {
#if Q35_BACKEND_CUDA
  return __any_sync(mask, pred) != 0;
#else
  return sim::warp_collective(sim::collective_kind::any, mask, warp_size, pred, 0) != 0;
#endif
}
Q35_DEVICE bool all(bool pred, uint32_t mask = full_mask) {
#if Q35_BACKEND_CUDA
  return __all_sync(mask, pred) != 0;
#else
  return sim::warp_collective(sim::collective_kind::all, mask, warp_size, pred, 0) != 0;
#endif
}
// Lanes in mask wait for each other; their memory accesses before are visible to each other after.
Q35_DEVICE void sync_warp(uint32_t mask = full_mask) {
#if Q35_BACKEND_CUDA
  __syncwarp(mask);
#else
  sim::warp_collective(sim::collective_kind::sync_warp, mask, warp_size, 0, 0);
#endif
}

}  // namespace q35::arch
