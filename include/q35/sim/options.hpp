// Run-time options of the sim backend: thread order between barriers, worker threads, fiber stacks.
//
// Defaults come from the environment once per process:
//   Q35_SIM_ORDER   = forward | reverse | shuffled[:SEED]   (default forward)
//   Q35_SIM_WORKERS = number of OS threads that run blocks   (default 1)
// Tests change them in a scope with scoped_options.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdlib>
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
  return o;
}

inline options& global_options() {
  static options o = options_from_env();
  return o;
}

}  // namespace detail

inline const options& current_options() { return detail::global_options(); }
inline void set_options(const options& o) { detail::global_options() = o; }

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
