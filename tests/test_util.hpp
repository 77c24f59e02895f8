// Shared helpers for q35 tests: device gating, thread orders, random data, poisoned buffers.
#pragma once

#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "q35/arch/memory.hpp"
#include "q35/core/config.hpp"
#include "q35/core/status.hpp"
#include "q35/launch/launch.hpp"

#if Q35_BACKEND_SIM
#include "q35/sim/options.hpp"
#endif

namespace q35::test {

// Decorator for cases that run kernels: skipped (with doctest's skip count) when no GPU is visible
// in the CUDA build; never skipped on sim.
inline auto needs_device() { return doctest::skip(!device_available()); }

// Runs `body` once per thread order the sim offers (forward, reverse, two shuffles), each as a
// doctest subcase; on cuda runs it once. Correct kernels must pass under all of them.
inline void for_each_order(const std::function<void()>& body) {
#if Q35_BACKEND_SIM
  const sim::thread_order orders[] = {sim::thread_order::forward, sim::thread_order::reverse,
                                      sim::thread_order::shuffled, sim::thread_order::shuffled};
  for (int i = 0; i < 4; ++i) {
    sim::options o = sim::current_options();
    o.order = orders[i];
    o.seed = 1000 + uint64_t(i);
    sim::scoped_options scope(o);
    const std::string order_name = sim::to_string(o.order);
    CAPTURE(order_name);
    body();
  }
#else
  body();
#endif
}

#define Q35_REQUIRE_OK(...)               \
  do {                                    \
    ::q35::status q35_s_ = (__VA_ARGS__); \
    INFO(q35_s_.to_string());             \
    REQUIRE(q35_s_.ok());                 \
  } while (0)

// Uploads a host vector into a new device buffer.
template <class T>
device_buffer<T> to_device(const std::vector<T>& h) {
  device_buffer<T> d;
  Q35_REQUIRE_OK(d.allocate(h.size()));
  Q35_REQUIRE_OK(d.upload(h.data(), h.size()));
  return d;
}

// A device buffer of n elements filled with the 0xff byte pattern (NaN for floats, -1 for ints),
// so an element a kernel forgot to write fails the comparison.
template <class T>
device_buffer<T> poisoned(size_t n) {
  device_buffer<T> d;
  Q35_REQUIRE_OK(d.allocate(n));
  Q35_REQUIRE_OK(fill_bytes(d.data(), 0xff, d.bytes()));
  return d;
}

template <class T>
std::vector<T> to_host(const device_buffer<T>& d) {
  std::vector<T> h(d.size());
  Q35_REQUIRE_OK(d.download(h.data(), h.size()));
  Q35_REQUIRE_OK(synchronize());
  return h;
}

// Uniform floats in [lo, hi) from a seeded engine.
inline std::vector<float> random_floats(size_t n, uint64_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

}  // namespace q35::test
