// read_hparams: a qwen35 / qwen35moe GGUF file's hyper-parameters (spec §3.2), with llama.cpp's
// defaults for optional keys, range checks, and the per-layer FFN kind found from the tensors.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "q35/io/gguf.hpp"
#include "q35/io/model_hparams.hpp"

namespace q35::io {

namespace detail {

// Upper bounds that keep every derived shape product far from uint64 overflow.
inline constexpr uint64_t max_dim = uint64_t(1) << 20;
inline constexpr uint64_t max_layers = 4096;
inline constexpr uint64_t max_vocab = uint64_t(1) << 24;
inline constexpr uint64_t max_context = uint64_t(1) << 30;

// `key` as a u32 in [lo, hi]; accepts a per-layer array whose entries are all equal.
inline uint32_t hparam(const gguf_file& f, const std::string& key, uint64_t lo, uint64_t hi) {
  uint64_t v;
  if (f.find(key) && f.at(key).type == gguf_type::array) {
    const auto values = f.get_int_array(key, max_layers);  // one value per layer
    if (values.empty()) f.fail("key '" + key + "': empty per-layer array");
    for (int64_t x : values)
      if (x != values[0])
        f.fail("key '" + key + "': per-layer values differ (" + std::to_string(values[0]) + " vs " + std::to_string(x) +
               "); q35 needs one value for all layers");
    if (values[0] < 0)
      f.fail("key '" + key + "': expected a non-negative value but found " + std::to_string(values[0]));
    v = uint64_t(values[0]);
  } else {
    v = f.get_uint(key);
  }
  if (v < lo || v > hi)
    f.fail("key '" + key + "': value " + std::to_string(v) + " is out of range (expected " + std::to_string(lo) + ".." +
           std::to_string(hi) + ")");
  return uint32_t(v);
}
// `key` when present, else llama.cpp's default `fallback`, which must also lie in [lo, hi].
inline uint32_t hparam_or(const gguf_file& f, const std::string& key, uint64_t fallback, uint64_t lo, uint64_t hi) {
  if (f.has(key)) return hparam(f, key, lo, hi);
  if (fallback < lo || fallback > hi)
    f.fail("key '" + key + "' is missing and its default " + std::to_string(fallback) + " is out of range (expected " +
           std::to_string(lo) + ".." + std::to_string(hi) + ")");
  return uint32_t(fallback);
}

inline bool has_tensor(const gguf_file& f, uint32_t il, const char* name) {
  return f.find_tensor("blk." + std::to_string(il) + "." + name) != nullptr;
}

}  // namespace detail

inline model_hparams read_hparams(const gguf_file& f) {
  using detail::hparam;
  using detail::hparam_or;
  model_hparams h;
  h.arch = f.get_string("general.architecture");
  if (h.arch != "qwen35" && h.arch != "qwen35moe")
    f.fail("key 'general.architecture': expected qwen35 or qwen35moe but found '" + h.arch +
           "' (q35 runs only the Qwen3.5 family)");
  const std::string p = h.arch + ".";

  const uint32_t block_count = hparam(f, p + "block_count", 1, detail::max_layers);
  h.n_nextn_layers = hparam_or(f, p + "nextn_predict_layers", 0, 0, block_count - 1);
  h.n_layers = block_count - h.n_nextn_layers;
  h.context_length = hparam(f, p + "context_length", 1, detail::max_context);
  h.n_embd = hparam(f, p + "embedding_length", 1, detail::max_dim);
  h.n_heads = hparam(f, p + "attention.head_count", 1, detail::max_dim);
  h.n_kv_heads = hparam_or(f, p + "attention.head_count_kv", h.n_heads, 1, h.n_heads);
  h.head_dim = hparam_or(f, p + "attention.key_length", h.n_embd / h.n_heads, 1, detail::max_dim);
  h.value_dim = hparam_or(f, p + "attention.value_length", h.n_embd / h.n_heads, 1, detail::max_dim);
  h.rope_dim = hparam_or(f, p + "rope.dimension_count", h.head_dim, 0, h.head_dim);
  h.rope_theta = f.has(p + "rope.freq_base") ? f.get_float(p + "rope.freq_base") : 10000.0;
  h.rms_eps = f.get_float(p + "attention.layer_norm_rms_epsilon");
  if (!(h.rms_eps > 0 && h.rms_eps < 1))
    f.fail("key '" + p + "attention.layer_norm_rms_epsilon': value " + std::to_string(h.rms_eps) +
           " is out of range (expected 0 < eps < 1)");
  const auto sections = f.get_int_array(p + "rope.dimension_sections");
  if (sections.empty() || sections.size() > 4)
    f.fail("key '" + p + "rope.dimension_sections': expected 1 to 4 entries but found " +
           std::to_string(sections.size()));
  for (size_t i = 0; i < sections.size(); ++i) {
    if (sections[i] < 0 || sections[i] > int64_t(detail::max_dim))
      f.fail("key '" + p + "rope.dimension_sections': entry " + std::to_string(i) + " = " +
             std::to_string(sections[i]) + " is out of range");
    h.rope_sections[i] = int32_t(sections[i]);
  }
  h.full_attention_interval = hparam_or(f, p + "full_attention_interval", 4, 1, detail::max_layers);

  h.ssm_conv_kernel = hparam(f, p + "ssm.conv_kernel", 1, 64);
  h.ssm_inner_size = hparam(f, p + "ssm.inner_size", 1, detail::max_dim);
  h.ssm_k_head_dim = hparam(f, p + "ssm.state_size", 1, detail::max_dim);
  h.ssm_n_v_heads = hparam(f, p + "ssm.time_step_rank", 1, detail::max_dim);
  h.ssm_n_k_heads = hparam(f, p + "ssm.group_count", 1, detail::max_dim);
  if (h.ssm_inner_size % h.ssm_n_v_heads != 0)
    f.fail("key '" + p + "ssm.inner_size': " + std::to_string(h.ssm_inner_size) +
           " is not a multiple of ssm.time_step_rank " + std::to_string(h.ssm_n_v_heads));

  h.ff_dim = hparam_or(f, p + "feed_forward_length", 0, 0, detail::max_dim);
  h.n_experts = hparam_or(f, p + "expert_count", 0, 0, detail::max_dim);
  h.n_experts_used = hparam_or(f, p + "expert_used_count", 0, 0, h.n_experts);
  h.expert_ff_dim = hparam_or(f, p + "expert_feed_forward_length", h.n_experts_used ? h.ff_dim / h.n_experts_used : 0,
                              0, detail::max_dim);
  h.shared_ff_dim = hparam_or(f, p + "expert_shared_feed_forward_length", h.ff_dim, 0, detail::max_dim);

  // Vocabulary: the token list's length (spec §3.2); an explicit vocab_size must agree with it.
  if (f.has("tokenizer.ggml.tokens")) {
    const uint64_t n = f.array_size("tokenizer.ggml.tokens");
    if (n == 0 || n > detail::max_vocab)
      f.fail("key 'tokenizer.ggml.tokens': " + std::to_string(n) + " tokens is out of range (expected 1.." +
             std::to_string(detail::max_vocab) + ")");
    h.n_vocab = uint32_t(n);
    if (f.has(p + "vocab_size") && f.get_uint(p + "vocab_size") != n)
      f.fail("key '" + p + "vocab_size': file has " + std::to_string(f.get_uint(p + "vocab_size")) +
             " but tokenizer.ggml.tokens has " + std::to_string(n) + " entries");
  } else {
    h.n_vocab = hparam(f, p + "vocab_size", 1, detail::max_vocab);
  }

  // Schedule: attention.recurrent_layers when present, else the interval rule.
  const std::string recurrent_key = p + "attention.recurrent_layers";
  std::vector<int64_t> recurrent;
  if (f.has(recurrent_key)) {
    const gguf_kv& kv = f.at(recurrent_key);
    if (kv.type != gguf_type::array || kv.elem_type != gguf_type::bool_ || kv.count < h.n_layers)
      f.fail("key '" + recurrent_key + "': expected an array of at least " + std::to_string(h.n_layers) + " bools");
    for (uint64_t i = 0; i < h.n_layers; ++i) recurrent.push_back(kv.value[i] != 0);
  }
  for (uint32_t il = 0; il < h.n_layers; ++il) {
    h.layer_kinds.push_back(recurrent.empty() ? models::hybrid_layer_kind(int(il), int(h.full_attention_interval))
                            : recurrent[il]   ? models::layer_type::gated_deltanet
                                              : models::layer_type::full_attention);
    // FFN kind from the tensors present: a router means MoE (qwen35moe only).
    const bool moe = h.arch == "qwen35moe" && detail::has_tensor(f, il, "ffn_gate_inp.weight");
    h.ffn_kinds.push_back(moe ? models::ffn_type::moe : models::ffn_type::dense);
    const std::string layer = "layer " + std::to_string(il);
    if (moe && (h.n_experts == 0 || h.n_experts_used == 0 || h.expert_ff_dim == 0))
      f.fail(layer + " has MoE tensors but " + p + "expert_count / expert_used_count / expert_feed_forward_length" +
             " are missing or 0");
    if (!moe && h.ff_dim == 0)
      f.fail(layer + " has no router (blk." + std::to_string(il) + ".ffn_gate_inp.weight), so it is a dense FFN, but " +
             p + "feed_forward_length is missing or 0");
  }
  return h;
}

}  // namespace q35::io
