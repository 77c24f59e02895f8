// Qwen3.5 traits: values from the spec (§1.1, §1.2) and the fixture README, layer schedules, and the
// concepts that reject inconsistent traits (checked at compile time with static_assert).
#include <doctest/doctest.h>

#include <array>
#include <string_view>
#include <vector>

#include "q35/models/concepts.hpp"
#include "q35/models/qwen35.hpp"
#include "q35/models/qwen35_moe.hpp"
#include "q35/models/tiny.hpp"

namespace m = q35::models;

// ---- every shipped traits type satisfies model_traits ----
static_assert(m::model_traits<m::qwen35_0_8b>);
static_assert(m::model_traits<m::qwen35_2b>);
static_assert(m::model_traits<m::qwen35_4b>);
static_assert(m::model_traits<m::qwen35_9b>);
static_assert(m::model_traits<m::qwen35_27b>);
static_assert(m::model_traits<m::qwen35_35b_a3b>);
static_assert(m::model_traits<m::qwen35_9b_moe>);
static_assert(m::model_traits<m::tiny_dense>);
static_assert(m::model_traits<m::tiny_moe>);
static_assert(m::model_traits<m::tiny_interleaved>);

// ---- spec §1.1: Qwen3.5-9B ----
using nine = m::qwen35_9b;
static_assert(nine::n_layers == 32 && nine::n_embd == 4096 && nine::n_vocab == 248320 &&
              nine::context_length == 262144);
static_assert(nine::attn::n_heads == 16 && nine::attn::n_kv_heads == 4 && nine::attn::head_dim == 256);
static_assert(nine::attn::rope_dim == 64 && nine::attn::rope_theta == 1.0e7);
static_assert(nine::attn::rope_sections == std::array<int, 4>{11, 11, 10, 0});
static_assert(nine::gdn::n_k_heads == 16 && nine::gdn::n_v_heads == 32 && nine::gdn::k_head_dim == 128 &&
              nine::gdn::v_head_dim == 128 && nine::gdn::conv_kernel == 4);
static_assert(nine::gdn::inner_size == 4096 && nine::gdn::conv_dim == 8192);  // ssm.inner_size, attn_qkv rows
static_assert(nine::ffn::ff_dim == 12288 && nine::norm::rms_eps == 1e-6 && !nine::tied_embeddings);

// ---- spec §1.2 table ----
static_assert(m::qwen35_0_8b::n_layers == 24 && m::qwen35_0_8b::n_embd == 1024 && m::qwen35_0_8b::attn::n_heads == 8 &&
              m::qwen35_0_8b::attn::n_kv_heads == 2 && m::qwen35_0_8b::ffn::ff_dim == 3584 &&
              m::qwen35_0_8b::gdn::n_k_heads == 16 && m::qwen35_0_8b::gdn::n_v_heads == 16 &&
              m::qwen35_0_8b::tied_embeddings);
static_assert(m::qwen35_2b::n_layers == 24 && m::qwen35_2b::n_embd == 2048 && m::qwen35_2b::attn::n_heads == 8 &&
              m::qwen35_2b::attn::n_kv_heads == 2 && m::qwen35_2b::ffn::ff_dim == 6144 &&
              m::qwen35_2b::tied_embeddings);
static_assert(m::qwen35_4b::n_layers == 32 && m::qwen35_4b::n_embd == 2560 && m::qwen35_4b::attn::n_heads == 16 &&
              m::qwen35_4b::attn::n_kv_heads == 4 && m::qwen35_4b::ffn::ff_dim == 9216 &&
              m::qwen35_4b::gdn::n_v_heads == 32 && m::qwen35_4b::tied_embeddings);
// 4B: head_dim 256 is not n_embd / n_heads (= 160), spec §6 pitfall 6.
static_assert(m::qwen35_4b::attn::head_dim == 256 && m::qwen35_4b::n_embd / m::qwen35_4b::attn::n_heads == 160);
static_assert(m::qwen35_27b::n_layers == 64 && m::qwen35_27b::n_embd == 5120 && m::qwen35_27b::attn::n_heads == 24 &&
              m::qwen35_27b::attn::n_kv_heads == 4 && m::qwen35_27b::ffn::ff_dim == 17408 &&
              m::qwen35_27b::gdn::n_v_heads == 48 && m::qwen35_27b::gdn::inner_size == 6144 &&
              !m::qwen35_27b::tied_embeddings);
