// Concepts that validate Qwen3.5 traits. Each rule is its own named concept, so a rejected traits
// type fails with the name of the broken rule (e.g. `kv_heads_divide_heads`) in the diagnostic.
#pragma once

#include <concepts>
#include <string_view>

#include "q35/models/schedule.hpp"

namespace q35::models {

// ---- attention ----
template <class A>
concept attn_members = requires {
  { A::n_heads } -> std::convertible_to<int>;
  { A::n_kv_heads } -> std::convertible_to<int>;
  { A::head_dim } -> std::convertible_to<int>;
  { A::value_dim } -> std::convertible_to<int>;
  { A::rope_dim } -> std::convertible_to<int>;
  { A::rope_theta } -> std::convertible_to<double>;
  A::rope_sections[3];
};
template <class A>
concept attn_dims_positive = (A::n_heads > 0) && (A::n_kv_heads > 0) && (A::head_dim > 0) && (A::value_dim > 0);
// GQA: q head h uses kv head h / (n_heads / n_kv_heads).
template <class A>
concept kv_heads_divide_heads = (A::n_kv_heads > 0) && (A::n_heads % A::n_kv_heads == 0);
template <class A>
concept rope_fits_in_head = (A::rope_dim > 0) && (A::rope_dim % 2 == 0) && (A::rope_dim <= A::head_dim);
template <class A>
concept rope_sections_cover_rope_dim =
    (A::rope_sections[0] + A::rope_sections[1] + A::rope_sections[2] + A::rope_sections[3] == A::rope_dim / 2);
template <class A>
concept attn_traits = attn_members<A> && attn_dims_positive<A> && kv_heads_divide_heads<A> && rope_fits_in_head<A> &&
    rope_sections_cover_rope_dim<A>;

// ---- Gated DeltaNet ----
template <class G>
concept gdn_members = requires {
  { G::n_k_heads } -> std::convertible_to<int>;
  { G::n_v_heads } -> std::convertible_to<int>;
  { G::k_head_dim } -> std::convertible_to<int>;
  { G::v_head_dim } -> std::convertible_to<int>;
  { G::conv_kernel } -> std::convertible_to<int>;
  { G::inner_size } -> std::convertible_to<int>;
  { G::conv_dim } -> std::convertible_to<int>;
};
template <class G>
concept gdn_dims_positive = (G::n_k_heads > 0) && (G::n_v_heads > 0) && (G::k_head_dim > 0) && (G::v_head_dim > 0);
// v-head j uses k-head j mod n_k.
template <class G>
concept k_heads_divide_v_heads = (G::n_k_heads > 0) && (G::n_v_heads % G::n_k_heads == 0);
template <class G>
concept conv_kernel_has_history = (G::conv_kernel >= 2);  // the conv state keeps conv_kernel - 1 steps
template <class G>
concept gdn_widths_consistent = (G::inner_size == G::n_v_heads * G::v_head_dim) &&
                                (G::conv_dim == 2 * G::n_k_heads * G::k_head_dim + G::inner_size);
template <class G>
concept gdn_traits = gdn_members<G> && gdn_dims_positive<G> && k_heads_divide_v_heads<G> &&
    conv_kernel_has_history<G> && gdn_widths_consistent<G>;

// ---- FFN / MoE / norm ----
template <class F>
concept ffn_members = requires {
  { F::ff_dim } -> std::convertible_to<int>;
};
template <class F>
concept ffn_width_non_negative = (F::ff_dim >= 0);
template <class F>
concept ffn_traits = ffn_members<F> && ffn_width_non_negative<F>;

template <class E>
concept moe_members = requires {
  { E::n_experts } -> std::convertible_to<int>;
  { E::n_experts_used } -> std::convertible_to<int>;
  { E::expert_ff_dim } -> std::convertible_to<int>;
  { E::shared_ff_dim } -> std::convertible_to<int>;
};
template <class E>
concept experts_used_within_experts = (E::n_experts_used >= 0) && (E::n_experts_used <= E::n_experts);
template <class E>
concept moe_widths_non_negative = (E::expert_ff_dim >= 0) && (E::shared_ff_dim >= 0);
template <class E>
concept moe_traits = moe_members<E> && experts_used_within_experts<E> && moe_widths_non_negative<E>;

template <class N>
concept norm_members = requires {
  { N::rms_eps } -> std::convertible_to<double>;
};
template <class N>
concept rms_eps_positive = (N::rms_eps > 0);
template <class N>
concept norm_traits = norm_members<N> && rms_eps_positive<N>;

// ---- whole model ----
template <class M>
concept model_members = requires(int il) {
  { M::name } -> std::convertible_to<std::string_view>;
  { M::arch } -> std::convertible_to<std::string_view>;
  { M::n_layers } -> std::convertible_to<int>;
  { M::n_embd } -> std::convertible_to<int>;
  { M::n_vocab } -> std::convertible_to<int>;
  { M::context_length } -> std::convertible_to<int>;
  { M::full_attention_interval } -> std::convertible_to<int>;
  { M::tied_embeddings } -> std::convertible_to<bool>;
  { M::layer_kind(il) } -> std::same_as<layer_type>;
  { M::ffn_kind(il) } -> std::same_as<ffn_type>;
  typename M::attn;
  typename M::gdn;
  typename M::ffn;
  typename M::moe;
  typename M::norm;
};

namespace detail {
template <class M>
constexpr bool layer_kinds_follow_interval() {
  for (int il = 0; il < M::n_layers; ++il)
    if (M::layer_kind(il) != hybrid_layer_kind(il, M::full_attention_interval)) return false;
  return true;
}
template <class M>
constexpr int count_layers(ffn_type t) {
  int n = 0;
  for (int il = 0; il < M::n_layers; ++il) n += M::ffn_kind(il) == t;
  return n;
}
}  // namespace detail

template <class M>
concept model_dims_positive = (M::n_layers > 0) && (M::n_embd > 0) && (M::n_vocab > 0) && (M::context_length > 0) &&
                              (M::full_attention_interval > 0);
// layer_kind must follow the GGUF's full_attention_interval rule, the only schedule a file can state.
template <class M>
concept layer_kind_follows_interval = detail::layer_kinds_follow_interval<M>();
template <class M>
concept dense_layers_have_ffn_width = (detail::count_layers<M>(ffn_type::dense) == 0) || (M::ffn::ff_dim > 0);
template <class M>
concept moe_layers_have_experts = (detail::count_layers<M>(ffn_type::moe) == 0) ||
                                  ((M::moe::n_experts > 0) && (M::moe::n_experts_used > 0) &&
                                   (M::moe::expert_ff_dim > 0));
// qwen35 files hold only dense FFNs; qwen35moe files hold at least one MoE layer.
template <class M>
concept arch_matches_ffn_schedule = (M::arch == std::string_view("qwen35") &&
                                     detail::count_layers<M>(ffn_type::moe) == 0) ||
                                    (M::arch == std::string_view("qwen35moe") &&
                                     detail::count_layers<M>(ffn_type::moe) > 0);

template <class M>
concept model_traits = model_members<M> && attn_traits<typename M::attn> && gdn_traits<typename M::gdn> &&
    ffn_traits<typename M::ffn> && moe_traits<typename M::moe> && norm_traits<typename M::norm> &&
    model_dims_positive<M> && layer_kind_follows_interval<M> && dense_layers_have_ffn_width<M> &&
    moe_layers_have_experts<M> && arch_matches_ffn_schedule<M>;

}  // namespace q35::models
