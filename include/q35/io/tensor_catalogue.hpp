// The tensors a qwen35 / qwen35moe file must hold (spec §3.3), with ggml shapes derived from the
// hyper-parameters, and check_tensors(): missing, unexpected, mis-shaped and unsupported-type
// tensors are reported together, each by name.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

#include "q35/io/ggml_types.hpp"
#include "q35/io/gguf.hpp"
#include "q35/io/model_hparams.hpp"
#include "q35/quant/format_list.hpp"

namespace q35::io {

using tensor_shape = std::array<uint64_t, 4>;  // ggml ne order: ne[0] is contiguous; unused dims are 1

struct expected_tensor {
  std::string name;
  tensor_shape ne;
  bool optional = false;  // output.weight: absent means tied embeddings
};

// The ggml types q35's kernels read: quant::supported_formats, the one list.
constexpr bool q35_supports(ggml_type t) { return quant::is_supported(uint32_t(t)); }
inline constexpr std::string_view q35_supported_types = quant::supported_format_names;

inline std::string shape_string(const tensor_shape& ne, uint32_t n_dims = 4) {
  while (n_dims > 1 && ne[n_dims - 1] == 1) --n_dims;
  std::string s = "[";
  for (uint32_t d = 0; d < n_dims; ++d) s += (d ? ", " : "") + std::to_string(ne[d]);
  return s + "]";
}

// Layer index N of a "blk.N.*" name, or nullopt.
inline std::optional<uint64_t> block_index(std::string_view name) {
  if (name.substr(0, 4) != "blk.") return std::nullopt;
  uint64_t n = 0;
  size_t i = 4;
  for (; i < name.size() && i < 12 && name[i] >= '0' && name[i] <= '9'; ++i) n = n * 10 + uint64_t(name[i] - '0');
  if (i == 4 || i >= name.size() || name[i] != '.') return std::nullopt;
  return n;
}

// Every tensor the decoder uses, for hyper-parameters `h`. MoE layers expect separate gate/up expert
// tensors unless `maybe_file` holds the merged blk.N.ffn_gate_up_exps.weight.
inline std::vector<expected_tensor> expected_tensors(const model_hparams& h, const gguf_file* maybe_file = nullptr) {
  std::vector<expected_tensor> out;
  const uint64_t e = h.n_embd;
  auto add = [&](std::string name, tensor_shape ne, bool optional = false) {
    out.push_back({std::move(name), ne, optional});
  };
  add("token_embd.weight", {e, h.n_vocab, 1, 1});
  add("output_norm.weight", {e, 1, 1, 1});
  add("output.weight", {e, h.n_vocab, 1, 1}, true);
  const uint64_t conv_dim = h.ssm_conv_dim(), inner = h.ssm_inner_size, n_v = h.ssm_n_v_heads;
  for (uint32_t il = 0; il < h.n_layers; ++il) {
    const std::string b = "blk." + std::to_string(il) + ".";
    add(b + "attn_norm.weight", {e, 1, 1, 1});
    add(b + "post_attention_norm.weight", {e, 1, 1, 1});
    if (h.layer_kinds[il] == models::layer_type::full_attention) {
      add(b + "attn_q.weight", {e, 2ull * h.n_heads * h.head_dim, 1, 1});  // [q | gate] per head
      add(b + "attn_k.weight", {e, uint64_t(h.n_kv_heads) * h.head_dim, 1, 1});
      add(b + "attn_v.weight", {e, uint64_t(h.n_kv_heads) * h.value_dim, 1, 1});
      add(b + "attn_output.weight", {uint64_t(h.n_heads) * h.value_dim, e, 1, 1});
      add(b + "attn_q_norm.weight", {h.head_dim, 1, 1, 1});
      add(b + "attn_k_norm.weight", {h.head_dim, 1, 1, 1});
    } else {
      add(b + "attn_qkv.weight", {e, conv_dim, 1, 1});  // q | k | v channels
      add(b + "attn_gate.weight", {e, inner, 1, 1});    // z
      add(b + "ssm_conv1d.weight", {h.ssm_conv_kernel, conv_dim, 1, 1});
      add(b + "ssm_dt.bias", {n_v, 1, 1, 1});
      add(b + "ssm_a", {n_v, 1, 1, 1});
      add(b + "ssm_beta.weight", {e, n_v, 1, 1});
      add(b + "ssm_alpha.weight", {e, n_v, 1, 1});
      add(b + "ssm_norm.weight", {h.ssm_v_head_dim(), 1, 1, 1});
      add(b + "ssm_out.weight", {inner, e, 1, 1});
    }
    if (h.ffn_kinds[il] == models::ffn_type::dense) {
      add(b + "ffn_gate.weight", {e, h.ff_dim, 1, 1});
      add(b + "ffn_up.weight", {e, h.ff_dim, 1, 1});
      add(b + "ffn_down.weight", {h.ff_dim, e, 1, 1});
    } else {
      const uint64_t n_exp = h.n_experts, eff = h.expert_ff_dim, sff = h.shared_ff_dim;
      add(b + "ffn_gate_inp.weight", {e, n_exp, 1, 1});
      if (maybe_file && maybe_file->find_tensor(b + "ffn_gate_up_exps.weight")) {
        add(b + "ffn_gate_up_exps.weight", {e, 2 * eff, n_exp, 1});  // gate rows, then up rows
      } else {
        add(b + "ffn_gate_exps.weight", {e, eff, n_exp, 1});
        add(b + "ffn_up_exps.weight", {e, eff, n_exp, 1});
      }
      add(b + "ffn_down_exps.weight", {eff, e, n_exp, 1});
      if (sff > 0) {
        add(b + "ffn_gate_inp_shexp.weight", {e, 1, 1, 1});
        add(b + "ffn_gate_shexp.weight", {e, sff, 1, 1});
        add(b + "ffn_up_shexp.weight", {e, sff, 1, 1});
        add(b + "ffn_down_shexp.weight", {sff, e, 1, 1});
      }
    }
  }
  return out;
}

// True for the tensors of the MTP tail layers (blk.N with n_layers <= N < n_layers + nextn), which
// a plain decoder ignores (spec §3.4).
inline bool is_mtp_tensor(const model_hparams& h, std::string_view name) {
  const auto il = block_index(name);
  return il && *il >= h.n_layers && *il < uint64_t(h.n_layers) + h.n_nextn_layers;
}

// Throws one gguf_error listing every missing, mis-shaped, unsupported-type and unexpected tensor.
inline void check_tensors(const gguf_file& f, const model_hparams& h) {
  std::vector<std::string> problems;
  std::unordered_set<std::string_view> expected_names;
  const auto expected = expected_tensors(h, &f);
  for (const expected_tensor& x : expected) {
    expected_names.insert(x.name);
    const tensor_info* t = f.find_tensor(x.name);
    if (!t) {
      if (!x.optional)
        problems.push_back("missing tensor '" + x.name + "' (expected shape " + shape_string(x.ne) + ")");
      continue;
    }
    if (t->ne != x.ne)
      problems.push_back("tensor '" + x.name + "' has shape " + shape_string(t->ne, t->n_dims) + ", expected " +
                         shape_string(x.ne));
    if (!q35_supports(t->ggml()))
      problems.push_back("tensor '" + x.name + "' has type " + std::string(t->type_name()) +
                         ", which q35 does not support (supported: " + std::string(q35_supported_types) + ")");
  }
  for (const tensor_info& t : f.tensors())
    if (!expected_names.count(t.name) && !is_mtp_tensor(h, t.name))
      problems.push_back("unexpected tensor '" + t.name + "' " + shape_string(t.ne, t.n_dims) + " for " + h.arch);
  if (problems.empty()) return;
  std::string msg = std::to_string(problems.size()) + " tensor problem" + (problems.size() > 1 ? "s" : "") + ": ";
  for (size_t i = 0; i < problems.size() && i < 20; ++i) msg += (i ? "; " : "") + problems[i];
  if (problems.size() > 20) msg += "; ...";
  f.fail(msg);
}

}  // namespace q35::io
