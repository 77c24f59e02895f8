// Reusable sub-traits of the Qwen3.5 family (spec §1): attention, Gated DeltaNet, FFN, MoE, norm.
// A model's traits name one of each, so kernels instantiated on a sub-trait serve every model
// with that shape.
#pragma once

#include <array>

namespace q35::models {

// Gated full attention (spec §2.1). q projection is 2 * n_heads * head_dim wide ([q | gate] per head).
template <int NHeads, int NKvHeads, int HeadDim = 256, int RopeDim = 64>
struct attn_traits_t {
  static constexpr int n_heads = NHeads;
  static constexpr int n_kv_heads = NKvHeads;
  static constexpr int head_dim = HeadDim;   // key_length
  static constexpr int value_dim = HeadDim;  // value_length
  static constexpr int rope_dim = RopeDim;   // rotary dims (NEOX pairing over the first rope_dim dims)
  static constexpr double rope_theta = 1.0e7;
  // IMROPE sections in pairs of dims (sum = rope_dim / 2), GGUF rope.dimension_sections.
  static constexpr std::array<int, 4> rope_sections{11, 11, 10, 0};
};

// Gated DeltaNet (spec §2.2): v-head j uses q/k head j mod n_k_heads.
template <int NKHeads, int NVHeads, int KHeadDim = 128, int VHeadDim = 128, int ConvKernel = 4>
struct gdn_traits_t {
  static constexpr int n_k_heads = NKHeads;    // ssm.group_count
  static constexpr int n_v_heads = NVHeads;    // ssm.time_step_rank
  static constexpr int k_head_dim = KHeadDim;  // ssm.state_size
  static constexpr int v_head_dim = VHeadDim;  // ssm.inner_size / n_v_heads
  static constexpr int conv_kernel = ConvKernel;
  static constexpr int inner_size = NVHeads * VHeadDim;                 // z / out width
  static constexpr int conv_dim = 2 * NKHeads * KHeadDim + inner_size;  // q | k | v channels
};

// Dense SwiGLU FFN width (0 when no layer is dense).
template <int FfDim>
struct ffn_traits_t {
  static constexpr int ff_dim = FfDim;
};

// Routed experts (softmax over all, top-k, renormalised) plus an optional sigmoid-gated shared expert.
template <int NExperts, int NExpertsUsed, int ExpertFfDim, int SharedFfDim>
struct moe_traits_t {
  static constexpr int n_experts = NExperts;
  static constexpr int n_experts_used = NExpertsUsed;
  static constexpr int expert_ff_dim = ExpertFfDim;
  static constexpr int shared_ff_dim = SharedFfDim;  // 0: no shared expert
};
using no_moe = moe_traits_t<0, 0, 0, 0>;

struct norm_traits_t {
  static constexpr double rms_eps = 1e-6;
};

}  // namespace q35::models
