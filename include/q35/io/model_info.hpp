// What `qwen35_generate --info` prints: architecture, matched traits, hyper-parameters, tensors and
// bytes by type, and the memory for weights plus per-sequence state at a context size (spec §4).
#pragma once

#include <cstdint>
#include <map>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "q35/io/checked_math.hpp"
#include "q35/io/gguf.hpp"
#include "q35/io/model_hparams.hpp"
#include "q35/io/model_weights.hpp"
#include "q35/io/tensor_catalogue.hpp"

namespace q35::io {

// Per-sequence state of the hybrid memory (spec §4), for n_seq sequences of up to n_ctx tokens.
struct state_memory {
  uint64_t kv_cache_bytes = 0;    // n_seq * n_ctx * n_full_layers * n_kv_heads * (head_dim + value_dim) * kv_elem_bytes
  uint64_t conv_state_bytes = 0;  // n_seq * n_gdn_layers * (conv_kernel - 1) * conv_dim * 4 (f32)
  uint64_t ssm_state_bytes = 0;   // n_seq * n_gdn_layers * state_size * inner_size * 4 (f32)
  uint64_t total() const { return kv_cache_bytes + conv_state_bytes + ssm_state_bytes; }
};

// kv_elem_bytes: 2 for llama.cpp's default F16 KV cache, 4 for F32. Throws std::overflow_error when
// a byte count does not fit in uint64.
inline state_memory state_bytes(const model_hparams& h, uint64_t n_ctx, uint32_t kv_elem_bytes = 2,
                                uint32_t n_seq = 1) {
  auto mul = [](std::initializer_list<uint64_t> xs) {
    uint64_t r = 1;
    for (uint64_t x : xs) {
      const auto p = checked_mul(r, x);
      if (!p) throw std::overflow_error("q35: state memory size overflows uint64");
      r = *p;
    }
    return r;
  };
  const uint64_t n_full = h.count(models::layer_type::full_attention);
  const uint64_t n_gdn = h.count(models::layer_type::gated_deltanet);
  state_memory m;
  m.kv_cache_bytes = mul({n_seq, n_ctx, n_full, h.n_kv_heads, uint64_t(h.head_dim) + h.value_dim, kv_elem_bytes});
  m.conv_state_bytes = mul({n_seq, n_gdn, h.ssm_conv_kernel > 0 ? h.ssm_conv_kernel - 1u : 0u, h.ssm_conv_dim(), 4});
  m.ssm_state_bytes = mul({n_seq, n_gdn, h.ssm_k_head_dim, h.ssm_inner_size, 4});
  if (!checked_add(m.kv_cache_bytes, m.conv_state_bytes) ||
      !checked_add(m.kv_cache_bytes + m.conv_state_bytes, m.ssm_state_bytes))
    throw std::overflow_error("q35: state memory size overflows uint64");
  return m;
}

struct type_usage {
  uint64_t n_tensors = 0;
  uint64_t bytes = 0;
};

struct model_info {
  std::string path;
  uint32_t gguf_version = 0;
  std::string traits_name;
  model_hparams hparams;
  bool tied_embeddings = false;
  uint64_t n_tensors = 0;      // every tensor in the file
  uint64_t n_mtp_tensors = 0;  // MTP tail tensors, ignored
  uint64_t mtp_bytes = 0;
  std::map<std::string, type_usage> by_type;  // the decoder's weights, by ggml type name
  uint64_t weight_bytes = 0;                  // sum of by_type bytes
  uint64_t n_ctx = 0;
  uint32_t kv_elem_bytes = 2;
  uint32_t n_seq = 1;
  state_memory state;
  uint64_t total_bytes() const { return weight_bytes + state.total(); }
};

// Binds `f` (any valid file, as bind_any_model; throws gguf_error naming a problem) and sizes it for n_ctx tokens (0:
// the file's context_length) of n_seq sequences.
inline model_info describe_model(const gguf_file& f, uint64_t n_ctx = 0, uint32_t kv_elem_bytes = 2,
                                 uint32_t n_seq = 1) {
  const bound_model m = bind_any_model(f);
  model_info info;
  info.path = f.path();
  info.gguf_version = f.version();
  info.traits_name =
      m.traits_name.empty() ? "none of the known models (shapes from the file)" : std::string(m.traits_name);
  info.hparams = m.hparams;
  info.tied_embeddings = m.weights.tied_embeddings;
  info.n_tensors = f.tensors().size();
  for (const tensor_info& t : f.tensors()) {
    if (is_mtp_tensor(m.hparams, t.name)) {
      ++info.n_mtp_tensors;
      info.mtp_bytes += t.n_bytes;  // tensors lie inside the file, so sums stay below its size
      continue;
    }
    auto& u = info.by_type[std::string(t.type_name())];
    ++u.n_tensors;
    u.bytes += t.n_bytes;
    info.weight_bytes += t.n_bytes;
  }
  info.n_ctx = n_ctx ? n_ctx : m.hparams.context_length;
  info.kv_elem_bytes = kv_elem_bytes;
  info.n_seq = n_seq;
  try {
    info.state = state_bytes(m.hparams, info.n_ctx, kv_elem_bytes, n_seq);
  } catch (const std::overflow_error&) {
    f.fail("state memory for " + std::to_string(info.n_ctx) + " tokens overflows uint64");
  }
  return info;
}

inline std::string format_bytes(uint64_t b) {
  std::ostringstream s;
  s.setf(std::ios::fixed);
  s.precision(2);
  if (b >= (uint64_t(1) << 30))
    s << double(b) / double(uint64_t(1) << 30) << " GiB";
  else if (b >= (uint64_t(1) << 20))
    s << double(b) / double(uint64_t(1) << 20) << " MiB";
  else if (b >= 1024)
    s << double(b) / 1024.0 << " KiB";
  else
    s << b << " B";
  return s.str() + " (" + std::to_string(b) + " bytes)";
}

// The --info report, one "key: value" per line.
inline std::string format_model_info(const model_info& i) {
  const model_hparams& h = i.hparams;
  std::ostringstream s;
  s << "file: " << i.path << " (GGUF v" << i.gguf_version << ")\n";
  s << "arch: " << h.arch << "\n";
  s << "model: " << i.traits_name << "\n";
  s << "layers: " << h.n_layers << " (" << h.count(models::layer_type::full_attention) << " full attention, "
    << h.count(models::layer_type::gated_deltanet) << " Gated DeltaNet; " << h.count(models::ffn_type::dense)
    << " dense FFN, " << h.count(models::ffn_type::moe) << " MoE)";
  if (h.n_nextn_layers) s << ", plus " << h.n_nextn_layers << " MTP layer(s) ignored";
  s << "\nschedule: ";
  for (uint32_t il = 0; il < h.n_layers; ++il)
    s << (h.layer_kinds[il] == models::layer_type::full_attention ? 'A' : 'G')
      << (h.ffn_kinds[il] == models::ffn_type::moe ? 'm' : 'd') << (il + 1 < h.n_layers ? " " : "");
  s << "  (A attention, G Gated DeltaNet; d dense, m MoE)\n";
  s << "n_embd: " << h.n_embd << "\nn_vocab: " << h.n_vocab << "\ncontext_length: " << h.context_length << "\n";
  s << "attention: " << h.n_heads << " heads, " << h.n_kv_heads << " kv heads, head_dim " << h.head_dim
    << ", value_dim " << h.value_dim << ", rope_dim " << h.rope_dim << ", rope_theta " << h.rope_theta
    << ", rope_sections [" << h.rope_sections[0] << ", " << h.rope_sections[1] << ", " << h.rope_sections[2] << ", "
    << h.rope_sections[3] << "], full_attention_interval " << h.full_attention_interval << "\n";
  s << "gated_deltanet: " << h.ssm_n_k_heads << " k-heads of " << h.ssm_k_head_dim << ", " << h.ssm_n_v_heads
    << " v-heads of " << h.ssm_v_head_dim() << ", conv_kernel " << h.ssm_conv_kernel << "\n";
  s << "rms_eps: " << h.rms_eps << "\n";
  if (h.count(models::ffn_type::dense)) s << "ffn: dense " << h.ff_dim << "\n";
  if (h.count(models::ffn_type::moe))
    s << "moe: " << h.n_experts << " experts of " << h.expert_ff_dim << ", top-" << h.n_experts_used
      << ", shared expert " << h.shared_ff_dim << "\n";
  s << "embeddings: " << (i.tied_embeddings ? "tied (no output.weight)" : "untied") << "\n";
  s << "tensors: " << i.n_tensors;
  if (i.n_mtp_tensors) s << " (" << i.n_mtp_tensors << " MTP tensors ignored, " << format_bytes(i.mtp_bytes) << ")";
  s << "\n";
  for (const auto& [type, u] : i.by_type)
    s << "  " << type << ": " << u.n_tensors << " tensors, " << format_bytes(u.bytes) << "\n";
  s << "weights: " << format_bytes(i.weight_bytes) << "\n";
  s << "context: " << i.n_ctx << " tokens x " << i.n_seq << " sequence(s), KV cache element " << i.kv_elem_bytes
    << " bytes\n";
  s << "kv_cache: " << format_bytes(i.state.kv_cache_bytes) << "\n";
  s << "conv_state: " << format_bytes(i.state.conv_state_bytes) << "\n";
  s << "ssm_state: " << format_bytes(i.state.ssm_state_bytes) << "\n";
  s << "total (weights + state): " << format_bytes(i.total_bytes()) << "\n";
  return s.str();
}

}  // namespace q35::io
