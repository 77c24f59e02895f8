// expert_store: the routed experts of a model's MoE layers kept in host memory (page-locked, mapped
// into the device's address space), with a cache of `slots` device-resident copies per layer.
//
// Layout per MoE layer:
//   home   (pinned host)  expert e's gate and up matrices back to back at home_gu + e * gu_stride
//                         (gate rows then up rows: the merged ffn_gate_up_exps layout), its down
//                         matrix at home_dn + e * dn_stride: every expert, always valid;
//   slots  (device)       the same layout for `slots` experts: slot_gu + s * gu_stride, slot_dn + ...
//   index  (device int32) [n_experts] twice: expert e's gate/up is at base_gu + gate_up[e] * gu_stride,
//                         its down at base_dn + down[e] * dn_stride, base = the lower of slots and
//                         home; home is placed a whole number of strides from the slots, so that one
//                         formula reaches both. launch::moe_ffn's decode kernels read through it
//                         (launch::moe_expert_index): a miss is read from host memory over the bus by
//                         the same kernel, with no copy and no host round trip.
//
// Promotion: the copies run on the store's side stream, overlapping the decode steps; the decoder's
// stream (the work stream) and the side stream are ordered by events, and the host only polls:
//   1. promote(), on the work stream: if a slot holds an expert, the index names that expert's home
//      (an upload), so that no kernel enqueued afterwards reads the slot; an event marks this point;
//   2. promote(), on the side stream: waits for that event (every kernel that could read the slot's
//      old bytes has finished), copies the new experts' home matrices into their slots, and records
//      `copied`; meanwhile the steps read the new experts from home (a miss);
//   3. between steps, once copies_done() finds `copied` complete (a query, no wait), land() makes the
//      index name the slots (an upload on the work stream): kernels enqueued after it read the whole
//      copy.
// A layer has one batch of promotions in flight at a time. Each index upload first waits for the
// previous one's event (both read the same pinned host array; a step has passed, so it has completed).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "q35/arch/graph.hpp"
#include "q35/arch/memory.hpp"
#include "q35/io/model_weights.hpp"
#include "q35/launch/ffn.hpp"

namespace q35::gen {

// The routed experts of one MoE layer as the store lays them out (known before anything is allocated:
// what the memory planner sizes the slots with).
struct expert_layer_shape {
  int index = 0;  // the layer's index in the file
  uint32_t gate_type = 0, down_type = 0;
  int64_t n_embd = 0, ff = 0;
  int64_t gate_bytes = 0;  // one expert's gate (= up) matrix
  int64_t gu_stride = 0;   // one expert's gate + up
  int64_t dn_stride = 0;   // one expert's down
  uint64_t expert_bytes() const { return uint64_t(gu_stride + dn_stride); }
};

// The shapes of every MoE layer's routed experts in `w` (layers in file order); each layer may hold
// its experts in its own formats.
status expert_layer_shapes(const io::model_weights& w, std::vector<expert_layer_shape>& out);

// Device bytes of the grouped path's staging area for windows of `window` experts (at most n_experts,
// a whole layer) of the largest of `layers` (launch::moe_staging_bytes).
uint64_t expert_staging_bytes(const std::vector<expert_layer_shape>& layers, int n_experts, int window);

// How many device slots each MoE layer has and which experts they hold at load.
struct expert_slot_plan {
  std::vector<int> slots;               // [MoE layer position] 0 .. n_experts
  std::vector<std::vector<int>> first;  // [MoE layer position] the experts of its slots at load, slot by
                                        // slot (distinct; empty: experts 0, 1, ...); at most slots[j]
  static expert_slot_plan uniform(size_t n_layers, int slots) { return {std::vector<int>(n_layers, slots), {}}; }
  int64_t total() const;  // slots over all layers
};

class expert_store {
 public:
  struct layer : expert_layer_shape {
    pinned_buffer<uint8_t> home_gu_mem, home_dn_mem;
    uint8_t *home_gu = nullptr, *home_dn = nullptr;
    device_buffer<uint8_t> slot_gu_mem, slot_dn_mem;  // (cuda; on the sim the slots follow home in home_*_mem)
    uint8_t *slot_gu = nullptr, *slot_dn = nullptr;   // slot s at slot_gu + s * gu_stride (null: no slots)
    const uint8_t *base_gu = nullptr, *base_dn = nullptr;
    device_buffer<int32_t> index_gu, index_dn;
    pinned_buffer<int32_t> index_gu_host, index_dn_host;  // the index as last uploaded
    // what the index names: an expert in a slot is read from it (a promotion in flight is not yet here)
    std::vector<int> slot_expert;                // [slots] expert held, or -1
    std::vector<int> expert_slot;                // [n_experts] its slot, or -1
    std::vector<std::pair<int, int>> in_flight;  // (expert, slot) being copied on the side stream
    owned_event uploaded;                        // the work stream after the last index upload / promote
    owned_event copied;                          // the side stream after the copies in flight
    int32_t n_virtual = 0;
  };

