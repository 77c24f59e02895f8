// device_model: the weights of a bound qwen35 / qwen35moe file in device memory, as the views the
// library's layer calls take (one device allocation holding the file's tensor data).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <unordered_map>
#include <vector>

#include "expert_store.hpp"
#include "q35/arch/memory.hpp"
#include "q35/io/gguf.hpp"
#include "q35/io/model_weights.hpp"
#include "q35/launch/attention.hpp"
#include "q35/launch/ffn.hpp"
#include "q35/launch/gdn.hpp"
#include "q35/launch/moe.hpp"
#include "q35/quant/weight_view.hpp"

namespace q35::gen {

struct layer_views {
  models::layer_type kind = models::layer_type::gated_deltanet;
  models::ffn_type ffn_kind = models::ffn_type::dense;
  const float* attn_norm = nullptr;            // [n_embd]
  const float* post_attention_norm = nullptr;  // [n_embd]
  launch::attn_layer_weights attn;             // full-attention layers
  launch::gdn_layer_weights gdn;               // Gated DeltaNet layers
  launch::dense_ffn_weights ffn;               // dense FFN layers
  launch::moe_weights moe;                     // MoE layers
};

class device_model {
 public:
  // Uploads the tensor data of `f` (bound as `m`); `progress(done, total)` is called as bytes go up.
  // expert_slots in 0 .. n_experts - 1 (a model with MoE layers): the routed experts stay in host
  // memory behind that many device slots per MoE layer (expert_store); the MoE layers' views then
  // read through the store's index. Otherwise (-1, or >= n_experts) everything is on the device.
  status load(const io::gguf_file& f, const io::bound_model& m,
              const std::function<void(uint64_t, uint64_t)>& progress = {}, int expert_slots = -1);
  // The same with the routed experts in host memory behind the plan's slots per MoE layer, holding its
  // first experts at load (memory_plan::placement(): a traced workload's plan).
  status load(const io::gguf_file& f, const io::bound_model& m, const std::function<void(uint64_t, uint64_t)>& progress,
              const expert_slot_plan& experts);

  // Device bytes load() takes for the weights of `f` (one allocation): all of them, or (host_experts)
  // all but the routed experts of the MoE layers. The expert store's bytes come on top.
  static uint64_t weight_bytes_for(const io::gguf_file& f, const io::model_weights& w, bool host_experts);

  // A model whose tensors already lie in device memory (synthetic benchmark models): each tensor_info's
  // `offset` counts from `device_base` (n_bytes in all), which the caller keeps alive as long as this object.
  // experts: the routed experts in host memory (the MoE layers' views read through it), or null.
  status bind(const io::model_hparams& h, const io::model_weights& w, const uint8_t* device_base, uint64_t n_bytes,
              std::unique_ptr<expert_store> experts = nullptr);

  const io::model_hparams& hparams() const { return hp_; }
  const quant::weight_view& token_embd() const { return token_embd_; }
  const quant::weight_view& output() const { return output_; }
  const float* output_norm() const { return output_norm_; }
  const std::vector<layer_views>& layers() const { return layers_; }
  uint64_t weight_bytes() const { return data_.bytes() ? data_.bytes() : bound_bytes_; }
  // The host-resident experts and their device slots, or null (every expert on the device). The
  // decoder promotes experts into slots through it (mutable: it is state, not weights).
  expert_store* experts() const { return experts_.get(); }

 private:
  status load_with(const io::gguf_file& f, const io::bound_model& m,
                   const std::function<void(uint64_t, uint64_t)>& progress, const expert_slot_plan* experts);
  struct upload_plan {
    struct run {
      uint64_t from, to, shift;  // file bytes [from, to) go to device offset from - shift
    };
    std::vector<run> runs;
    std::unordered_map<const io::tensor_info*, uint64_t> shift;
    uint64_t end = 0;  // device bytes
  };
  static upload_plan plan_upload(const io::gguf_file& f, const io::model_weights& w, bool host_experts);
  quant::weight_view view(const io::tensor_info* t) const;
  const float* f32(const io::tensor_info* t) const;
  void bind_views(const io::model_weights& w);

  io::model_hparams hp_;
  device_buffer<uint8_t> data_;    // the file's tensor data section
  const uint8_t* base_ = nullptr;  // data_, or the caller's memory after bind()
  uint64_t bound_bytes_ = 0;       // n_bytes given to bind()
  // bytes of skipped (host-resident expert) tensors before each uploaded tensor in the data section
  std::unordered_map<const io::tensor_info*, uint64_t> shift_;
  std::unique_ptr<expert_store> experts_;
  quant::weight_view token_embd_, output_;
  const float* output_norm_ = nullptr;
  std::vector<layer_views> layers_;
};

}  // namespace q35::gen
