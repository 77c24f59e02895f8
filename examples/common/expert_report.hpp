// Expert-selection traces of a session (--expert-stats FILE.json, --expert-heatmap FILE.svg, both
// programs): the per-MoE-layer histograms of routed tokens as JSON, and as an SVG heat map (host code
// only). The JSON is also what --expert-plan reads back (expert_trace.hpp).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "q35/core/status.hpp"

namespace q35::gen {

class decoder;

struct expert_report {
  std::string model;  // general.name, else the file's name
  std::string arch;   // general.architecture
  int n_experts = 0;
  int n_experts_used = 0;  // k: experts per token
  int64_t tokens = 0;      // tokens fed to the decoder (prompts + generated)
  // --moe-adaptive-k: the thresholds (nats) and k values; empty when every token used k experts
  std::vector<float> adaptive_entropy_below;
  std::vector<int> adaptive_k_values;
  std::vector<int> layers;                    // the MoE layers' indices in the file
  std::vector<std::vector<uint64_t>> counts;  // [layers.size()][n_experts]: tokens routed to each expert
  // --expert-cache / --vram: the cache's slots per layer (the mean when layers differ: --expert-plan) and,
  // per layer, its record with its own slots; empty: every expert resident
  int cache_slots = -1;
  struct cache_record {
    uint64_t hits = 0, misses = 0, staged = 0, host_bytes = 0, promotions = 0;
    int slots = 0;
  };
  std::vector<cache_record> cache;
  std::string cache_policy;  // how slots are chosen
};

// Fills r's layers, counts and (host-resident experts) cache records, slots and policy from the
// decoder's statistics (decoder_config::expert_stats, or a cache); the caller sets the model's names,
// its expert counts, the tokens fed and the adaptive top-k. Defined with the decoder (decoder_experts.cpp).
status fill_expert_report(decoder& d, expert_report& r);

// The report as JSON (docs/moe.md, "Traces and a heat map", has the schema).
std::string expert_report_json(const expert_report& r);

// The report as an SVG heat map: rows = MoE layers, columns = experts, colour = the expert's share of
// its layer's routed tokens; a colour bar, a title, and each layer's cache hit rate at the right.
std::string expert_heatmap_svg(const expert_report& r);

// An output path for `flag`: "" when `path` names a file that can be created in an existing, writable
// directory, else a one-line message naming the flag and the path.
std::string check_output_path(const std::string& flag, const std::string& path);

// Writes `text` to `path`; throws std::runtime_error naming the flag and the path on failure.
void write_output(const std::string& flag, const std::string& path, const std::string& text);

}  // namespace q35::gen
