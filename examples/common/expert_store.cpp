// expert_store: routed experts in pinned host memory behind per-layer device slots (see the header).
#include "expert_store.hpp"

#include <algorithm>
#include <climits>
#include <cstring>

#include "q35/launch/moe.hpp"

namespace q35::gen {

namespace {

int64_t row_bytes_of(uint32_t type, int64_t cols) {
  quant::weight_view v;
  v.type = type, v.cols = cols;
  return v.row_bytes();
}

#if Q35_BACKEND_CUDA
// The address in [raw, raw + stride) that lies a whole number of strides from `anchor`.
uint8_t* place_like(uint8_t* raw, const uint8_t* anchor, int64_t stride) {
  if (!anchor) return raw;
  const int64_t d = (reinterpret_cast<intptr_t>(anchor) - reinterpret_cast<intptr_t>(raw)) % stride;
  return raw + (d < 0 ? d + stride : d);
}
#endif

// (p - base) / stride for a p a whole number of strides above base.
int64_t index_of(const uint8_t* p, const uint8_t* base, int64_t stride) { return (p - base) / stride; }

}  // namespace

bool is_routed_expert_tensor(const io::model_weights& w, const io::tensor_info* t) {
  if (!t) return false;
  for (const io::layer_weights& l : w.layers)
    if (l.ffn_kind == models::ffn_type::moe && (t == l.moe.maybe_gate_exps || t == l.moe.maybe_up_exps ||
                                                t == l.moe.maybe_gate_up_exps || t == l.moe.down_exps))
      return true;
  return false;
}

status expert_layer_shapes(const io::model_weights& w, std::vector<expert_layer_shape>& out) {
  out.clear();
  for (size_t il = 0; il < w.layers.size(); ++il) {
    const io::layer_weights& lw = w.layers[il];
    if (lw.ffn_kind != models::ffn_type::moe) continue;
    const io::moe_weights& m = lw.moe;
    const bool merged = m.maybe_gate_up_exps != nullptr;
    const io::tensor_info* g = merged ? m.maybe_gate_up_exps : m.maybe_gate_exps;
    expert_layer_shape L;
    L.index = int(il);
    L.gate_type = g->type, L.down_type = m.down_exps->type;
    L.n_embd = int64_t(g->ne[0]), L.ff = merged ? int64_t(g->ne[1]) / 2 : int64_t(g->ne[1]);
    L.gate_bytes = L.ff * row_bytes_of(L.gate_type, L.n_embd);
    L.gu_stride = 2 * L.gate_bytes;
    L.dn_stride = L.n_embd * row_bytes_of(L.down_type, L.ff);
    if (L.gate_bytes <= 0 || L.dn_stride <= 0)
      return error(status_code::unsupported, "expert_store: layer " + std::to_string(il) + ": expert tensors '" +
                                                 g->name + "' (" + std::string(g->type_name()) + "), '" +
                                                 m.down_exps->name + "' (" + std::string(m.down_exps->type_name()) +
                                                 ") of an unsupported type");
    out.push_back(L);
  }
  return status::success();
}

int64_t expert_slot_plan::total() const {
  int64_t t = 0;
  for (const int s : slots) t += s;
  return t;
}

status expert_store::allocate(const io::model_hparams& h, const io::model_weights& w, int slots) {
  std::vector<expert_layer_shape> shapes;
  Q35_TRY(expert_layer_shapes(w, shapes));
  return allocate(h, w, expert_slot_plan::uniform(shapes.size(), slots));
}

status expert_store::allocate(const io::model_hparams& h, const io::model_weights& w, const expert_slot_plan& plan) {
  n_experts_ = int(h.n_experts);
  std::vector<expert_layer_shape> shapes;
  Q35_TRY(expert_layer_shapes(w, shapes));
  const int E = n_experts_;
  if (plan.slots.size() != shapes.size() || (!plan.first.empty() && plan.first.size() != shapes.size()))
    return error(status_code::invalid_argument, "expert_store: a slot plan for " + std::to_string(plan.slots.size()) +
                                                    " MoE layers, the model has " + std::to_string(shapes.size()));
  for (size_t j = 0; j < shapes.size(); ++j) {
    const std::string where = "expert_store: layer " + std::to_string(shapes[j].index) + ": ";
    const int S = plan.slots[j];
    if (S < 0 || S > E)
      return error(status_code::invalid_argument,
                   where + std::to_string(S) + " slots is outside 0..n_experts = " + std::to_string(E));
    if (plan.first.empty()) continue;
    const std::vector<int>& first = plan.first[j];
    if (int64_t(first.size()) > S)
      return error(status_code::invalid_argument,
                   where + std::to_string(first.size()) + " first experts for " + std::to_string(S) + " slots");
    std::vector<bool> seen(size_t(E), false);
    for (const int e : first) {
      if (e < 0 || e >= E || seen[size_t(e)])
        return error(status_code::invalid_argument,
                     where + "first expert " + std::to_string(e) + " is out of range or repeated");
      seen[size_t(e)] = true;
    }
  }
  first_ = plan.first;
  if (side_.get()) Q35_TRY(synchronize(side_.get()));  // a second allocate: no copy may outlive its buffers
  Q35_TRY(side_.create(stream_role::side));
  layers_.clear();
  layers_.reserve(shapes.size());
  for (size_t j = 0; j < shapes.size(); ++j) {
    const expert_layer_shape& shape = shapes[j];
    const int il = shape.index, S = plan.slots[j];
    layers_.emplace_back();
    layer& L = layers_.back();
    static_cast<expert_layer_shape&>(L) = shape;

#if Q35_BACKEND_CUDA
    // slots first: home is placed a whole number of strides from them
    Q35_TRY(L.slot_gu_mem.allocate(size_t(S) * size_t(L.gu_stride)));
    Q35_TRY(L.slot_dn_mem.allocate(size_t(S) * size_t(L.dn_stride)));
    Q35_TRY(L.home_gu_mem.allocate(size_t(E + 1) * size_t(L.gu_stride)));
    Q35_TRY(L.home_dn_mem.allocate(size_t(E + 1) * size_t(L.dn_stride)));
    L.slot_gu = S ? L.slot_gu_mem.data() : nullptr;
    L.slot_dn = S ? L.slot_dn_mem.data() : nullptr;
    L.home_gu = place_like(L.home_gu_mem.data(), L.slot_gu, L.gu_stride);
    L.home_dn = place_like(L.home_dn_mem.data(), L.slot_dn, L.dn_stride);
#else
    // the sim's device memory is host memory: the slots follow home in one allocation (two separate
    // heap blocks may lie further apart than 2^31 strides of a tiny model's experts)
    Q35_TRY(L.home_gu_mem.allocate(size_t(E + S) * size_t(L.gu_stride)));
    Q35_TRY(L.home_dn_mem.allocate(size_t(E + S) * size_t(L.dn_stride)));
    L.home_gu = L.home_gu_mem.data(), L.home_dn = L.home_dn_mem.data();
    L.slot_gu = S ? L.home_gu + int64_t(E) * L.gu_stride : nullptr;
    L.slot_dn = S ? L.home_dn + int64_t(E) * L.dn_stride : nullptr;
    if (S) {  // the slots are device memory, as on a GPU (the sim checks the spaces copies and kernels use)
      Q35_TRY(sim_pinned_tail_to_device(L.slot_gu));
      Q35_TRY(sim_pinned_tail_to_device(L.slot_dn));
    }
#endif
    const uint8_t* slot_gu = L.slot_gu;
    const uint8_t* slot_dn = L.slot_dn;
    L.base_gu = slot_gu ? std::min<const uint8_t*>(slot_gu, L.home_gu) : L.home_gu;
    L.base_dn = slot_dn ? std::min<const uint8_t*>(slot_dn, L.home_dn) : L.home_dn;
    int64_t top =
        std::max(index_of(L.home_gu, L.base_gu, L.gu_stride), index_of(L.home_dn, L.base_dn, L.dn_stride)) + E;
    if (S)
      top =
          std::max({top, index_of(slot_gu, L.base_gu, L.gu_stride) + S, index_of(slot_dn, L.base_dn, L.dn_stride) + S});
    if (top >= INT32_MAX)
      return error(status_code::unsupported, "expert_store: layer " + std::to_string(il) +
                                                 ": host and device memory lie too far apart for 32-bit expert "
                                                 "indexes (" +
                                                 std::to_string(top) + " strides)");
    L.n_virtual = int32_t(top);

    L.slot_expert.assign(size_t(S), -1);
    L.expert_slot.assign(size_t(E), -1);
    Q35_TRY(L.index_gu.allocate(size_t(E)));
    Q35_TRY(L.index_dn.allocate(size_t(E)));
    Q35_TRY(L.index_gu_host.allocate(size_t(E)));
    Q35_TRY(L.index_dn_host.allocate(size_t(E)));
  }
  return status::success();
}

void expert_store::fill_from(const io::model_weights& w) {
  const int E = n_experts_;
  for (layer& L : layers_) {
    const io::moe_weights& m = w.layers[size_t(L.index)].moe;
    for (int e = 0; e < E; ++e) {
      uint8_t* dst = L.home_gu + int64_t(e) * L.gu_stride;
      if (m.maybe_gate_up_exps) {
        std::memcpy(dst, m.maybe_gate_up_exps->data + int64_t(e) * L.gu_stride, size_t(L.gu_stride));
      } else {
        std::memcpy(dst, m.maybe_gate_exps->data + int64_t(e) * L.gate_bytes, size_t(L.gate_bytes));
        std::memcpy(dst + L.gate_bytes, m.maybe_up_exps->data + int64_t(e) * L.gate_bytes, size_t(L.gate_bytes));
      }
    }
    std::memcpy(L.home_dn, m.down_exps->data, size_t(E) * size_t(L.dn_stride));
  }
}

status expert_store::settle() {
  for (size_t j = 0; j < layers_.size(); ++j) {
    layer& l = layers_[j];
    // the plan's first experts, then the lowest ids not among them
    std::vector<int> fill = first_.empty() ? std::vector<int>{} : first_[j];
    std::vector<bool> placed(size_t(n_experts_), false);
    for (const int e : fill) placed[size_t(e)] = true;
    for (int e = 0; int(fill.size()) < slots(j); ++e)
      if (!placed[size_t(e)]) fill.push_back(e);
    for (int s = 0; s < slots(j); ++s) {
      const int e = fill[size_t(s)];
      Q35_TRY(copy_to_slot(l, e, s, nullptr));
      l.slot_expert[size_t(s)] = e, l.expert_slot[size_t(e)] = s;
    }
    Q35_TRY(upload_index(l, nullptr));
  }
  return synchronize();
}

int expert_store::slots() const { return layers_.empty() ? 0 : int(total_slots() / int64_t(layers_.size())); }

int64_t expert_store::total_slots() const {
  int64_t t = 0;
  for (size_t j = 0; j < layers_.size(); ++j) t += slots(j);
  return t;
}

expert_store::~expert_store() {
  for (layer& l : layers_) (void)l.copied.synchronize();
  (void)synchronize(side_.get());
}

status expert_store::load(const io::model_hparams& h, const io::model_weights& w, const expert_slot_plan& plan) {
  Q35_TRY(allocate(h, w, plan));
  fill_from(w);
  return settle();
}

status expert_store::load(const io::model_hparams& h, const io::model_weights& w, int slots) {
  Q35_TRY(allocate(h, w, slots));
  fill_from(w);
  return settle();
}

const expert_store::layer* expert_store::find(int il) const {
  for (const layer& l : layers_)
    if (l.index == il) return &l;
  return nullptr;
}

void expert_store::indexed_views(const layer& l, launch::moe_weights& w) const {
  w.gate_exps = {l.base_gu, l.gate_type, l.n_embd, l.ff, n_experts_, l.gu_stride};
  w.up_exps = {l.base_gu + l.gate_bytes, l.gate_type, l.n_embd, l.ff, n_experts_, l.gu_stride};
  w.down_exps = {l.base_dn, l.down_type, l.ff, l.n_embd, n_experts_, l.dn_stride};
  w.maybe_index = {l.index_gu.data(), l.index_dn.data(), l.n_virtual};
  // the slots are device memory: the grouped path reads the experts in them in place
  if (const int32_t S = int32_t(l.slot_expert.size()); S > 0) {
    w.maybe_index.in_place_gu_begin = int32_t(index_of(l.slot_gu, l.base_gu, l.gu_stride));
    w.maybe_index.in_place_dn_begin = int32_t(index_of(l.slot_dn, l.base_dn, l.dn_stride));
    w.maybe_index.in_place_gu_end = w.maybe_index.in_place_gu_begin + S;
    w.maybe_index.in_place_dn_end = w.maybe_index.in_place_dn_begin + S;
  }
}

uint64_t expert_staging_bytes(const std::vector<expert_layer_shape>& layers, int n_experts, int window) {
  uint64_t b = 0;
  for (const expert_layer_shape& l : layers)
    b = std::max<uint64_t>(b, launch::moe_staging_bytes(std::min(n_experts, window), l.gu_stride, l.dn_stride));
  return b;
}

uint64_t expert_store::staging_bytes(int window) const {
  return expert_staging_bytes(std::vector<expert_layer_shape>(layers_.begin(), layers_.end()), n_experts_, window);
}

status expert_store::copy_to_slot(const layer& l, int e, int s, stream_t stream) const {
  Q35_TRY(copy(l.slot_gu + int64_t(s) * l.gu_stride, l.home_gu + int64_t(e) * l.gu_stride, size_t(l.gu_stride),
               copy_kind::host_to_device, stream));
  return copy(l.slot_dn + int64_t(s) * l.dn_stride, l.home_dn + int64_t(e) * l.dn_stride, size_t(l.dn_stride),
              copy_kind::host_to_device, stream);
}

status expert_store::check_position(size_t j, const char* what) const {
  if (j < layers_.size()) return status::success();
  return error(status_code::invalid_argument, std::string("expert_store::") + what + ": layer position " +
                                                  std::to_string(j) + " is outside 0.." +
                                                  std::to_string(int64_t(layers_.size()) - 1));
}

status expert_store::promote(size_t j, std::span<const std::pair<int, int>> moves, stream_t stream) {
  Q35_TRY(check_position(j, "promote"));
  layer& l = layers_[j];
  const std::string where = "expert_store::promote: layer " + std::to_string(l.index);
  if (!l.in_flight.empty()) return error(status_code::invalid_argument, where + " has promotions in flight");
  std::vector<bool> expert_moved(size_t(n_experts_), false), slot_taken(size_t(slots(j)), false);
  for (const auto& [e, s] : moves) {
    if (e < 0 || e >= n_experts_ || s < 0 || s >= slots(j))
      return error(status_code::invalid_argument,
                   where + ": expert " + std::to_string(e) + " or slot " + std::to_string(s) + " out of range");
    if (expert_moved[size_t(e)] || slot_taken[size_t(s)])
      return error(status_code::invalid_argument,
                   where + ": expert " + std::to_string(e) + " or slot " + std::to_string(s) + " named twice");
    expert_moved[size_t(e)] = slot_taken[size_t(s)] = true;
  }
  bool evicted = false;
  for (const auto& [e, s] : moves) {
    if (l.expert_slot[size_t(e)] == s) continue;
    // the slot's expert (and e, if it moves from another slot) is read from home from now on
    if (const int old = l.slot_expert[size_t(s)]; old >= 0) l.expert_slot[size_t(old)] = -1, evicted = true;
    if (const int from = l.expert_slot[size_t(e)]; from >= 0) l.slot_expert[size_t(from)] = -1, evicted = true;
    l.slot_expert[size_t(s)] = -1, l.expert_slot[size_t(e)] = -1;
    l.in_flight.emplace_back(e, s);
  }
  if (l.in_flight.empty()) return status::success();
  if (evicted) Q35_TRY(upload_index(l, stream));
  // the copies start after every kernel enqueued so far on the work stream (which may read the slots)
  Q35_TRY(l.uploaded.record(stream));
  Q35_TRY(l.uploaded.make_wait(side_.get()));
  for (const auto& [e, s] : l.in_flight) Q35_TRY(copy_to_slot(l, e, s, side_.get()));
  return l.copied.record(side_.get());
}

status expert_store::copies_done(size_t j, bool& done) {
  done = true;
  Q35_TRY(check_position(j, "copies_done"));
  return layers_[j].in_flight.empty() ? status::success() : layers_[j].copied.query(done);
}

status expert_store::land(size_t j, stream_t stream) {
  Q35_TRY(check_position(j, "land"));
  layer& l = layers_[j];
  if (l.in_flight.empty()) return status::success();
  Q35_TRY(l.copied.synchronize());
  for (const auto& [e, s] : l.in_flight) l.slot_expert[size_t(s)] = e, l.expert_slot[size_t(e)] = s;
  l.in_flight.clear();
  return upload_index(l, stream);
}

status expert_store::upload_index(layer& l, stream_t stream) {
  // the previous upload read these pinned arrays asynchronously: it must be complete
  Q35_TRY(l.uploaded.synchronize());
  for (int e = 0; e < n_experts_; ++e) {
    const int s = l.expert_slot[size_t(e)];
    const uint8_t* gu = s >= 0 ? l.slot_gu + int64_t(s) * l.gu_stride : l.home_gu + int64_t(e) * l.gu_stride;
    const uint8_t* dn = s >= 0 ? l.slot_dn + int64_t(s) * l.dn_stride : l.home_dn + int64_t(e) * l.dn_stride;
    l.index_gu_host[size_t(e)] = int32_t(index_of(gu, l.base_gu, l.gu_stride));
    l.index_dn_host[size_t(e)] = int32_t(index_of(dn, l.base_dn, l.dn_stride));
  }
  Q35_TRY(copy(l.index_gu.data(), l.index_gu_host.data(), l.index_gu.bytes(), copy_kind::host_to_device, stream));
  Q35_TRY(copy(l.index_dn.data(), l.index_dn_host.data(), l.index_dn.bytes(), copy_kind::host_to_device, stream));
  return l.uploaded.record(stream);
}

uint64_t expert_store::host_bytes() const {
  uint64_t b = 0;
  for (const layer& l : layers_) b += uint64_t(n_experts_) * uint64_t(l.gu_stride + l.dn_stride);
  return b;
}

uint64_t expert_store::device_bytes() const {
  uint64_t b = 0;
  for (const layer& l : layers_)
    b += uint64_t(l.slot_expert.size()) * uint64_t(l.gu_stride + l.dn_stride) + 8 * uint64_t(n_experts_);
  return b;
}

}  // namespace q35::gen
