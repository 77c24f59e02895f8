// Traits of the MoE hybrid Qwen3.5 models: the 35B-A3B checkpoint (spec §1.2) and the interleaved
// "Qwen3.5-9B MoE" layout of our design notes (a design for testing mixed schedules, no checkpoint).
#pragma once

#include <string_view>

#include "q35/models/qwen35_family.hpp"

namespace q35::models {

// 256 experts of 512, top-8, softmax router renormalised, + a shared expert of 512; every layer MoE.
struct qwen35_35b_a3b : qwen35_family {
  static constexpr std::string_view name = "Qwen3.5-35B-A3B";
  static constexpr std::string_view arch = "qwen35moe";
  static constexpr int n_layers = 40;
  static constexpr int n_embd = 2048;
  static constexpr bool tied_embeddings = false;
  using attn = attn_traits_t<16, 2>;
  using gdn = gdn_traits_t<16, 32>;
  using ffn = ffn_traits_t<0>;  // no dense layer
  using moe = moe_traits_t<256, 8, 512, 512>;
  static constexpr ffn_type ffn_kind(int) { return ffn_type::moe; }
};

// The 9B shape with MoE on every 2nd layer from layer 4 (4, 6, ..., 30), dense 12288 elsewhere.
// 64 experts, top-4. Expert and shared widths are our choice: 3072 = 12288 / 4, so the routed
// part of a MoE layer computes as much as the dense FFN it replaces.
struct qwen35_9b_moe : qwen35_family {
  static constexpr std::string_view name = "Qwen3.5-9B-MoE (design)";
  static constexpr std::string_view arch = "qwen35moe";
  static constexpr int n_layers = 32;
  static constexpr int n_embd = 4096;
  static constexpr bool tied_embeddings = false;
  static constexpr int first_moe_layer = 4;
  static constexpr int moe_layer_stride = 2;
  using attn = attn_traits_t<16, 4>;
  using gdn = gdn_traits_t<16, 32>;
  using ffn = ffn_traits_t<12288>;
  using moe = moe_traits_t<64, 4, 3072, 3072>;
  static constexpr ffn_type ffn_kind(int il) { return interleaved_ffn_kind(il, first_moe_layer, moe_layer_stride); }
};

}  // namespace q35::models