  // Copies the routed experts of every MoE layer of `w` (tensor bytes of the mapped file) into
  // pinned host memory and allocates `slots` device slots per layer (0 .. n_experts), filled with
  // experts 0 .. slots - 1; or the plan's slots per layer, filled with its first experts. A plan
  // with a count per layer other than the model's MoE layers, a count outside 0 .. n_experts, or
  // first experts out of range, repeated or more than the slots is an error naming the layer.
  status load(const io::model_hparams& h, const io::model_weights& w, const expert_slot_plan& plan);
  status load(const io::model_hparams& h, const io::model_weights& w, int slots);
  // load() in its three steps, for experts that do not come from a file (synthetic models):
  // allocate() lays out home and slots for the MoE layers of `w` (home left unwritten; w's tensor
  // data is not read), the caller writes every expert's home bytes (host memory, mapped into the
  // device's address space: a kernel may write them), then settle() fills the slots and the index.
  status allocate(const io::model_hparams& h, const io::model_weights& w, const expert_slot_plan& plan);
  status allocate(const io::model_hparams& h, const io::model_weights& w, int slots);
  void fill_from(const io::model_weights& w);  // home from the tensors' bytes (mapped file)
  status settle();

  // Slots per MoE layer: the same in every layer, else the mean (rounded down); slots(j): layer position j's.
  int slots() const;
  int slots(size_t j) const { return int(layers_[j].slot_expert.size()); }
  int64_t total_slots() const;
  int n_experts() const { return n_experts_; }
  const std::vector<layer>& layers() const { return layers_; }
  // The MoE layer of file index `il`, or null.
  const layer* find(int il) const;

  // The views the kernels read through the index (the grouped path copies the experts a call selects
  // into a staging area first: launch::moe_staging_bytes, kernels/moe_stage.hpp).
  void indexed_views(const layer& l, launch::moe_weights& w) const;
  // Device bytes of the grouped path's staging area for windows of `window` experts (expert_staging_bytes).
  uint64_t staging_bytes(int window) const;

  expert_store() = default;
  ~expert_store();  // waits for the copies in flight
  expert_store(const expert_store&) = delete;
  expert_store& operator=(const expert_store&) = delete;

  // Starts copying experts into slots of layer position j (moves: (expert, slot) pairs, distinct
  // experts and slots), after the work enqueued on `stream` so far (see the file comment). The slots'
  // experts go home at once; the new ones are named by the index after land(). An error while layer j
  // has promotions in flight, or for a j that is not a layer position.
  status promote(size_t j, std::span<const std::pair<int, int>> moves, stream_t stream);
  bool in_flight(size_t j) const { return !layers_[j].in_flight.empty(); }
  // Whether layer j's copies in flight have completed (a query: no wait; true when none are in flight).
  status copies_done(size_t j, bool& done);
  // Layer j's promotions in flight land (after waiting for their copies, if need be): the index names
  // their slots for what is enqueued on `stream` after this.
  status land(size_t j, stream_t stream);

  uint64_t host_bytes() const;    // home copies
  uint64_t device_bytes() const;  // slots and indexes
  uint64_t expert_bytes(size_t j) const { return uint64_t(layers_[j].gu_stride + layers_[j].dn_stride); }

 private:
  status upload_index(layer& l, stream_t stream);
  status check_position(size_t j, const char* what) const;  // an error naming a bad layer position
  // Enqueues the copy of expert e's home matrices into slot s.
  status copy_to_slot(const layer& l, int e, int s, stream_t stream) const;

  int n_experts_ = 0;
  std::vector<std::vector<int>> first_;  // the plan's first experts per layer (settle() places them)
  std::vector<layer> layers_;
  owned_stream side_;  // promotions' copies
};

// Whether tensor `t` is a routed-expert tensor of a MoE layer (kept in host memory by an expert store).
bool is_routed_expert_tensor(const io::model_weights& w, const io::tensor_info* t);

}  // namespace q35::gen
