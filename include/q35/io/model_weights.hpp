// bind_model(): reads a qwen35 / qwen35moe file's hyper-parameters, checks its tensors and its
// traits, and binds every weight the decoder uses to its tensor_info (type, shape, data pointer).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "q35/io/gguf.hpp"
#include "q35/io/model_hparams.hpp"
#include "q35/io/model_match.hpp"
#include "q35/io/read_hparams.hpp"
#include "q35/io/tensor_catalogue.hpp"

namespace q35::io {

// Full (gated) attention: shapes as in tensor_catalogue.hpp.
struct attn_weights {
  const tensor_info* q = nullptr;       // [n_embd, 2 * n_heads * head_dim], per head [q | gate]
  const tensor_info* k = nullptr;       // [n_embd, n_kv_heads * head_dim]
  const tensor_info* v = nullptr;       // [n_embd, n_kv_heads * value_dim]
  const tensor_info* output = nullptr;  // [n_heads * value_dim, n_embd]
  const tensor_info* q_norm = nullptr;  // [head_dim]
  const tensor_info* k_norm = nullptr;  // [head_dim]
};

struct gdn_weights {
  const tensor_info* qkv = nullptr;      // [n_embd, conv_dim]
  const tensor_info* gate = nullptr;     // [n_embd, inner_size] (z)
  const tensor_info* conv1d = nullptr;   // [conv_kernel, conv_dim]
  const tensor_info* dt_bias = nullptr;  // [n_v_heads]
  const tensor_info* a = nullptr;        // [n_v_heads], = -exp(A_log)
  const tensor_info* beta = nullptr;     // [n_embd, n_v_heads]
  const tensor_info* alpha = nullptr;    // [n_embd, n_v_heads]
  const tensor_info* norm = nullptr;     // [v_head_dim]
  const tensor_info* out = nullptr;      // [inner_size, n_embd]
};

struct dense_ffn_weights {
  const tensor_info* gate = nullptr;  // [n_embd, ff_dim]
  const tensor_info* up = nullptr;    // [n_embd, ff_dim]
  const tensor_info* down = nullptr;  // [ff_dim, n_embd]
};

struct moe_weights {
  const tensor_info* router = nullptr;                 // ffn_gate_inp [n_embd, n_experts]
  const tensor_info* maybe_gate_exps = nullptr;        // [n_embd, expert_ff, n_experts] (null when merged)
  const tensor_info* maybe_up_exps = nullptr;          // [n_embd, expert_ff, n_experts] (null when merged)
  const tensor_info* maybe_gate_up_exps = nullptr;     // [n_embd, 2 * expert_ff, n_experts], gate rows first
  const tensor_info* down_exps = nullptr;              // [expert_ff, n_embd, n_experts]
  const tensor_info* maybe_shared_gate_inp = nullptr;  // [n_embd] (null without a shared expert)
  const tensor_info* maybe_shared_gate = nullptr;      // [n_embd, shared_ff]
  const tensor_info* maybe_shared_up = nullptr;        // [n_embd, shared_ff]
  const tensor_info* maybe_shared_down = nullptr;      // [shared_ff, n_embd]
};

struct layer_weights {
  models::layer_type kind = models::layer_type::gated_deltanet;
  models::ffn_type ffn_kind = models::ffn_type::dense;
  const tensor_info* attn_norm = nullptr;            // [n_embd]
  const tensor_info* post_attention_norm = nullptr;  // [n_embd]
  attn_weights attn;                                 // full-attention layers only
  gdn_weights gdn;                                   // Gated DeltaNet layers only
  dense_ffn_weights ffn;                             // dense layers only
  moe_weights moe;                                   // MoE layers only
};

struct model_weights {
  const tensor_info* token_embd = nullptr;   // [n_embd, n_vocab]
  const tensor_info* output_norm = nullptr;  // [n_embd]
  const tensor_info* output = nullptr;       // [n_embd, n_vocab]; == token_embd when tied
  bool tied_embeddings = false;
  std::vector<layer_weights> layers;
};

struct bound_model {
  model_hparams hparams;
  std::string_view traits_name;  // the matched known_models entry
  model_weights weights;
};

// Binds the weights of a model with hyperparameters h, each tensor looked up by its GGUF name:
// get(name) returns its const tensor_info*, or null when there is none (no output.weight: tied
// embeddings). For a GGUF file, bind_weights below; an engine that lays out its own tensors (the
// example's synthetic benchmark models) passes its own lookup.
template <class Lookup>
model_weights bind_weights_with(const model_hparams& h, Lookup&& get) {
  model_weights w;
  w.token_embd = get("token_embd.weight");
  w.output_norm = get("output_norm.weight");
  w.output = get("output.weight");
  w.tied_embeddings = w.output == nullptr;
  if (w.tied_embeddings) w.output = w.token_embd;
  for (uint32_t il = 0; il < h.n_layers; ++il) {
    const std::string b = "blk." + std::to_string(il) + ".";
    layer_weights l;
    l.kind = h.layer_kinds[il];
    l.ffn_kind = h.ffn_kinds[il];
    l.attn_norm = get(b + "attn_norm.weight");
    l.post_attention_norm = get(b + "post_attention_norm.weight");
    if (l.kind == models::layer_type::full_attention) {
      l.attn = {get(b + "attn_q.weight"),      get(b + "attn_k.weight"),      get(b + "attn_v.weight"),
                get(b + "attn_output.weight"), get(b + "attn_q_norm.weight"), get(b + "attn_k_norm.weight")};
    } else {
      l.gdn = {get(b + "attn_qkv.weight"),
               get(b + "attn_gate.weight"),
               get(b + "ssm_conv1d.weight"),
               get(b + "ssm_dt.bias"),
               get(b + "ssm_a"),
               get(b + "ssm_beta.weight"),
               get(b + "ssm_alpha.weight"),
               get(b + "ssm_norm.weight"),
               get(b + "ssm_out.weight")};
    }
    if (l.ffn_kind == models::ffn_type::dense) {
      l.ffn = {get(b + "ffn_gate.weight"), get(b + "ffn_up.weight"), get(b + "ffn_down.weight")};
    } else {
      l.moe = {
          get(b + "ffn_gate_inp.weight"),     get(b + "ffn_gate_exps.weight"), get(b + "ffn_up_exps.weight"),
          get(b + "ffn_gate_up_exps.weight"), get(b + "ffn_down_exps.weight"), get(b + "ffn_gate_inp_shexp.weight"),
          get(b + "ffn_gate_shexp.weight"),   get(b + "ffn_up_shexp.weight"),  get(b + "ffn_down_shexp.weight")};
    }
    w.layers.push_back(l);
  }
  return w;
}

// Binds the weights of a file whose tensors passed check_tensors(f, h).
inline model_weights bind_weights(const gguf_file& f, const model_hparams& h) {
  return bind_weights_with(h, [&](const std::string& name) { return f.find_tensor(name); });
}

// Reads, checks and binds `f` against the known traits; throws gguf_error naming the problem.
inline bound_model bind_model(const gguf_file& f) {
  bound_model m;
  m.hparams = read_hparams(f);
  check_tensors(f, m.hparams);
  m.traits_name = match_known_model(f, m.hparams);
  m.weights = bind_weights(f, m.hparams);
  return m;
}

// Binds any valid qwen35 / qwen35moe file: shapes come from the file. traits_name names the known model
// the file matches, or is empty for a shape no known traits type describes. Throws gguf_error naming a
// problem with the file itself (keys, tensors, shapes, types).
inline bound_model bind_any_model(const gguf_file& f) {
  bound_model m;
  m.hparams = read_hparams(f);
  check_tensors(f, m.hparams);
  for_each_known_model([&]<class M>() {
    if (!compare_hparams(m.hparams, hparams_of<M>()).empty()) return false;
    m.traits_name = M::name;
    return true;
  });
  m.weights = bind_weights(f, m.hparams);
  return m;
}

// As bind_model, but the file must match traits M.
template <models::model_traits M>
bound_model bind_model_as(const gguf_file& f) {
  bound_model m;
  m.hparams = read_hparams(f);
  check_tensors(f, m.hparams);
  check_traits<M>(f, m.hparams);
  m.traits_name = M::name;
  m.weights = bind_weights(f, m.hparams);
  return m;
}

}  // namespace q35::io
