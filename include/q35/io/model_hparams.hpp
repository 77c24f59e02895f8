// model_hparams: the run-time hyper-parameters of a qwen35 / qwen35moe model, as read from a GGUF
// file (spec §3.2) or derived from a traits type; the common currency of binding and --info.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "q35/models/concepts.hpp"
#include "q35/models/schedule.hpp"

namespace q35::io {

struct model_hparams {
  std::string arch;             // general.architecture: "qwen35" or "qwen35moe"
  uint32_t n_layers = 0;        // block_count - nextn_predict_layers
  uint32_t n_nextn_layers = 0;  // MTP tail layers after n_layers (ignored by a plain decoder)
  uint32_t n_embd = 0;
  uint32_t n_vocab = 0;
  uint32_t context_length = 0;
  // attention (full-attention layers)
  uint32_t n_heads = 0;
  uint32_t n_kv_heads = 0;
  uint32_t head_dim = 0;   // key_length
  uint32_t value_dim = 0;  // value_length
  uint32_t rope_dim = 0;
  double rope_theta = 0;
  std::array<int32_t, 4> rope_sections{};
  double rms_eps = 0;
  uint32_t full_attention_interval = 0;
  // Gated DeltaNet
  uint32_t ssm_n_k_heads = 0;   // ssm.group_count
  uint32_t ssm_n_v_heads = 0;   // ssm.time_step_rank
  uint32_t ssm_k_head_dim = 0;  // ssm.state_size
  uint32_t ssm_inner_size = 0;  // n_v_heads * v_head_dim
  uint32_t ssm_conv_kernel = 0;
  // FFN
  uint32_t ff_dim = 0;  // dense layers (feed_forward_length)
  uint32_t n_experts = 0;
  uint32_t n_experts_used = 0;
  uint32_t expert_ff_dim = 0;
  uint32_t shared_ff_dim = 0;  // 0: no shared expert
  // schedule, one entry per layer
  std::vector<models::layer_type> layer_kinds;
  std::vector<models::ffn_type> ffn_kinds;

  uint32_t ssm_v_head_dim() const { return ssm_n_v_heads ? ssm_inner_size / ssm_n_v_heads : 0; }
  // Channels of the GDN causal conv: q | k | v = 2 * n_k * d_k + n_v * d_v.
  uint64_t ssm_conv_dim() const { return 2ull * ssm_n_k_heads * ssm_k_head_dim + ssm_inner_size; }
  uint32_t count(models::layer_type t) const {
    uint32_t n = 0;
    for (auto k : layer_kinds) n += k == t;
    return n;
  }
  uint32_t count(models::ffn_type t) const {
    uint32_t n = 0;
    for (auto k : ffn_kinds) n += k == t;
    return n;
  }
};

// The hyper-parameters a traits type stands for.
template <models::model_traits M>
model_hparams hparams_of() {
  model_hparams h;
  h.arch = std::string(M::arch);
  h.n_layers = M::n_layers;
  h.n_embd = M::n_embd;
  h.n_vocab = M::n_vocab;
  h.context_length = M::context_length;
  h.n_heads = M::attn::n_heads;
  h.n_kv_heads = M::attn::n_kv_heads;
  h.head_dim = M::attn::head_dim;
  h.value_dim = M::attn::value_dim;
  h.rope_dim = M::attn::rope_dim;
  h.rope_theta = M::attn::rope_theta;
  for (int i = 0; i < 4; ++i) h.rope_sections[i] = M::attn::rope_sections[i];
  h.rms_eps = M::norm::rms_eps;
  h.full_attention_interval = M::full_attention_interval;
  h.ssm_n_k_heads = M::gdn::n_k_heads;
  h.ssm_n_v_heads = M::gdn::n_v_heads;
  h.ssm_k_head_dim = M::gdn::k_head_dim;
  h.ssm_inner_size = M::gdn::inner_size;
  h.ssm_conv_kernel = M::gdn::conv_kernel;
  h.ff_dim = M::ffn::ff_dim;
  h.n_experts = M::moe::n_experts;
  h.n_experts_used = M::moe::n_experts_used;
  h.expert_ff_dim = M::moe::expert_ff_dim;
  h.shared_ff_dim = M::moe::shared_ff_dim;
  for (int il = 0; il < M::n_layers; ++il) {
    h.layer_kinds.push_back(M::layer_kind(il));
    h.ffn_kinds.push_back(M::ffn_kind(il));
  }
  return h;
}

}  // namespace q35::io
