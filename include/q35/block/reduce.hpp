// block::reduce<T, Threads>: a reduction over all threads of a block; the caller places the
// shared storage (CUB's TempStorage idiom) and must sync_block() before reusing it.
#pragma once

#include "q35/arch/thread.hpp"
#include "q35/core/config.hpp"
#include "q35/warp/reduce.hpp"

namespace q35::block {

template <class T, int Threads>
struct reduce {
  static_assert(Threads % warp_size == 0 && Threads <= max_block_threads, "Threads: a multiple of 32, <= 1024");
  static constexpr int n_warps = Threads / warp_size;

  struct storage {
    T partial[n_warps];  // [n_warps]: one partial result per warp
  };

  // op over the values of all Threads threads; every thread receives the result. Deterministic:
  // warps reduce by butterfly, then every thread folds the warp partials in warp order.
  template <class Op>
  static Q35_DEVICE T all(T v, storage& s, Op op) {
    v = warp::reduce(v, op);
    if (arch::lane_id() == 0) s.partial[arch::warp_id()] = v;
    arch::sync_block();
    T r = s.partial[0];
    Q35_UNROLL
    for (int w = 1; w < n_warps; ++w) r = op(r, s.partial[w]);
    return r;
  }

  static Q35_DEVICE T sum(T v, storage& s) { return all(v, s, warp::sum_op{}); }
  static Q35_DEVICE T max(T v, storage& s) { return all(v, s, warp::max_op{}); }
  static Q35_DEVICE T min(T v, storage& s) { return all(v, s, warp::min_op{}); }
};

}  // namespace q35::block
