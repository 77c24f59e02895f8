// decoder: one Qwen3.5 sequence on the device — embedding, the file's layer schedule (Gated DeltaNet
// or gated attention; dense or MoE FFN), final norm, LM head and sampling — composed from the
// library's layer calls. Shapes come from the file at run time.
//
//   gen::decoder d;  Q35_TRY(d.init(model, cfg));
//   Q35_TRY(d.eval(prompt_ids));              // prefill (in chunks of cfg.n_batch tokens)
//   int32_t id;  Q35_TRY(d.sample(params, id));   // only the id comes back to the host
//   Q35_TRY(d.eval({&id, 1}));                // one decode step
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "device_model.hpp"
#include "q35/arch/graph.hpp"
#include "q35/arch/memory.hpp"
#include "q35/kv/kv_pool.hpp"
#include "q35/kv/page_table.hpp"
#include "q35/kv/recurrent_state.hpp"
#include "q35/launch/sample.hpp"

namespace q35::gen {

struct decoder_config {
  int64_t n_ctx = 4096;  // tokens the sequence may hold
  kv::kv_type kv_type = kv::kv_type::f16;
  int64_t n_batch = 512;         // tokens per prefill call (a longer input is fed in chunks)
  bool keep_all_logits = false;  // eval() returns the logits of every input token, not only the last
  bool use_graphs = true;        // CUDA: record the one-token step once as a graph and replay it
};

// What a prompt cache holds: the tokens fed so far and the device state after them.
struct decoder_state {
  std::vector<int32_t> tokens;
  std::vector<uint8_t> recurrent;  // recurrent_state_pool::snapshot of the slot
  std::vector<uint8_t> kv;         // K and V of every full-attention layer for the tokens
  std::vector<float> last_logits;  // the logits after the last token, so generation can start from them
};

// Checks that the compiled kernels serve every shape of `h`; the message names the GGUF key, the file's
// value and the supported values.
status check_supported(const io::model_hparams& h);

class decoder {
 public:
  status init(const device_model& m, const decoder_config& cfg);

  // Feeds `tokens` after the n_past() tokens already fed. On success logits() holds the logits of the last
  // token (of every token when keep_all_logits: `host_logits` then receives them, row by row, appended).
  status eval(std::span<const int32_t> tokens, std::vector<float>* host_logits = nullptr);
  // Draws the next token from the last logits on the device; `recent` are the latest ids (repetition penalty).
  status sample(const launch::sampling_params& p, std::span<const int32_t> recent, int32_t& id);
  // The last logits row, copied to the host.
  status last_logits(std::vector<float>& out) const;

  int64_t n_past() const { return n_past_; }
  int64_t n_ctx() const { return cfg_.n_ctx; }
  const std::vector<int32_t>& tokens() const { return history_; }
  // Forgets the sequence (states to zero, pages freed).
  status clear();
  // Prompt cache: the state after the tokens fed so far, and its restoration.
  status save(decoder_state& out) const;
  status load(const decoder_state& in);

  uint64_t kv_bytes() const { return kv_bytes_; }
  uint64_t recurrent_bytes() const { return recurrent_bytes_; }
  uint64_t workspace_bytes() const { return workspace_.bytes(); }
  // Whether one-token steps replay a recorded graph (CUDA), and how many steps did.
  bool graphs_active() const { return graph_.ready(); }
  int64_t graph_replays() const { return graph_replays_; }
  stream_t stream() const { return stream_.get(); }

  // Benchmark hook (--bench): while set, one-token steps run eagerly (no graph) and `mark(c)` is called on
  // the host right after the calls of category c are enqueued on stream(), so timestamps recorded there
  // split a step by call.
  enum class call { batch_upload, embedding, norm, attention, gdn, dense_ffn, moe_ffn, lm_head };
  void set_call_hook(std::function<void(call)> mark) { hook_ = std::move(mark); }

 private:
  status eval_chunk(std::span<const int32_t> tokens, std::vector<float>* host_logits);
  // The batch description of n new tokens at positions n_past_ ... to the device: one copy, two when the
  // sequence gained pages.
  status upload_batch(std::span<const int32_t> tokens);
  // synchronize(stream()), after which no copy from the staging record is pending.
  status sync() const;
  // Every launch of one forward pass over n tokens (rows logits rows): what a graph records.
  status forward(int64_t n, int64_t rows, int64_t max_seq_len);
  status copy_sequence_kv(std::vector<uint8_t>& blob, bool to_host, int64_t n_tokens) const;
  launch::attn_shape attn_shape() const;
  launch::gdn_shape gdn_shape() const;
  launch::ffn_shape ffn_shape() const;

  const device_model* m_ = nullptr;
  decoder_config cfg_;
  int64_t n_past_ = 0;
  std::vector<int32_t> history_;
  int seq_ = -1;                             // the page allocator's sequence
  std::vector<int> attn_index_, gdn_index_;  // per layer: its index among its kind
  kv::kv_pool kv_;
  kv::page_allocator pages_;
  kv::recurrent_state_pool rs_;
  owned_stream stream_;
  launch_graph graph_;
  bool graph_failed_ = false;
  int64_t graph_replays_ = 0;
  uint64_t kv_bytes_ = 0, recurrent_bytes_ = 0;
  int64_t logits_rows_ = 0;  // rows of the last eval in logits_
  device_buffer<uint8_t> workspace_;
  device_buffer<float> h_, a_, logits_;
  device_buffer<uint8_t> a16_;  // a_ quantized by the norm for the GEMV's integer path (steps of <= 8 tokens)
  // The batch description of a step (decoder.cpp, batch_layout), and its pinned staging record of the same
  // layout, from which one contiguous copy uploads a step's header, positions and ids.
  device_buffer<int32_t> batch_;
  pinned_buffer<int32_t> staging_;
  int64_t pages_at_ = 0;                    // offset of the page indices in batch_ (after a full batch's ids)
  int64_t pages_on_device_ = 0;             // page indices batch_ holds; only the ones added later are copied
  mutable bool staging_in_flight_ = false;  // a copy from staging_ may be pending (until the next sync())
  device_buffer<int32_t> recent_;
  device_buffer<int32_t> result_;  // [2]: the sampled id, the kernels' error flag (one download for both)
  pinned_buffer<int32_t> result_host_;
  device_buffer<uint64_t> rng_counter_;
  device_buffer<uint8_t> sample_ws_;
  std::function<void(call)> hook_;
};

}  // namespace q35::gen
