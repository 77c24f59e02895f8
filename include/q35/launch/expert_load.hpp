// launch::expert_load: per-layer device histograms of expert selections that the router adds to
// (atomics, across launches), read and reset from the host, and the summary a service monitors.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "q35/arch/memory.hpp"
#include "q35/core/status.hpp"

namespace q35::launch {

struct expert_load_summary {
  uint64_t total = 0;   // selections counted (tokens x experts per token)
  int least_used = -1;  // expert with the fewest selections (lowest index on ties)
  uint64_t least_count = 0;
  int most_used = -1;  // expert with the most selections (lowest index on ties)
  uint64_t most_count = 0;
  double mean = 0;    // total / n_experts
  double stddev = 0;  // population standard deviation of the counts
};

// Summary of one layer's counts (host).
inline expert_load_summary summarize(const std::vector<uint64_t>& counts) {
  expert_load_summary s;
  if (counts.empty()) return s;
  s.least_used = s.most_used = 0;
  s.least_count = s.most_count = counts[0];
  for (size_t e = 0; e < counts.size(); ++e) {
    s.total += counts[e];
    if (counts[e] < s.least_count) s.least_count = counts[e], s.least_used = int(e);
    if (counts[e] > s.most_count) s.most_count = counts[e], s.most_used = int(e);
  }
  const double n = double(counts.size());
  s.mean = double(s.total) / n;
  // stddev = sqrt(sum_e (c_e - mean)^2 / n)
  double ss = 0;
  for (uint64_t c : counts) ss += (double(c) - s.mean) * (double(c) - s.mean);
  s.stddev = std::sqrt(ss / n);
  return s;
}

class expert_load {
 public:
  // n_layers histograms of n_experts 64-bit counters, all zero.
  status allocate(int n_layers, int n_experts) {
    if (n_layers < 1 || n_experts < 1) return error(status_code::invalid_argument, "expert_load: bad size");
    Q35_TRY(counts_.allocate(size_t(n_layers) * size_t(n_experts)));
    n_layers_ = n_layers;
    n_expert_ = n_experts;
    return reset();
  }
  size_t bytes() const { return counts_.bytes(); }  // device memory held
  // The histogram to pass as router_args::maybe_expert_counts for `layer`: [n_experts].
  uint64_t* counts(int layer) { return counts_.data() + size_t(layer) * size_t(n_expert_); }

  // Copies one layer's counts to the host; waits for `stream` (the router launches on it).
  status read(int layer, std::vector<uint64_t>& out, stream_t stream = nullptr) const {
    Q35_TRY(check_layer(layer));
    out.assign(size_t(n_expert_), 0);
    Q35_TRY(copy(out.data(), counts_.data() + size_t(layer) * size_t(n_expert_), size_t(n_expert_) * 8,
                 copy_kind::device_to_host, stream));
    return synchronize(stream);
  }
  // Every layer's counts (out[layer]) in one copy and one wait: what a caller that reads them all
  // between decode steps uses (one synchronization instead of one per layer).
  status read_all(std::vector<std::vector<uint64_t>>& out, stream_t stream = nullptr) const {
    std::vector<uint64_t> all(counts_.size());
    Q35_TRY(copy(all.data(), counts_.data(), counts_.bytes(), copy_kind::device_to_host, stream));
    Q35_TRY(synchronize(stream));
    out.assign(size_t(n_layers_), {});
    for (int l = 0; l < n_layers_; ++l)
      out[size_t(l)].assign(all.begin() + ptrdiff_t(l) * n_expert_, all.begin() + ptrdiff_t(l + 1) * n_expert_);
    return status::success();
  }
  status summary(int layer, expert_load_summary& out, stream_t stream = nullptr) const {
    std::vector<uint64_t> c;
    Q35_TRY(read(layer, c, stream));
    out = summarize(c);
    return status::success();
  }
  // Zeroes one layer's counts, or every layer's (layer = -1).
  status reset(int layer = -1, stream_t stream = nullptr) {
    if (layer < 0) return fill_bytes(counts_.data(), 0, counts_.bytes(), stream);
    Q35_TRY(check_layer(layer));
    return fill_bytes(counts(layer), 0, size_t(n_expert_) * 8, stream);
  }
  int n_layers() const { return n_layers_; }
  int n_experts() const { return n_expert_; }

 private:
  status check_layer(int layer) const {
    if (layer < 0 || layer >= n_layers_)
      return error(status_code::invalid_argument,
                   "expert_load: layer " + std::to_string(layer) + " is outside 0.." + std::to_string(n_layers_ - 1));
    return status::success();
  }
  device_buffer<uint64_t> counts_;
  int n_layers_ = 0;
  int n_expert_ = 0;
};

}  // namespace q35::launch
