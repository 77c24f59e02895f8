// Traits of the dense hybrid Qwen3.5 checkpoints (spec §1.1, §1.2): every FFN is a dense SwiGLU.
#pragma once

#include <string_view>

#include "q35/models/qwen35_family.hpp"

namespace q35::models {

struct qwen35_0_8b : qwen35_family {
  static constexpr std::string_view name = "Qwen3.5-0.8B";
  static constexpr std::string_view arch = "qwen35";
  static constexpr int n_layers = 24;
  static constexpr int n_embd = 1024;
  static constexpr bool tied_embeddings = true;
  using attn = attn_traits_t<8, 2>;
  using gdn = gdn_traits_t<16, 16>;
  using ffn = ffn_traits_t<3584>;
  using moe = no_moe;
  static constexpr ffn_type ffn_kind(int) { return ffn_type::dense; }
};

// GDN heads are [UNVERIFIED] in the spec ("likely 16 / 16"); tied per a survey (weakly verified).
struct qwen35_2b : qwen35_family {
  static constexpr std::string_view name = "Qwen3.5-2B";
  static constexpr std::string_view arch = "qwen35";
  static constexpr int n_layers = 24;
  static constexpr int n_embd = 2048;
  static constexpr bool tied_embeddings = true;
  using attn = attn_traits_t<8, 2>;
  using gdn = gdn_traits_t<16, 16>;
  using ffn = ffn_traits_t<6144>;
  using moe = no_moe;
  static constexpr ffn_type ffn_kind(int) { return ffn_type::dense; }
};

// head_dim 256 != n_embd / n_heads = 160: key_length must be read, never derived.
struct qwen35_4b : qwen35_family {
  static constexpr std::string_view name = "Qwen3.5-4B";
  static constexpr std::string_view arch = "qwen35";
  static constexpr int n_layers = 32;
  static constexpr int n_embd = 2560;
  static constexpr bool tied_embeddings = true;
  using attn = attn_traits_t<16, 4>;
  using gdn = gdn_traits_t<16, 32>;
  using ffn = ffn_traits_t<9216>;
  using moe = no_moe;
  static constexpr ffn_type ffn_kind(int) { return ffn_type::dense; }
};

struct qwen35_9b : qwen35_family {
  static constexpr std::string_view name = "Qwen3.5-9B";
  static constexpr std::string_view arch = "qwen35";
  static constexpr int n_layers = 32;
  static constexpr int n_embd = 4096;
  static constexpr bool tied_embeddings = false;
  using attn = attn_traits_t<16, 4>;
  using gdn = gdn_traits_t<16, 32>;
  using ffn = ffn_traits_t<12288>;
  using moe = no_moe;
  static constexpr ffn_type ffn_kind(int) { return ffn_type::dense; }
};

struct qwen35_27b : qwen35_family {
  static constexpr std::string_view name = "Qwen3.5-27B";
  static constexpr std::string_view arch = "qwen35";
  static constexpr int n_layers = 64;
  static constexpr int n_embd = 5120;
  static constexpr bool tied_embeddings = false;
  using attn = attn_traits_t<24, 4>;
  using gdn = gdn_traits_t<16, 48>;
  using ffn = ffn_traits_t<17408>;
  using moe = no_moe;
  static constexpr ffn_type ffn_kind(int) { return ffn_type::dense; }
};

}  // namespace q35::models
