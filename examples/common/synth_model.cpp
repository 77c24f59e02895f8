// Layout, Q4_K_M types and device fill of a synthetic full-size model, and its binding as a device_model.
#include "synth_model.hpp"

#include <map>

#include "memory_plan.hpp"
#include "q35/core/numeric.hpp"
#include "q35/launch/launch.hpp"
#include "q35/models/qwen35.hpp"
#include "q35/models/qwen35_moe.hpp"
#include "q35/models/schedule.hpp"
#include "q35/models/tiny.hpp"

namespace q35::gen {

namespace {

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}
bool contains(const std::string& s, const char* part) { return s.find(part) != std::string::npos; }

// The "more bits" layers of llama-quantize's Q4_K_M (use_more_bits): i < n/8 || i >= 7n/8 || (i - n/8) % 3 == 2.
bool more_bits(int64_t i, int64_t n) { return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2; }

// Bytes of a tensor of type `t` and shape `ne` (ne[0] a multiple of the block size).
uint64_t tensor_bytes(io::ggml_type t, const io::tensor_shape& ne) {
  const uint64_t rows = ne[1] * ne[2] * ne[3];
  switch (t) {
    case io::ggml_type::q4_k:
      return ne[0] / 256 * 144 * rows;
    case io::ggml_type::q6_k:
      return ne[0] / 256 * 210 * rows;
    default:
      return ne[0] * 4 * rows;
  }
}

// splitmix64 step: the per-tensor seed.
uint64_t mix(uint64_t x) { return synth_fill_kernel::random_bits(x, 1); }

// tensor_infos of `layout` (offsets as laid out) and the weights bound to them by name, as
// io::bind_weights does for a file (tied: there is no output.weight).
std::vector<io::tensor_info> infos_of(const std::vector<synth_tensor>& layout) {
  std::vector<io::tensor_info> infos;
  infos.reserve(layout.size());
  for (const synth_tensor& t : layout) {
    io::tensor_info i;
    i.name = t.name;
    i.type = uint32_t(t.type);
    i.ne = t.ne;
    i.n_dims = t.ne[2] > 1 ? 3 : t.ne[1] > 1 ? 2 : 1;
    i.offset = t.offset;
    i.n_bytes = t.n_bytes;
    infos.push_back(i);
  }
  return infos;
}
io::model_weights weights_of(const io::model_hparams& h, const std::vector<io::tensor_info>& infos) {
  std::map<std::string, const io::tensor_info*> by_name;
  for (const io::tensor_info& i : infos) by_name[i.name] = &i;
  return io::bind_weights_with(h, [&](const std::string& name) -> const io::tensor_info* {
    const auto it = by_name.find(name);
    return it == by_name.end() ? nullptr : it->second;
  });
}

}  // namespace

io::ggml_type q4_k_m_type(const io::model_hparams& h, const io::expected_tensor& t, bool tied) {
  const std::string& n = t.name;
  if (n == "token_embd.weight") return tied ? io::ggml_type::q6_k : io::ggml_type::q4_k;
  if (n == "output.weight") return io::ggml_type::q6_k;
  const bool one_dim = t.ne[1] == 1 && t.ne[2] == 1;
  if (one_dim || ends_with(n, "_norm.weight") || contains(n, "ssm_conv1d") || contains(n, "ffn_gate_inp"))
    return io::ggml_type::f32;
  const auto il = io::block_index(n);
  const bool more = il && more_bits(int64_t(*il), int64_t(h.n_layers));
  if (more && (contains(n, ".attn_v.") || contains(n, ".attn_qkv.") || contains(n, ".ffn_down")))
    return io::ggml_type::q6_k;
  return io::ggml_type::q4_k;
}

std::vector<synth_tensor> synth_layout(const io::model_hparams& h, bool tied) {
  std::vector<synth_tensor> out;
  uint64_t offset = 0;
  for (const io::expected_tensor& e : io::expected_tensors(h)) {
    if (e.name == "output.weight" && tied) continue;
    synth_tensor t;
    t.name = e.name;
    t.type = q4_k_m_type(h, e, tied);
    t.ne = e.ne;
    t.offset = offset;
    t.n_bytes = tensor_bytes(t.type, t.ne);
    offset += (t.n_bytes + 255) / 256 * 256;
    out.push_back(t);
  }
  return out;
}

