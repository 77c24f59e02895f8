// The launch tests' simplest kernel: y[i] = v for i < n (an innocent launch after a failure, the
// work of one round in the multi-thread stream test).
#pragma once

#include "q35/arch/thread.hpp"
#include "q35/launch/launch.hpp"

namespace launch_test {

struct fill_kernel {
  struct params {
    float* y;  // [n]
    int n;
    float v;
  };
  struct shared_storage {};
  static constexpr int threads = 64;
  static q35::dim3 grid(const params& p) { return q35::dim3(unsigned((p.n + threads - 1) / threads)); }
  Q35_DEVICE void operator()(const params& p, shared_storage&) const {
    const int i = int(q35::arch::block_idx().x) * threads + q35::arch::thread_rank();
    if (i < p.n) p.y[i] = p.v;
  }
};

}  // namespace launch_test