using a3b = m::qwen35_35b_a3b;
static_assert(a3b::arch == "qwen35moe" && a3b::n_layers == 40 && a3b::n_embd == 2048 && a3b::attn::n_heads == 16 &&
              a3b::attn::n_kv_heads == 2 && a3b::moe::n_experts == 256 && a3b::moe::n_experts_used == 8 &&
              a3b::moe::expert_ff_dim == 512 && a3b::moe::shared_ff_dim == 512 && a3b::gdn::n_v_heads == 32);

// ---- fixture README ----
static_assert(m::tiny_dense::n_embd == 256 && m::tiny_dense::n_layers == 4 && m::tiny_dense::attn::n_heads == 2 &&
              m::tiny_dense::attn::n_kv_heads == 1 && m::tiny_dense::gdn::n_k_heads == 2 &&
              m::tiny_dense::gdn::n_v_heads == 4 && m::tiny_dense::ffn::ff_dim == 512 && m::tiny_dense::n_vocab == 512);
static_assert(m::tiny_moe::moe::n_experts == 8 && m::tiny_moe::moe::n_experts_used == 2 &&
              m::tiny_moe::moe::expert_ff_dim == 256 && m::tiny_moe::moe::shared_ff_dim == 256);
static_assert(m::tiny_interleaved::moe::n_experts == 16 && m::tiny_interleaved::moe::n_experts_used == 4);

// ---- concepts reject inconsistent traits, each through its named rule ----
using good_attn = m::attn_traits_t<16, 4>;
struct attn_gqa_uneven : good_attn {
  static constexpr int n_kv_heads = 5;  // 16 q heads cannot share 5 kv heads evenly
};
struct attn_zero_kv : good_attn {
  static constexpr int n_kv_heads = 0;
};
struct attn_rope_too_wide : good_attn {
  static constexpr int rope_dim = 512;  // more rotary dims than the head has
};
struct attn_rope_odd : good_attn {
  static constexpr int rope_dim = 63;
};
struct attn_bad_sections : good_attn {
  static constexpr std::array<int, 4> rope_sections{16, 16, 16, 0};  // covers 96 dims, not 64
};
struct attn_missing_member {
  static constexpr int n_heads = 16;
};
static_assert(m::attn_traits<good_attn>);
static_assert(!m::kv_heads_divide_heads<attn_gqa_uneven> && !m::attn_traits<attn_gqa_uneven>);
static_assert(!m::attn_dims_positive<attn_zero_kv> && !m::kv_heads_divide_heads<attn_zero_kv> &&
              !m::attn_traits<attn_zero_kv>);
static_assert(!m::rope_fits_in_head<attn_rope_too_wide> && !m::attn_traits<attn_rope_too_wide>);
static_assert(!m::rope_fits_in_head<attn_rope_odd> && !m::attn_traits<attn_rope_odd>);
static_assert(m::rope_fits_in_head<attn_bad_sections> && !m::rope_sections_cover_rope_dim<attn_bad_sections> &&
              !m::attn_traits<attn_bad_sections>);
static_assert(!m::attn_members<attn_missing_member> && !m::attn_traits<attn_missing_member>);

using good_gdn = m::gdn_traits_t<16, 32>;
static_assert(m::gdn_traits<good_gdn>);
static_assert(!m::k_heads_divide_v_heads<m::gdn_traits_t<16, 24>> && !m::gdn_traits<m::gdn_traits_t<16, 24>>);
static_assert(!m::conv_kernel_has_history<m::gdn_traits_t<16, 32, 128, 128, 1>> &&
              !m::gdn_traits<m::gdn_traits_t<16, 32, 128, 128, 1>>);
struct gdn_wrong_conv_dim : good_gdn {
  static constexpr int conv_dim = 16 * 128 + 4096;  // forgot that q and k both take n_k * d_k channels
};
static_assert(m::gdn_widths_consistent<good_gdn> && !m::gdn_widths_consistent<gdn_wrong_conv_dim> &&
              !m::gdn_traits<gdn_wrong_conv_dim>);