// Value ranges: quantized matrices get a per-element standard deviation of ~1/sqrt(cols), so a
// projection of a unit-RMS row has outputs of ~unit size through every layer. Q4_K element
// d*sc*q - dmin*m (sc, m 6-bit, q 4-bit, uniform) has mean 31.5*(7.5 d - dmin) = 0 for dmin = 7.5 d
// and standard deviation ~258 d; Q6_K element d*s*(q-32) (s int8, q 6-bit) has ~1365 d.
// f32: norm weights 1 +- 0.1, conv taps +-0.5, dt bias +-1, ssm_a in [-3.5, -0.5] (negative: a decay),
// the router with logits of standard deviation ~2 on a unit-RMS row (varied, decided expert choices).
status fill_tensor(uint8_t* base, const synth_tensor& t, const io::model_hparams& h, uint64_t seed, stream_t s,
                   int64_t chunk_bytes, int64_t stride_bytes) {
  synth_fill_kernel::params p{};
  p.data = base + t.offset;
  p.seed = seed;
  const int64_t unit = t.type == io::ggml_type::q4_k || t.type == io::ggml_type::q6_k ? 2 : 4;
  p.chunk_units = chunk_bytes / unit, p.stride_units = stride_bytes / unit;
  if (chunk_bytes % unit || stride_bytes % unit || chunk_bytes < 0 || stride_bytes < chunk_bytes ||
      (chunk_bytes == 0) != (stride_bytes == 0))
    return error(status_code::invalid_argument,
                 "fill_tensor: '" + t.name + "': chunks of " + std::to_string(chunk_bytes) + " bytes every " +
                     std::to_string(stride_bytes) + " (whole " + std::to_string(unit) + "-byte units, both or none)");
  const float sigma = 1.0f / std::sqrt(float(t.ne[0]));
  if (t.type == io::ggml_type::q4_k) {
    p.m = synth_fill_kernel::mode::q4_k;
    p.d_bits = detail::float_to_half_bits(sigma / 258.0f);
    p.dmin_bits = detail::float_to_half_bits(7.5f * sigma / 258.0f);
    p.n_units = int64_t(t.n_bytes / 2);
  } else if (t.type == io::ggml_type::q6_k) {
    p.m = synth_fill_kernel::mode::q6_k;
    p.d_bits = detail::float_to_half_bits(sigma / 1365.0f);
    p.n_units = int64_t(t.n_bytes / 2);
  } else {
    p.m = synth_fill_kernel::mode::f32;
    p.n_units = int64_t(t.n_bytes / 4);
    const std::string& n = t.name;
    if (ends_with(n, "norm.weight")) {
      p.center = 1.0f, p.spread = 0.1f;
    } else if (contains(n, "ssm_conv1d")) {
      p.center = 0.0f, p.spread = 0.5f;
    } else if (contains(n, "ssm_dt")) {
      p.center = 0.0f, p.spread = 1.0f;
    } else if (ends_with(n, "ssm_a")) {
      p.center = -2.0f, p.spread = 1.5f;
    } else if (contains(n, "ffn_gate_inp_shexp")) {
      p.center = 0.0f, p.spread = std::sqrt(3.0f) / std::sqrt(float(h.n_embd));
    } else if (contains(n, "ffn_gate_inp")) {
      p.center = 0.0f, p.spread = 2.0f * std::sqrt(3.0f) / std::sqrt(float(h.n_embd));
    } else {
      p.center = 0.0f, p.spread = std::sqrt(3.0f) * sigma;
    }
  }
  return launch::launch<synth_fill_kernel>(p, s);
}

io::model_hparams moe_hparams(const moe_shape& s) {
  io::model_hparams h = io::hparams_of<models::qwen35_35b_a3b>();
  const uint32_t v_head_dim = h.ssm_v_head_dim();
  h.n_layers = s.n_layers, h.n_embd = s.n_embd, h.n_heads = s.n_heads;
  h.ssm_n_v_heads = s.ssm_n_v_heads, h.ssm_inner_size = s.ssm_n_v_heads * v_head_dim;
  h.n_experts = s.n_experts, h.n_experts_used = s.n_experts_used;
  h.expert_ff_dim = h.shared_ff_dim = s.expert_ff_dim;
  h.layer_kinds.clear(), h.ffn_kinds.clear();
  for (uint32_t il = 0; il < s.n_layers; ++il) {
    h.layer_kinds.push_back(models::hybrid_layer_kind(int(il), int(h.full_attention_interval)));
    h.ffn_kinds.push_back(models::ffn_type::moe);
  }
  return h;
}

bool is_synth_routed_expert(const std::string& name) { return contains(name, "_exps."); }

uint64_t synth_device_bytes(const std::vector<synth_tensor>& layout, bool host_experts) {
  uint64_t b = 0;
  for (const synth_tensor& t : layout)
    if (!(host_experts && is_synth_routed_expert(t.name))) b += (t.n_bytes + 255) / 256 * 256;
  return b;
}

status plan_synth_memory(const io::model_hparams& h, bool tied, const decoder_config& cfg, uint64_t budget,
                         std::optional<int64_t> slots, memory_plan& out) {
  const std::vector<synth_tensor> layout = synth_layout(h, tied);
  const std::vector<io::tensor_info> infos = infos_of(layout);
  return plan_memory(h, weights_of(h, infos), synth_device_bytes(layout, false), synth_device_bytes(layout, true), cfg,
                     budget, slots, out);
}

