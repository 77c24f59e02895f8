// moe_stage_kernel: the grouped (prefill) path of a layer whose experts are reached through an expert
// index (moe_weights::maybe_index: some in device slots, the rest in mapped host memory) copies the
// experts the call selected, and only those, into packed staging, a window of experts at a time
// ([expert_begin, expert_begin + grid.y)): expert e's gate+up matrices at
// dst_gu + (e - expert_begin) * gu_stride, or its down matrix at dst_dn + (e - expert_begin) * dn_stride
// (one of the two per launch: the other destination is null), the layout of the packed tensors the
// grouped GEMMs read. An expert without pairs (moe_group's offsets) is not copied (nor read by
// the GEMMs); one in host memory crosses the bus once, read by this kernel (zero-copy), however many
// of the call's tokens chose it; one whose index lies in the in-place range (device memory: a slot)
// is not copied at all. For every selected expert of the window, expert_at[e] = where the GEMMs find
// its matrices, in bytes after the window's destination (its place there, or its slot).
#pragma once

#include <cstdint>

#include "q35/arch/atomic.hpp"
#include "q35/arch/thread.hpp"
#include "q35/arch/vector_load.hpp"
#include "q35/core/dim3.hpp"
#include "q35/core/vec.hpp"

namespace q35::kernels {

// Unit: the bytes of one load and store (16, 4 or 1), dividing both strides and every base address.
// Block (c, e): the c-th of grid.x blocks sharing expert e's bytes (a grid-stride loop over them).
template <int Unit>
struct moe_stage_kernel {
  static_assert(Unit == 16 || Unit == 4 || Unit == 1, "16-, 4- or 1-byte copies");
  struct params {
    const int32_t* offsets;   // [n_experts + 1] moe_group's: expert e has pairs [offsets[e], offsets[e + 1])
    const int32_t* index_gu;  // [n_experts] matrix index of expert e's gate+up (moe_expert_index::gate_up)
    const int32_t* index_dn;  // [n_experts] of its down
    const uint8_t* src_gu;    // expert e's gate+up: src_gu + index_gu[e] * gu_stride (gu_stride bytes)
    const uint8_t* src_dn;    // its down: src_dn + index_dn[e] * dn_stride
    uint8_t* dst_gu;          // [n_window][gu_stride] packed, or null: gate+up not copied
    uint8_t* dst_dn;          // [n_window][dn_stride] packed, or null: down not copied
    int64_t gu_stride, dn_stride;
    int expert_begin, n_window;  // the window: experts [expert_begin, expert_begin + n_window)
    int32_t n_virtual;           // every valid index lies in [0, n_virtual)
    // indexes [in_place_begin, in_place_end) of the copied matrix (gate+up or down) are in device
    // memory: read in place
    int32_t in_place_begin, in_place_end;
    int64_t* expert_at;  // [n_experts]: written for the window's selected experts
    int* error_flag;     // set to 1 for a selected expert whose index is outside [0, n_virtual)
  };
  static constexpr int threads = 256;
  // Blocks per expert: enough for the bus (a window of 64 experts x 8 blocks of 256 threads).
  static constexpr int blocks_per_expert = 8;
  struct shared_storage {};
  static dim3 grid(const params& p) { return dim3(unsigned(blocks_per_expert), unsigned(p.n_window)); }

  static Q35_DEVICE void copy_units(uint8_t* dst, const uint8_t* src, int64_t bytes) {
    const int64_t n = bytes / Unit, stride = int64_t(blocks_per_expert) * threads;
    for (int64_t i = int64_t(arch::block_idx().x) * threads + arch::thread_rank(); i < n; i += stride) {
      if constexpr (Unit == 16) {
        arch::store_16(reinterpret_cast<uint32_t*>(dst) + 4 * i,
                       arch::load_16(reinterpret_cast<const uint32_t*>(src) + 4 * i));
      } else if constexpr (Unit == 4) {
        reinterpret_cast<uint32_t*>(dst)[i] = reinterpret_cast<const uint32_t*>(src)[i];
      } else {
        dst[i] = src[i];
      }
    }
  }

  Q35_DEVICE void operator()(const params& p, shared_storage&) const {
    const int w = int(arch::block_idx().y), e = p.expert_begin + w;
    if (p.offsets[e + 1] == p.offsets[e]) return;  // not selected by this call
    const bool gu = p.dst_gu != nullptr;
    const int32_t i = gu ? p.index_gu[e] : p.index_dn[e];
    if (i < 0 || i >= p.n_virtual) {
      if (arch::thread_rank() == 0) arch::raise_flag(p.error_flag);
      return;
    }
    const int64_t stride = gu ? p.gu_stride : p.dn_stride;
    uint8_t* dst = gu ? p.dst_gu : p.dst_dn;
    const uint8_t* src = (gu ? p.src_gu : p.src_dn) + int64_t(i) * stride;
    const bool in_place = i >= p.in_place_begin && i < p.in_place_end;
    if (arch::block_idx().x == 0 && arch::thread_rank() == 0)  // (a difference of addresses: the slot may lie below)
      p.expert_at[e] =
          in_place ? int64_t(reinterpret_cast<uintptr_t>(src) - reinterpret_cast<uintptr_t>(dst)) : int64_t(w) * stride;
    if (!in_place) copy_units(dst + int64_t(w) * stride, src, stride);
  }
};

}  // namespace q35::kernels
