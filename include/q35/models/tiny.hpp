// Traits of the tiny random-weight fixtures in tests/data (fixture README): n_embd 256, 4 layers
// (layer 3 full attention), 2 q heads / 1 kv head of 256, rope 64, GDN 2 k-heads / 4 v-heads of
// 128, conv 4, vocab 512, context 4096.
#pragma once

#include <string_view>

#include "q35/models/schedule.hpp"
#include "q35/models/sub_traits.hpp"

namespace q35::models {

struct tiny_base {
  static constexpr int n_layers = 4;
  static constexpr int n_embd = 256;
  static constexpr int n_vocab = 512;
  static constexpr int context_length = 4096;
  static constexpr int full_attention_interval = 4;
  static constexpr bool tied_embeddings = false;
  using attn = attn_traits_t<2, 1>;
  using gdn = gdn_traits_t<2, 4>;  // 4 v-heads on 2 k-heads: the j mod n_k mapping matters
  using norm = norm_traits_t;
  static constexpr layer_type layer_kind(int il) { return hybrid_layer_kind(il, full_attention_interval); }
};

// tiny_dense.gguf, tiny_dense_q4km.gguf: dense FFN of 512.
struct tiny_dense : tiny_base {
  static constexpr std::string_view name = "tiny-dense (test fixture)";
  static constexpr std::string_view arch = "qwen35";
  using ffn = ffn_traits_t<512>;
  using moe = no_moe;
  static constexpr ffn_type ffn_kind(int) { return ffn_type::dense; }
};

// tiny_moe.gguf, tiny_moe_q4km.gguf: 8 experts of 256, top-2, shared expert of 256, every layer.
struct tiny_moe : tiny_base {
  static constexpr std::string_view name = "tiny-moe (test fixture)";
  static constexpr std::string_view arch = "qwen35moe";
  using ffn = ffn_traits_t<0>;
  using moe = moe_traits_t<8, 2, 256, 256>;
  static constexpr ffn_type ffn_kind(int) { return ffn_type::moe; }
};

// tiny_interleaved_q4km.gguf: layers 0, 2 dense (512), layers 1, 3 MoE (16 experts of 256, top-4,
// shared expert of 256).
struct tiny_interleaved : tiny_base {
  static constexpr std::string_view name = "tiny-interleaved (test fixture)";
  static constexpr std::string_view arch = "qwen35moe";
  using ffn = ffn_traits_t<512>;
  using moe = moe_traits_t<16, 4, 256, 256>;
  static constexpr ffn_type ffn_kind(int il) { return interleaved_ffn_kind(il, 1, 2); }
};

}  // namespace q35::models
