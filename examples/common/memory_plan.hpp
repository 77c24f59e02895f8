// memory_plan: where a model's bytes go under a device memory budget (--vram).
//
// The non-expert part is placed first: every tensor but the routed experts (embeddings, attention and
// Gated DeltaNet weights, norms, routers, shared experts, dense FFNs, LM head) and the decoder's own
// memory (KV pool, recurrent slots, workspaces, activations). If the routed experts fit as well, every
// expert is on the device (today's layout). Otherwise they stay in pinned host memory (expert_store)
// and the rest of the budget becomes device slots, the same number in every MoE layer, or, given a traced
// workload (--expert-plan: each MoE layer's selections per expert), the slots that save the most bus
// bytes per token (plan_expert_slots); the decoder then also needs one window's staging area for prompt
// chunks (grouped path) and the expert index tables.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "decoder.hpp"
#include "expert_store.hpp"
#include "q35/io/gguf.hpp"
#include "q35/io/model_weights.hpp"

namespace q35::gen {

struct memory_plan {
  uint64_t budget = 0;            // device bytes q35 may use
  uint64_t weights = 0;           // device bytes of every tensor but the routed experts (as load() lays them)
  uint64_t experts = 0;           // all routed experts of the MoE layers (expert_store's layout)
  uint64_t resident_experts = 0;  // what the routed experts add to load()'s allocation (with the file's padding)
  uint64_t slot_bytes = 0;        // one device slot in every MoE layer
  uint64_t index_bytes = 0;       // the expert index tables (host-resident experts only)
  decoder_memory decoder;         // decoder::memory_needed for the layout chosen
  int n_experts = 0, n_moe_layers = 0;
  int slots = -1;  // device slots per MoE layer (the mean of layer_slots); -1: every expert on the device
  // host-resident experts: each MoE layer's slots and the experts they hold at load (a traced plan: the
  // layer's most selected first; else experts 0, 1, ...), and one expert's bytes in each layer
  std::vector<int> layer_slots;
  std::vector<std::vector<int>> first_experts;
  std::vector<uint64_t> layer_expert_bytes;

  bool host_experts() const { return slots >= 0; }
  uint64_t expert_device_bytes() const {
    if (!host_experts()) return resident_experts;
    uint64_t b = index_bytes;
    for (size_t j = 0; j < layer_slots.size(); ++j) b += uint64_t(layer_slots[j]) * layer_expert_bytes[j];
    return b;
  }
  expert_slot_plan placement() const { return {layer_slots, first_experts}; }
  bool uniform_slots() const;
  uint64_t device_bytes() const { return weights + expert_device_bytes() + decoder.total(); }
  uint64_t host_bytes() const { return host_experts() ? experts : 0; }
  // The plan on one line: bytes by kind on the device, in host memory, slots per layer.
  std::string describe() const;
};

// Plans file `f` (bound weights `w`, hyper-parameters `h`) under `budget` device bytes for a decoder
// configured as `cfg`. slots: a fixed number of device slots per MoE layer (--expert-cache; >= n_experts:
// all on the device) instead of as many as fit. Errors name both numbers: a budget below the non-expert
// part, or fixed slots that do not fit.
// trace: [MoE layer position][expert] selections of a traced workload (read_expert_trace), or null; with
// it, the slots go where they save the most (plan_expert_slots) and hold the most selected experts first.
status plan_memory(const io::gguf_file& f, const io::model_hparams& h, const io::model_weights& w,
                   const decoder_config& cfg, uint64_t budget, std::optional<int64_t> slots, memory_plan& out,
                   const std::vector<std::vector<uint64_t>>* trace = nullptr);

// The same for weights that are not a file's (synthetic models): all_weights and non_expert_weights are
// the device bytes of the weights with and without the routed experts (equal without MoE layers).
status plan_memory(const io::model_hparams& h, const io::model_weights& w, uint64_t all_weights,
                   uint64_t non_expert_weights, const decoder_config& cfg, uint64_t budget,
                   std::optional<int64_t> slots, memory_plan& out,
                   const std::vector<std::vector<uint64_t>>* trace = nullptr);

// The slots of a traced workload within `bytes` of device memory. A slot holding expert e of layer j
// saves count[j][e] / tokens of that layer's expert bytes per token from the bus and costs the same
// bytes of device memory, so the saving per byte is the expert's share of the tokens alone: the plan
// takes the (layer, expert) pairs in order of their counts, each that still fits (ties: the lower
// rank within its layer first, then the lower layer, so a flat trace spreads the slots evenly). It
// returns each layer's slots (0 .. n_experts) and the experts they hold, most selected first.
// expert_bytes[j]: one expert of layer j; counts: [layer][n_experts].
expert_slot_plan plan_expert_slots(const std::vector<uint64_t>& expert_bytes,
                                   const std::vector<std::vector<uint64_t>>& counts, uint64_t bytes);

// The default budget: the device's free memory less a margin for what the plan does not count
// (allocation rounding, the CUDA graphs' memory, the sampler's ring): max(512 MiB, 4 %) of it. On the
// sim (device memory is host memory), or without a usable device, there is no limit: UINT64_MAX.
uint64_t default_memory_budget();

// "24G", "16000M", "1.5GiB", "512MB", "123456789": bytes (K, M, G, T are powers of 1024; a trailing "B"
// or "iB" is allowed). nullopt for anything else, zero, or more than 2^60.
std::optional<uint64_t> parse_memory_size(const std::string& s);

// "1.50 GiB", "12.0 MiB", "512 B".
std::string format_bytes(uint64_t b);

}  // namespace q35::gen
