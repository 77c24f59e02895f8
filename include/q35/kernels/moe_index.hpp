// moe_index_kernel: the routed expert ids of a step translated through a layer's expert index (an
// expert cache: some experts in device slots, the rest in mapped host memory) into the matrix
// indexes the decode kernels read, one array for the gate/up kernel and one for the down kernel.
// The expert kernels are unchanged: they compute `base + index * stride` as they compute
// `base + id * stride` for a tensor of n_experts packed matrices.
#pragma once

#include <cstdint>

#include "q35/arch/thread.hpp"
#include "q35/core/dim3.hpp"
#include "q35/core/vec.hpp"
#include "q35/ops/router.hpp"

namespace q35::kernels {

// out[p] = index[ids[p]] for ids in [0, n_experts); an empty slot (ops::router_empty_slot) stays
// empty; any other id becomes n_virtual, which the expert kernels reject (error flag, NaN outputs).
// One thread per (token, slot) pair.
struct moe_index_kernel {
  struct params {
    const int32_t* ids;            // [n_pairs] the router's expert ids
    const int32_t* gate_up_index;  // [n_experts] matrix index of expert e's gate/up
    const int32_t* down_index;     // [n_experts] matrix index of expert e's down
    int32_t* gate_up_out;          // [n_pairs]
    int32_t* down_out;             // [n_pairs]
    int32_t n_pairs;
    int n_experts;
    int32_t n_virtual;  // every index lies in [0, n_virtual)
  };
  static constexpr int threads = 128;
  struct shared_storage {};
  static dim3 grid(const params& p) { return dim3(unsigned(ceil_div<int32_t>(p.n_pairs, threads))); }
  Q35_DEVICE void operator()(const params& p, shared_storage&) const {
    const int32_t i = int32_t(arch::block_idx().x) * threads + arch::thread_rank();
    if (i >= p.n_pairs) return;
    const int32_t e = p.ids[i];
    const bool valid = e >= 0 && e < p.n_experts;
    const int32_t other = e == ops::router_empty_slot ? ops::router_empty_slot : p.n_virtual;
    p.gate_up_out[i] = valid ? p.gate_up_index[e] : other;
    p.down_out[i] = valid ? p.down_index[e] : other;
  }
};

}  // namespace q35::kernels