status synth_model::build(const io::model_hparams& h, bool tied, uint64_t seed, stream_t s, int expert_slots) {
  tied_ = tied;
  layout_ = synth_layout(h, tied);
  const bool host_experts = expert_slots >= 0 && expert_slots < int(h.n_experts) && h.count(models::ffn_type::moe) > 0;
  // Seeds in layout order whatever goes where, so both placements hold the same weights. With host
  // experts the device tensors close ranks (the layout's offsets become device offsets; a routed
  // expert tensor's offset is 0 and unused: its views come from the store).
  std::vector<uint64_t> seeds;
  uint64_t k = seed, total = 0;
  for (synth_tensor& t : layout_) {
    seeds.push_back(k = mix(k));
    if (host_experts && is_synth_routed_expert(t.name)) {
      t.offset = 0;
      continue;
    }
    t.offset = total;
    total += (t.n_bytes + 255) / 256 * 256;
  }
  Q35_TRY(data_.allocate(size_t(total)));
  for (size_t i = 0; i < layout_.size(); ++i)
    if (!(host_experts && is_synth_routed_expert(layout_[i].name)))
      Q35_TRY(fill_tensor(data_.data(), layout_[i], h, seeds[i], s));
  Q35_TRY(synchronize(s));

  infos_ = infos_of(layout_);
  const io::model_weights w = weights_of(h, infos_);
  if (!host_experts) return model_.bind(h, w, data_.data(), total);

  // The routed experts straight into the store's pinned home (the kernel writes host memory through
  // its device mapping): expert e's gate rows at home_gu + e * gu_stride, its up rows after them.
  auto store = std::make_unique<expert_store>();
  Q35_TRY(store->allocate(h, w, expert_slots));
  std::map<std::string, size_t> at;
  for (size_t i = 0; i < layout_.size(); ++i) at[layout_[i].name] = i;
  for (const expert_store::layer& L : store->layers()) {
    const std::string b = "blk." + std::to_string(L.index) + ".";
    const size_t g = at.at(b + "ffn_gate_exps.weight"), u = at.at(b + "ffn_up_exps.weight"),
                 d = at.at(b + "ffn_down_exps.weight");
    Q35_TRY(fill_tensor(L.home_gu, layout_[g], h, seeds[g], s, L.gate_bytes, L.gu_stride));
    Q35_TRY(fill_tensor(L.home_gu + L.gate_bytes, layout_[u], h, seeds[u], s, L.gate_bytes, L.gu_stride));
    Q35_TRY(fill_tensor(L.home_dn, layout_[d], h, seeds[d], s));
  }
  Q35_TRY(synchronize(s));
  Q35_TRY(store->settle());
  return model_.bind(h, w, data_.data(), total, std::move(store));
}

namespace {
template <class M>
synth_entry entry_of(const char* key) {
  return {key, std::string(M::name), io::hparams_of<M>(), M::tied_embeddings};
}
}  // namespace

std::vector<synth_entry> synth_models() {
  return {entry_of<models::qwen35_9b>("9B"),
          entry_of<models::qwen35_35b_a3b>("35B-A3B"),
          entry_of<models::qwen35_27b>("27B"),
          // our reading of the published configs: see qwen35_122b_a10b_shape, qwen35_397b_a17b_shape
          {"122B-A10B", "Qwen3.5-122B-A10B (shape)", moe_hparams(qwen35_122b_a10b_shape), false},
          {"397B-A17B", "Qwen3.5-397B-A17B (shape)", moe_hparams(qwen35_397b_a17b_shape), false},
          entry_of<models::qwen35_9b_moe>("9B-MoE"),
          entry_of<models::tiny_dense>("tiny-dense"),
          entry_of<models::tiny_moe>("tiny-moe")};
}

const synth_entry* find_synth_model(const std::vector<synth_entry>& all, const std::string& key) {
  for (const synth_entry& e : all)
    if (e.key == key || e.name == key) return &e;
  return nullptr;
}

status first_layers(const synth_entry& e, uint32_t n, synth_entry& out) {
  if (n < 1 || n > e.h.n_layers)
    return error(status_code::invalid_argument,
                 e.name + " has " + std::to_string(e.h.n_layers) + " layers: it cannot be cut to " + std::to_string(n));
  out = e;
  out.h.n_layers = n;
  out.h.layer_kinds.resize(n);
  out.h.ffn_kinds.resize(n);
  out.name += " (first " + std::to_string(n) + " of " + std::to_string(e.h.n_layers) + " layers)";
  return status::success();
}

std::string synth_model_keys() {
  std::string out;
  for (const synth_entry& e : synth_models()) out += (out.empty() ? "" : ", ") + e.key;
  return out;
}

}  // namespace q35::gen
