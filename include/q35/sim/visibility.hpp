// Delayed store visibility (options::delay_stores): a mode of the sim in which the global-memory
// stores of a block become visible to other blocks' arch::load_coherent only at a thread_fence of
// that block, so a kernel that publishes results across blocks without the fence reads stale data.
//
// How: the sim's device_alloc registers every allocation. At launch the executor copies them all
// into a "visible" image; each block starts with a private copy of the current bytes, and a fence
// by any of its threads moves the bytes the block changed since (its stores, and the atomics it
// made) into the visible image. load_coherent of registered memory reads the visible image. Plain
// loads still read memory directly (the sim cannot see them), which is why kernels read other
// blocks' results through load_coherent. Costs a copy of all device memory per block: for tests of
// small cross-block patterns only; the executor runs such launches on one worker.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <map>
#include <mutex>
#include <vector>

#include "q35/sim/address_space.hpp"

namespace q35::sim {

// The visible image of device memory during one launch in delay_stores mode.
class store_visibility {
 public:
  store_visibility() {
    auto& r = detail::allocations();
    std::lock_guard lock(r.mu);
    for (const auto& [base, g] : r.at) {
      if (g.space != memory_space::device) continue;
      const auto* p = reinterpret_cast<const unsigned char*>(base);
      regions_.push_back({base, g.bytes, std::vector<unsigned char>(p, p + g.bytes), {}});
    }
  }

  // A block starts: what memory holds now is what its later fences compare against.
  void begin_block() {
    for (auto& g : regions_) g.at_block_start.assign(memory(g), memory(g) + g.bytes);
  }

  // A fence of the running block: the bytes it changed become visible to other blocks.
  void publish() {
    for (auto& g : regions_) {
      const unsigned char* now = memory(g);
      for (size_t i = 0; i < g.bytes; ++i) {
        if (now[i] != g.at_block_start[i]) g.visible[i] = g.at_block_start[i] = now[i];
      }
    }
  }

  // Copies n visible bytes at p into out; false when p is not in registered memory.
  bool read(const void* p, size_t n, void* out) const {
    const auto a = reinterpret_cast<uintptr_t>(p);
    for (const auto& g : regions_) {
      if (a >= g.base && a - g.base + n <= g.bytes) {
        std::memcpy(out, g.visible.data() + (a - g.base), n);
        return true;
      }
    }
    return false;
  }

 private:
  struct region {
    uintptr_t base;
    size_t bytes;
    std::vector<unsigned char> visible;         // what other blocks' load_coherent sees
    std::vector<unsigned char> at_block_start;  // the running block's baseline
  };
  static const unsigned char* memory(const region& g) { return reinterpret_cast<const unsigned char*>(g.base); }
  std::vector<region> regions_;
};

namespace detail {
// The running launch's image in delay_stores mode, else null (set by the executor on its worker).
inline thread_local store_visibility* tls_visibility = nullptr;
}  // namespace detail

}  // namespace q35::sim
