// Run-time options of the sim backend: thread order between barriers, worker threads, fiber stacks,
// streams, the fill of fresh memory and the shared memory a block may use.
//
// Defaults come from the environment once per process:
//   Q35_SIM_ORDER   = forward | reverse | shuffled[:SEED]   (default forward)
//   Q35_SIM_WORKERS = number of OS threads that run blocks   (default 1)
//   Q35_SIM_FILL    = 0..255 or 0x00..0xff, or none          (default 0xff)
//   Q35_SIM_STREAMS = lazy | eager                           (default lazy)
// Tests change them in a scope with scoped_options.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>

namespace q35::sim {

// The order in which the threads of a block run between two barriers. A correct kernel gives the
// same answer under every order; a missing barrier or a shared-memory race usually does not.
//   forward, reverse: warp by warp (0 first, or last first); each warp runs ahead alone until all its
//                     threads wait at the next barrier, so no other warp has run in between.
//   shuffled:         every thread in a seeded random order, interleaved at every warp collective;
//                     reshuffled after each barrier.
enum class thread_order { forward, reverse, shuffled };

struct options {
  thread_order order = thread_order::forward;
  uint64_t seed = 0x9e3779b97f4a7c15ull;  // shuffled order: permutation seed
  int workers = 1;                        // OS threads running blocks in parallel (>= 1)
  size_t stack_bytes = 128 * 1024;        // per emulated thread, plus one guard page
  // A block's global stores reach other blocks' arch::load_coherent only at its arch::thread_fence
  // (sim/visibility.hpp): exposes a missing fence in cross-block patterns. Runs on one worker and
  // copies all device memory per block: for small tests only.
  bool delay_stores = false;
  // Side streams made while this is > 0 queue their copies until someone must see them, and an event
  // on one reports "not yet" to this many queries before its work runs (arch/memory.hpp, sim_stream):
  // exposes a user of a side stream that reads its results without waiting for them.
  int side_stream_lag = 0;
  // Streams made while this is set (owned_stream, arch/graph.hpp) queue every launch, copy and fill and
  // run them only when the host must see them: a synchronization, an event on the stream that is waited
  // for or queried, a free (cudaFree waits for the device), the stream's end. That is as late as a GPU
  // may run them, so a host that reads a result, or rewrites a pinned buffer a pending copy reads,
  // without waiting sees what it would see on a GPU. Off (eager): the work runs when it is issued.
  bool lazy_streams = true;
  // The byte written into memory nobody has written yet, as CUDA leaves it undefined: each block's
  // shared memory, every device and pinned allocation. A read before a write then shows up (0xff is
  // NaN in f32, f16 and bf16, -1 in signed integers, an id out of range); another byte gives other
  // garbage. -1 (none): allocations as malloc returns them (often zeros), shared memory still 0xff.
  int fill = 0xff;
  // Shared memory one block may use (launch::max_shared_bytes answers this on the sim). By default the
  // smallest of the supported GPUs, 99 KB (sm_86, sm_89: RTX 30x0 / 40x0), so a launch that runs on the
  // sim fits every one of them; 227 * 1024 emulates an H100 / H200 (sm_90), 163 * 1024 an A100 (sm_80),
  // for kernels whose tiling depends on it.
  size_t max_shared_bytes = 99 * 1024;
};

inline const char* to_string(thread_order o) {
  switch (o) {
    case thread_order::forward:
      return "forward";
    case thread_order::reverse:
      return "reverse";
    case thread_order::shuffled:
      return "shuffled";
  }
  return "?";
}

namespace detail {

inline options options_from_env() {
  options o;
  if (const char* s = std::getenv("Q35_SIM_ORDER")) {
    std::string v(s);
    if (v == "forward") {
      o.order = thread_order::forward;
    } else if (v == "reverse") {
      o.order = thread_order::reverse;
    } else if (v.rfind("shuffled", 0) == 0) {
      o.order = thread_order::shuffled;
      const std::string seed = v.substr(8);
      if (!seed.empty()) {
        // ":SEED" with SEED a decimal number
        if (seed.size() < 2 || seed[0] != ':' || seed.find_first_not_of("0123456789", 1) != std::string::npos ||
            seed.size() > 20)
          throw std::invalid_argument("Q35_SIM_ORDER='" + v + "': the seed after 'shuffled:' must be a decimal number");
        o.seed = std::stoull(seed.substr(1));
      }
    } else {
      throw std::invalid_argument("Q35_SIM_ORDER='" + v + "': expected forward, reverse or shuffled[:SEED]");
    }
  }
  if (const char* s = std::getenv("Q35_SIM_WORKERS")) {
    const std::string v(s);
    const int w =
        v.find_first_not_of("0123456789") == std::string::npos && !v.empty() && v.size() <= 3 ? std::stoi(v) : 0;
    if (w < 1 || w > 256) throw std::invalid_argument(std::string("Q35_SIM_WORKERS='") + s + "': expected 1..256");
    o.workers = w;
  }
  if (const char* s = std::getenv("Q35_SIM_FILL")) {
    const std::string v(s);
    const bool hex =
        v.size() == 4 && v.rfind("0x", 0) == 0 && v.find_first_not_of("0123456789abcdefABCDEF", 2) == std::string::npos;
    const bool dec = !v.empty() && v.size() <= 3 && v.find_first_not_of("0123456789") == std::string::npos;
    const int b = hex ? std::stoi(v.substr(2), nullptr, 16) : dec ? std::stoi(v) : -1;
    if (v == "none") {
      o.fill = -1;
    } else if (b < 0 || b > 255) {
      throw std::invalid_argument("Q35_SIM_FILL='" + v + "': expected a byte (0..255 or 0x00..0xff) or none");
    } else {
      o.fill = b;
    }
  }
  if (const char* s = std::getenv("Q35_SIM_STREAMS")) {
    const std::string v(s);
    if (v != "lazy" && v != "eager") throw std::invalid_argument("Q35_SIM_STREAMS='" + v + "': expected lazy or eager");
    o.lazy_streams = v == "lazy";
  }
  return o;
}

inline options& global_options() {
  static options o = options_from_env();
  return o;
}

}  // namespace detail

inline const options& current_options() { return detail::global_options(); }
inline void set_options(const options& o) { detail::global_options() = o; }

// Called by the sim's device_alloc and host_pinned_alloc: [p, p + bytes) gets options::fill.
inline void fill_unwritten(void* p, size_t bytes) {
  if (const int b = current_options().fill; b >= 0) std::memset(p, b, bytes);
}

// Sets the sim options for a scope and restores the previous ones on exit.
class scoped_options {
 public:
  explicit scoped_options(const options& o) : saved_(current_options()) { set_options(o); }
  ~scoped_options() { set_options(saved_); }
  scoped_options(const scoped_options&) = delete;
  scoped_options& operator=(const scoped_options&) = delete;

 private:
  options saved_;
};

}  // namespace q35::sim
