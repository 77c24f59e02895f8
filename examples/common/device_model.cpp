// Upload of a bound GGUF file's tensors and the per-layer weight views.
#include "device_model.hpp"

#include <algorithm>
#include <string>

namespace q35::gen {

namespace {
uint64_t shift_of(const std::unordered_map<const io::tensor_info*, uint64_t>& shift, const io::tensor_info* t) {
  const auto it = shift.find(t);
  return it == shift.end() ? 0 : it->second;
}
}  // namespace

quant::weight_view device_model::view(const io::tensor_info* t) const {
  if (!t) return {};
  return quant::weight_view{
      base_ + t->offset - shift_of(shift_, t), t->type, int64_t(t->ne[0]), int64_t(t->ne[1]), int64_t(t->ne[2]), 0};
}

const float* device_model::f32(const io::tensor_info* t) const {
  return t ? reinterpret_cast<const float*>(base_ + t->offset - shift_of(shift_, t)) : nullptr;
}

device_model::upload_plan device_model::plan_upload(const io::gguf_file& f, const io::model_weights& w,
                                                    bool host_experts) {
  // One copy of the data section without the host-resident experts: a tensor moves down by the
  // extents (offset to the next tensor's, a multiple of the file's alignment) of those skipped before it.
  upload_plan p;
  std::vector<const io::tensor_info*> order;
  for (const io::tensor_info& t : f.tensors()) order.push_back(&t);
  std::sort(order.begin(), order.end(), [](auto* a, auto* b) { return a->offset < b->offset; });
  uint64_t skipped = 0;
  for (size_t i = 0; i < order.size(); ++i) {
    const io::tensor_info* t = order[i];
    if (host_experts && is_routed_expert_tensor(w, t)) {
      skipped += (i + 1 < order.size() ? order[i + 1]->offset : t->offset + t->n_bytes) - t->offset;
      continue;
    }
    p.shift[t] = skipped;
    if (!p.runs.empty() && p.runs.back().shift == skipped)
      p.runs.back().to = std::max(p.runs.back().to, t->offset + t->n_bytes);
    else
      p.runs.push_back({t->offset, t->offset + t->n_bytes, skipped});
    p.end = std::max(p.end, t->offset + t->n_bytes - skipped);
  }
  return p;
}

uint64_t device_model::weight_bytes_for(const io::gguf_file& f, const io::model_weights& w, bool host_experts) {
  return plan_upload(f, w, host_experts).end;
}

status device_model::load(const io::gguf_file& f, const io::bound_model& m,
                          const std::function<void(uint64_t, uint64_t)>& progress, int expert_slots) {
  const size_t n_moe = m.hparams.count(models::ffn_type::moe);
  if (expert_slots < 0 || expert_slots >= int(m.hparams.n_experts) || n_moe == 0)
    return load_with(f, m, progress, nullptr);
  const expert_slot_plan plan = expert_slot_plan::uniform(n_moe, expert_slots);
  return load_with(f, m, progress, &plan);
}

status device_model::load(const io::gguf_file& f, const io::bound_model& m,
                          const std::function<void(uint64_t, uint64_t)>& progress, const expert_slot_plan& experts) {
  return load_with(f, m, progress, &experts);
}

status device_model::load_with(const io::gguf_file& f, const io::bound_model& m,
                               const std::function<void(uint64_t, uint64_t)>& progress,
                               const expert_slot_plan* expert_plan) {
  hp_ = m.hparams;
  // Every tensor the decoder reads must be f32 where the kernels take plain floats (norms, conv, biases).
  auto need_f32 = [&](const io::tensor_info* t) -> status {
    if (t && t->type != uint32_t(io::ggml_type::f32))
      return error(status_code::unsupported, f.path() + ": tensor '" + t->name + "' has type " +
                                                 std::string(t->type_name()) + "; q35 reads it only as f32");
    return status::success();
  };
  Q35_TRY(need_f32(m.weights.output_norm));
  for (const io::layer_weights& l : m.weights.layers) {
    Q35_TRY(need_f32(l.attn_norm));
    Q35_TRY(need_f32(l.post_attention_norm));
    Q35_TRY(need_f32(l.attn.q_norm));
    Q35_TRY(need_f32(l.attn.k_norm));
    for (const io::tensor_info* t : {l.gdn.conv1d, l.gdn.dt_bias, l.gdn.a, l.gdn.norm}) Q35_TRY(need_f32(t));
  }

  // Routed experts in host memory (an expert cache), when asked for and smaller than all experts.
  experts_.reset();
  shift_.clear();
  if (expert_plan) {
    if (hp_.count(models::ffn_type::moe) == 0)
      return error(status_code::invalid_argument,
                   f.path() + ": host-resident experts asked for a model without MoE layers");
    experts_ = std::make_unique<expert_store>();
    Q35_TRY(experts_->load(hp_, m.weights, *expert_plan));
  }

  upload_plan up = plan_upload(f, m.weights, experts_ != nullptr);
  shift_ = std::move(up.shift);
  const uint64_t end = up.end;
  Q35_TRY(data_.allocate(size_t(end)));
  const uint8_t* src = f.tensors().empty() ? nullptr : f.tensors().front().data - f.tensors().front().offset;
  const uint64_t chunk = uint64_t(64) << 20;
  uint64_t done = 0;
  for (const upload_plan::run& r : up.runs) {
    // the padding between tensors of a run goes up too (what lies between them in the file)
    for (uint64_t at = r.from; at < r.to; at += chunk) {
      const uint64_t n = std::min(chunk, r.to - at);
      Q35_TRY(copy(data_.data() + (at - r.shift), src + at, size_t(n), copy_kind::host_to_device));
      done += n;
      if (progress) progress(done, end);
    }
  }
  Q35_TRY(synchronize());
  base_ = data_.data();
  bind_views(m.weights);
  return status::success();
}

status device_model::bind(const io::model_hparams& h, const io::model_weights& w, const uint8_t* device_base,
                          uint64_t n_bytes, std::unique_ptr<expert_store> experts) {
  hp_ = h;
  data_ = device_buffer<uint8_t>();
  experts_ = std::move(experts);
  for (size_t il = 0; experts_ && il < w.layers.size(); ++il)
    if (w.layers[il].ffn_kind == models::ffn_type::moe && !experts_->find(int(il)))
      return error(status_code::invalid_argument,
                   "device_model::bind: MoE layer " + std::to_string(il) + " is not in the expert store");
  shift_.clear();
  base_ = device_base;
  bound_bytes_ = n_bytes;
  bind_views(w);
  return status::success();
}

void device_model::bind_views(const io::model_weights& w) {
  token_embd_ = view(w.token_embd);
  output_ = view(w.output);
  output_norm_ = f32(w.output_norm);
  layers_.clear();
  for (const io::layer_weights& l : w.layers) {
    layer_views v;
    v.kind = l.kind;
    v.ffn_kind = l.ffn_kind;
    v.attn_norm = f32(l.attn_norm);
    v.post_attention_norm = f32(l.post_attention_norm);
    if (l.kind == models::layer_type::full_attention) {
      v.attn.q = view(l.attn.q);
      v.attn.k = view(l.attn.k);
      v.attn.v = view(l.attn.v);
      v.attn.out = view(l.attn.output);
      v.attn.q_norm = f32(l.attn.q_norm);
      v.attn.k_norm = f32(l.attn.k_norm);
    } else {
      v.gdn.qkv = view(l.gdn.qkv);
      v.gdn.gate = view(l.gdn.gate);
      v.gdn.beta = view(l.gdn.beta);
      v.gdn.alpha = view(l.gdn.alpha);
      v.gdn.out = view(l.gdn.out);
      v.gdn.conv1d = f32(l.gdn.conv1d);
      v.gdn.dt_bias = f32(l.gdn.dt_bias);
      v.gdn.a = f32(l.gdn.a);
      v.gdn.norm = f32(l.gdn.norm);
    }
    if (l.ffn_kind == models::ffn_type::dense) {
      v.ffn = {view(l.ffn.gate), view(l.ffn.up), view(l.ffn.down)};
    } else {
      const io::moe_weights& e = l.moe;
      v.moe.router = view(e.router);
      if (e.maybe_gate_up_exps) {  // merged: gate rows then up rows of each expert
        const quant::weight_view gu = view(e.maybe_gate_up_exps);
        v.moe.gate_exps = gu.row_range(0, gu.rows / 2);
        v.moe.up_exps = gu.row_range(gu.rows / 2, gu.rows / 2);
      } else {
        v.moe.gate_exps = view(e.maybe_gate_exps);
        v.moe.up_exps = view(e.maybe_up_exps);
      }
      v.moe.down_exps = view(e.down_exps);
      if (experts_) experts_->indexed_views(*experts_->find(int(layers_.size())), v.moe);  // host-resident experts
      v.moe.shexp_gate_inp = view(e.maybe_shared_gate_inp);
      v.moe.shexp_gate = view(e.maybe_shared_gate);
      v.moe.shexp_up = view(e.maybe_shared_up);
      v.moe.shexp_down = view(e.maybe_shared_down);
    }
    layers_.push_back(v);
  }
}

}  // namespace q35::gen
