// Matching a file's hyper-parameters to model traits: every hyper-parameter is compared, a mismatch
// names the GGUF key, the file's value and the traits' value; known_models lists the supported traits.
#pragma once

#include <cmath>
#include <sstream>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "q35/io/gguf.hpp"
#include "q35/io/model_hparams.hpp"
#include "q35/models/qwen35.hpp"
#include "q35/models/qwen35_moe.hpp"
#include "q35/models/tiny.hpp"

namespace q35::io {

struct hparam_mismatch {
  std::string key;  // the GGUF key (or, for the schedule, the layer)
  std::string file_value;
  std::string expected;
};

namespace detail {
template <class T>
std::string show(const T& v) {
  std::ostringstream s;
  s.precision(9);
  s << v;
  return s.str();
}
}  // namespace detail

// Every difference between a file's hyper-parameters and the expected ones, in key order.
inline std::vector<hparam_mismatch> compare_hparams(const model_hparams& file, const model_hparams& want) {
  std::vector<hparam_mismatch> out;
  const std::string p = file.arch + ".";
  auto eq = [&](const std::string& key, const auto& a, const auto& b) {
    if (!(a == b)) out.push_back({key, detail::show(a), detail::show(b)});
  };
  auto near = [&](const std::string& key, double a, double b) {  // f32 in the file vs the exact value
    if (std::fabs(a - b) > 1e-6 * std::fabs(b)) out.push_back({key, detail::show(a), detail::show(b)});
  };
  eq("general.architecture", file.arch, want.arch);
  eq(p + "block_count (minus nextn_predict_layers)", file.n_layers, want.n_layers);
  eq(p + "embedding_length", file.n_embd, want.n_embd);
  eq("tokenizer.ggml.tokens (count)", file.n_vocab, want.n_vocab);
  eq(p + "context_length", file.context_length, want.context_length);
  eq(p + "attention.head_count", file.n_heads, want.n_heads);
  eq(p + "attention.head_count_kv", file.n_kv_heads, want.n_kv_heads);
  eq(p + "attention.key_length", file.head_dim, want.head_dim);
  eq(p + "attention.value_length", file.value_dim, want.value_dim);
  eq(p + "rope.dimension_count", file.rope_dim, want.rope_dim);
  near(p + "rope.freq_base", file.rope_theta, want.rope_theta);
  for (int i = 0; i < 4; ++i)
    eq(p + "rope.dimension_sections[" + std::to_string(i) + "]", file.rope_sections[i], want.rope_sections[i]);
  near(p + "attention.layer_norm_rms_epsilon", file.rms_eps, want.rms_eps);
  eq(p + "full_attention_interval", file.full_attention_interval, want.full_attention_interval);
  eq(p + "ssm.conv_kernel", file.ssm_conv_kernel, want.ssm_conv_kernel);
  eq(p + "ssm.inner_size", file.ssm_inner_size, want.ssm_inner_size);
  eq(p + "ssm.state_size", file.ssm_k_head_dim, want.ssm_k_head_dim);
  eq(p + "ssm.time_step_rank", file.ssm_n_v_heads, want.ssm_n_v_heads);
  eq(p + "ssm.group_count", file.ssm_n_k_heads, want.ssm_n_k_heads);
  // FFN widths matter only where a layer of that kind exists.
  if (want.count(models::ffn_type::dense) > 0) eq(p + "feed_forward_length", file.ff_dim, want.ff_dim);
  if (want.count(models::ffn_type::moe) > 0) {
    eq(p + "expert_count", file.n_experts, want.n_experts);
    eq(p + "expert_used_count", file.n_experts_used, want.n_experts_used);
    eq(p + "expert_feed_forward_length", file.expert_ff_dim, want.expert_ff_dim);
    eq(p + "expert_shared_feed_forward_length", file.shared_ff_dim, want.shared_ff_dim);
  }
  for (size_t il = 0; il < file.layer_kinds.size() && il < want.layer_kinds.size(); ++il) {
    eq("layer " + std::to_string(il) + " mixer", std::string(models::to_string(file.layer_kinds[il])),
       std::string(models::to_string(want.layer_kinds[il])));
    eq("layer " + std::to_string(il) + " FFN (from its tensors)", std::string(models::to_string(file.ffn_kinds[il])),
       std::string(models::to_string(want.ffn_kinds[il])));
  }
  return out;
}

inline std::string describe_mismatches(const std::vector<hparam_mismatch>& ms) {
  std::string s;
  for (const auto& m : ms) {
    if (!s.empty()) s += "; ";
    s += m.key + ": file has " + m.file_value + ", expected " + m.expected;
  }
  return s;
}

// Throws unless `h` (read from `f`) matches traits M in every hyper-parameter.
template <models::model_traits M>
void check_traits(const gguf_file& f, const model_hparams& h) {
  const auto ms = compare_hparams(h, hparams_of<M>());
  if (!ms.empty()) f.fail("does not match " + std::string(M::name) + ": " + describe_mismatches(ms));
}

// Every traits type a file can bind to, checkpoints first.
using known_models = std::tuple<models::qwen35_0_8b, models::qwen35_2b, models::qwen35_4b, models::qwen35_9b,
                                models::qwen35_27b, models::qwen35_35b_a3b, models::qwen35_9b_moe, models::tiny_dense,
                                models::tiny_moe, models::tiny_interleaved>;

// Calls f.template operator()<M>() for each known traits type M, in order, until it returns true.
template <class F>
bool for_each_known_model(F&& f) {
  return std::apply([&](auto... m) { return (f.template operator()<decltype(m)>() || ...); }, known_models{});
}

// The name of the known traits `h` matches; otherwise throws, listing the supported models and the
// closest candidate's differences.
inline std::string_view match_known_model(const gguf_file& f, const model_hparams& h) {
  std::string_view matched, closest;
  std::vector<hparam_mismatch> closest_ms;
  std::string supported;
  for_each_known_model([&]<class M>() {
    supported += (supported.empty() ? "" : ", ") + std::string(M::name) + " (" + std::string(M::arch) + ", " +
                 std::to_string(M::n_layers) + " layers, n_embd " + std::to_string(M::n_embd) + ")";
    auto ms = compare_hparams(h, hparams_of<M>());
    if (ms.empty() && matched.empty()) matched = M::name;
    if (M::arch == h.arch && (closest.empty() || ms.size() < closest_ms.size())) {
      closest = M::name;
      closest_ms = std::move(ms);
    }
    return false;
  });
  if (!matched.empty()) return matched;
  std::string msg = "hyper-parameters match no supported model (supported: " + supported + ")";
  if (!closest.empty()) msg += "; closest is " + std::string(closest) + ": " + describe_mismatches(closest_ms);
  f.fail(msg);
}

}  // namespace q35::io
