// Host API counters of the sim: how many copies (by kind), fills, synchronizations and kernel launches
// the host has issued, so a test can assert what one decode step costs in calls.
//
//   const sim::api_counts before = sim::api_snapshot();
//   ...;  const sim::api_counts step = sim::api_snapshot() - before;  CHECK(step.h2d_copies == 1);
#pragma once

#include <atomic>
#include <cstdint>

namespace q35::sim {

// Counts since the process started (atomic: any thread may count). memory.hpp counts copies, fills and
// synchronizations on sim; `launches` is for launch::launch's sim branch to count.
struct api_counters {
  std::atomic<int64_t> h2d_copies{0}, d2h_copies{0}, d2d_copies{0}, fills{0}, synchronizations{0}, launches{0};
};

inline api_counters& counters() {
  static api_counters c;
  return c;
}

// A plain copy of the counters; the difference of two is what happened in between.
struct api_counts {
  int64_t h2d_copies = 0, d2h_copies = 0, d2d_copies = 0, fills = 0, synchronizations = 0, launches = 0;

  friend api_counts operator-(const api_counts& a, const api_counts& b) {
    return {a.h2d_copies - b.h2d_copies,
            a.d2h_copies - b.d2h_copies,
            a.d2d_copies - b.d2d_copies,
            a.fills - b.fills,
            a.synchronizations - b.synchronizations,
            a.launches - b.launches};
  }
};

inline api_counts api_snapshot() {
  const api_counters& c = counters();
  return {c.h2d_copies.load(), c.d2h_copies.load(),       c.d2d_copies.load(),
          c.fills.load(),      c.synchronizations.load(), c.launches.load()};
}

}  // namespace q35::sim
