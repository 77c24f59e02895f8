// Layout, Q4_K_M types and device fill of a synthetic full-size model, and its binding as a device_model.
#include "synth_model.hpp"

#include <map>

#include "q35/core/numeric.hpp"
#include "q35/launch/launch.hpp"

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
status fill_tensor(uint8_t* base, const synth_tensor& t, const io::model_hparams& h, uint64_t seed, stream_t s) {
  synth_fill_kernel::params p{};
  p.data = base + t.offset;
  p.seed = seed;
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

status synth_model::build(const io::model_hparams& h, bool tied, uint64_t seed, stream_t s) {
  tied_ = tied;
  layout_ = synth_layout(h, tied);
  const uint64_t total = layout_.empty() ? 0 : layout_.back().offset + layout_.back().n_bytes;
  Q35_TRY(data_.allocate(size_t(total)));
  uint64_t k = seed;
  for (const synth_tensor& t : layout_) Q35_TRY(fill_tensor(data_.data(), t, h, k = mix(k), s));
  Q35_TRY(synchronize(s));

  // tensor_infos (offsets into data_) and the weights bound to them by name, as io::bind_weights does for a file
  infos_.clear();
  infos_.reserve(layout_.size());
  std::map<std::string, const io::tensor_info*> by_name;
  for (const synth_tensor& t : layout_) {
    io::tensor_info i;
    i.name = t.name;
    i.type = uint32_t(t.type);
    i.ne = t.ne;
    i.n_dims = t.ne[2] > 1 ? 3 : t.ne[1] > 1 ? 2 : 1;
    i.offset = t.offset;
    i.n_bytes = t.n_bytes;
    infos_.push_back(i);
  }
  for (const io::tensor_info& i : infos_) by_name[i.name] = &i;
  auto get = [&](const std::string& name) -> const io::tensor_info* {
    const auto it = by_name.find(name);
    return it == by_name.end() ? nullptr : it->second;
  };
  io::model_weights w = io::bind_weights_with(h, get);  // tied: there is no output.weight
  return model_.bind(h, w, data_.data(), total);
}

}  // namespace q35::gen
