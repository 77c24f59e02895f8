// Layer schedule vocabulary shared by all Qwen3.5 traits: which mixer and which FFN a layer has.
#pragma once

namespace q35::models {

// The token mixer of a layer.
enum class layer_type { gated_deltanet, full_attention };

// The feed-forward block of a layer.
enum class ffn_type { dense, moe };

// llama.cpp's rule (spec §2.0): layer il is full attention iff (il + 1) % interval == 0, else GDN.
constexpr layer_type hybrid_layer_kind(int il, int full_attention_interval) {
  return (il + 1) % full_attention_interval == 0 ? layer_type::full_attention : layer_type::gated_deltanet;
}

// Interleaved MoE schedule: MoE on every `every`-th layer starting at `first`, dense elsewhere.
constexpr ffn_type interleaved_ffn_kind(int il, int first, int every) {
  return il >= first && (il - first) % every == 0 ? ffn_type::moe : ffn_type::dense;
}

constexpr const char* to_string(layer_type t) {
  return t == layer_type::full_attention ? "full_attention" : "gated_deltanet";
}
constexpr const char* to_string(ffn_type t) { return t == ffn_type::moe ? "moe" : "dense"; }

static_assert(hybrid_layer_kind(3, 4) == layer_type::full_attention);
static_assert(hybrid_layer_kind(4, 4) == layer_type::gated_deltanet);
static_assert(interleaved_ffn_kind(4, 4, 2) == ffn_type::moe && interleaved_ffn_kind(5, 4, 2) == ffn_type::dense &&
              interleaved_ffn_kind(2, 4, 2) == ffn_type::dense);

}  // namespace q35::models
