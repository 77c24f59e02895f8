// What every Qwen3.5 checkpoint shares (spec §1.2 "All sizes"): vocabulary, context, norm eps and
// the hybrid schedule (full attention on every 4th layer, Gated DeltaNet elsewhere).
#pragma once

#include "q35/models/schedule.hpp"
#include "q35/models/sub_traits.hpp"

namespace q35::models {

struct qwen35_family {
  static constexpr int n_vocab = 248320;  // padded; the tokenizer uses ids 0..248076
  static constexpr int context_length = 262144;
  static constexpr int full_attention_interval = 4;
  using norm = norm_traits_t;
  static constexpr layer_type layer_kind(int il) { return hybrid_layer_kind(il, full_attention_interval); }
};

}  // namespace q35::models