static_assert(m::moe_traits<m::moe_traits_t<64, 4, 3072, 3072>>);
static_assert(!m::experts_used_within_experts<m::moe_traits_t<4, 8, 512, 0>> &&
              !m::moe_traits<m::moe_traits_t<4, 8, 512, 0>>);
struct bad_eps {
  static constexpr double rms_eps = 0;
};
static_assert(!m::norm_traits<bad_eps>);

// Whole-model rules.
struct moe_without_experts : m::qwen35_9b_moe {
  using moe = m::no_moe;  // MoE layers in the schedule but no experts
};
struct dense_without_width : m::qwen35_9b {
  using ffn = m::ffn_traits_t<0>;
};
struct dense_arch_with_moe : m::qwen35_9b_moe {
  static constexpr std::string_view arch = "qwen35";
};
struct moe_arch_all_dense : m::qwen35_9b {
  static constexpr std::string_view arch = "qwen35moe";
};
struct schedule_off_interval : m::qwen35_9b {
  static constexpr m::layer_type layer_kind(int il) {
    return il % 4 == 0 ? m::layer_type::full_attention : m::layer_type::gated_deltanet;  // 0, 4, ... not 3, 7, ...
  }
};
struct bad_attn_in_model : m::qwen35_9b {
  using attn = attn_gqa_uneven;
};
static_assert(!m::moe_layers_have_experts<moe_without_experts> && !m::model_traits<moe_without_experts>);
static_assert(!m::dense_layers_have_ffn_width<dense_without_width> && !m::model_traits<dense_without_width>);
static_assert(!m::arch_matches_ffn_schedule<dense_arch_with_moe> && !m::model_traits<dense_arch_with_moe>);
static_assert(!m::arch_matches_ffn_schedule<moe_arch_all_dense> && !m::model_traits<moe_arch_all_dense>);
static_assert(!m::layer_kind_follows_interval<schedule_off_interval> && !m::model_traits<schedule_off_interval>);
static_assert(!m::model_traits<bad_attn_in_model>);
static_assert(!m::model_traits<int>);

// ---- schedules (run time, so failures show the layer) ----
template <class M>
std::vector<int> layers_where(bool (*pred)(int)) {
  std::vector<int> v;
  for (int il = 0; il < M::n_layers; ++il)
    if (pred(il)) v.push_back(il);
  return v;
}

TEST_CASE("traits: full attention on layers 3, 7, 11, ... (spec 2.0)") {
  const auto full9 = layers_where<nine>([](int il) { return nine::layer_kind(il) == m::layer_type::full_attention; });
  CHECK(full9 == std::vector<int>{3, 7, 11, 15, 19, 23, 27, 31});
  const auto full27 = layers_where<m::qwen35_27b>(
      [](int il) { return m::qwen35_27b::layer_kind(il) == m::layer_type::full_attention; });
  CHECK(full27.size() == 16);
  CHECK(full27.back() == 63);
  const auto full_a3b = layers_where<a3b>([](int il) { return a3b::layer_kind(il) == m::layer_type::full_attention; });
  CHECK(full_a3b.size() == 10);  // spec §4: 35B-A3B has 10 KV layers
  const auto full_tiny = layers_where<m::tiny_dense>(
      [](int il) { return m::tiny_dense::layer_kind(il) == m::layer_type::full_attention; });
  CHECK(full_tiny == std::vector<int>{3});
}

TEST_CASE("traits: FFN kinds of the MoE and interleaved schedules") {
  using moe9 = m::qwen35_9b_moe;
  const auto moe_layers = layers_where<moe9>([](int il) { return moe9::ffn_kind(il) == m::ffn_type::moe; });
  CHECK(moe_layers == std::vector<int>{4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30});
  CHECK(moe9::moe::n_experts == 64);
  CHECK(moe9::moe::n_experts_used == 4);
  const auto tiny_moe_layers =
      layers_where<m::tiny_interleaved>([](int il) { return m::tiny_interleaved::ffn_kind(il) == m::ffn_type::moe; });
  CHECK(tiny_moe_layers == std::vector<int>{1, 3});  // fixture README: layers 1 and 3 MoE
  CHECK(layers_where<a3b>([](int il) { return a3b::ffn_kind(il) == m::ffn_type::moe; }).size() == 40);
  CHECK(layers_where<nine>([](int il) { return nine::ffn_kind(il) == m::ffn_type::moe; }).empty());
}
