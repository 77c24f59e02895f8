// host_read_kernel: reads pinned, mapped host memory from the device as an expert miss does (16-byte
// loads over the bus, a grid-stride loop): what --bench measures as the zero-copy read bandwidth.
#pragma once

#include <algorithm>
#include <cstdint>

#include "q35/arch/thread.hpp"
#include "q35/arch/vector_load.hpp"
#include "q35/core/dim3.hpp"
#include "q35/core/vec.hpp"

namespace q35::gen {

// Each thread XORs the words it reads and stores the result only if it equals `marker` (a value the
// benchmark's buffer never gives), so the loads stay and a test can see which words were read.
// Thread-to-data mapping: 16-byte word i by thread i mod (grid x threads).
struct host_read_kernel {
  static constexpr uint32_t marker = 0x9e3779b9u;
  struct params {
    const uint32_t* data;  // 16-byte aligned, 4 * n words
    int64_t n;             // 16-byte words
    uint32_t* sink;        // device, one word: marker when a thread's XOR was marker
  };
  struct shared_storage {};
  static constexpr int threads = 256;
  static constexpr int64_t max_blocks = 1024;  // grid-stride beyond this
  static dim3 grid(const params& p) { return dim3(unsigned(std::min(ceil_div<int64_t>(p.n, threads), max_blocks))); }
  Q35_DEVICE void operator()(const params& p, shared_storage&) const {
    uint32_t acc = 0;
    const int64_t stride = int64_t(arch::grid_dim().x) * threads;
    for (int64_t i = int64_t(arch::block_idx().x) * threads + arch::thread_rank(); i < p.n; i += stride) {
      const vec16<uint32_t> v = arch::load_16(p.data + 4 * i);
      acc ^= v[0] ^ v[1] ^ v[2] ^ v[3];
    }
    if (acc == marker) *p.sink = acc;
  }
};

}  // namespace q35::gen
