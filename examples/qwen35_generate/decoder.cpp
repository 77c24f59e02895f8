// The decoder's composition: per chunk of input tokens, the batch description goes to the device, then
// embedding -> layers (norm, mixer, norm, FFN) -> final norm -> LM head, all asynchronous.
#include "decoder.hpp"

#include <algorithm>
#include <numeric>

#include "q35/launch/matmul.hpp"
#include "q35/launch/norm.hpp"

namespace q35::gen {

namespace {

status unsupported(const std::string& key, uint64_t value, const std::string& supported) {
  return error(status_code::unsupported, "key '" + key + "' = " + std::to_string(value) +
                                             " is not supported by the compiled kernels (supported: " + supported +
                                             ")");
}

// Byte offset of a slice of `bytes` in a workspace, 256-byte aligned.
size_t align_256(size_t b) { return (b + 255) / 256 * 256; }

}  // namespace

status check_supported(const io::model_hparams& h) {
  const std::string p = h.arch + ".";
  if (h.count(models::layer_type::full_attention) > 0) {
    if (h.head_dim != 128 && h.head_dim != 256) return unsupported(p + "attention.key_length", h.head_dim, "128, 256");
    if (h.value_dim != h.head_dim)
      return unsupported(p + "attention.value_length", h.value_dim,
                         "equal to key_length " + std::to_string(h.head_dim));
    if (h.n_heads % h.n_kv_heads != 0)
      return unsupported(p + "attention.head_count", h.n_heads,
                         "a multiple of head_count_kv = " + std::to_string(h.n_kv_heads));
    if (h.rope_dim % 2 != 0 || h.rope_dim > h.head_dim)
      return unsupported(p + "rope.dimension_count", h.rope_dim, "even, <= key_length");
  }
  if (h.count(models::layer_type::gated_deltanet) > 0) {
    if (h.ssm_k_head_dim != 64 && h.ssm_k_head_dim != 128)
      return unsupported(p + "ssm.state_size", h.ssm_k_head_dim, "64, 128");
    if (h.ssm_v_head_dim() != h.ssm_k_head_dim)
      return unsupported(p + "ssm.inner_size / ssm.time_step_rank", h.ssm_v_head_dim(),
                         "equal to ssm.state_size = " + std::to_string(h.ssm_k_head_dim));
    if (h.ssm_n_v_heads % h.ssm_n_k_heads != 0)
      return unsupported(p + "ssm.time_step_rank", h.ssm_n_v_heads,
                         "a multiple of ssm.group_count = " + std::to_string(h.ssm_n_k_heads));
  }
  if (h.count(models::ffn_type::moe) > 0) {
    if (h.n_experts > 512) return unsupported(p + "expert_count", h.n_experts, "1..512");
    if (h.n_experts_used > 16) return unsupported(p + "expert_used_count", h.n_experts_used, "1..16");
  }
  return status::success();
}

status decoder::init(const device_model& m, const decoder_config& cfg) {
  m_ = &m;
  cfg_ = cfg;
  const io::model_hparams& h = m.hparams();
  Q35_TRY(check_supported(h));
  if (cfg.n_ctx < 1) return error(status_code::invalid_argument, "context size " + std::to_string(cfg.n_ctx) + " < 1");
  if (cfg.n_batch < 1)
    return error(status_code::invalid_argument, "batch size " + std::to_string(cfg.n_batch) + " < 1");
  cfg_.n_batch = std::min(cfg.n_batch, cfg.n_ctx);
  const int64_t nb = cfg_.n_batch;
  Q35_TRY(stream_.create());
  graph_.reset();
  graph_failed_ = false;

  // per-layer index among layers of its kind
  int n_attn = 0, n_gdn = 0;
  attn_index_.clear();
  gdn_index_.clear();
  for (const layer_views& l : m.layers()) {
    const bool attn = l.kind == models::layer_type::full_attention;
    attn_index_.push_back(attn ? n_attn++ : -1);
    gdn_index_.push_back(attn ? -1 : n_gdn++);
  }

  // state: KV pages for the full-attention layers, recurrent slots for the GDN layers
  int64_t max_pages = 1;
  if (n_attn > 0) {
    kv::kv_pool_shape ks;
    ks.n_layers = n_attn;
    ks.n_kv_heads = int(h.n_kv_heads);
    ks.head_dim = int(h.head_dim);
    ks.value_dim = int(h.value_dim);
    ks.page_tokens = kv::default_page_tokens;
    ks.n_pages = (cfg.n_ctx + ks.page_tokens - 1) / ks.page_tokens;
    ks.type = cfg.kv_type;
    Q35_TRY(kv_.allocate(ks));
    pages_.reset(ks.n_pages, ks.page_tokens);
    kv_bytes_ = kv_.bytes();
    max_pages = ks.n_pages;
  }
  if (n_gdn > 0) {
    kv::gdn_state_shape rs{n_gdn,
                           1,
                           int(h.ssm_n_k_heads),
                           int(h.ssm_n_v_heads),
                           int(h.ssm_k_head_dim),
                           int(h.ssm_v_head_dim()),
                           int(h.ssm_conv_kernel)};
    Q35_TRY(rs_.allocate(rs));
    recurrent_bytes_ = rs_.slot_bytes();
  }

  // one workspace for the largest layer call
  size_t ws = launch::matmul_workspace_bytes(h.n_embd, nb);
  if (n_attn) ws = std::max(ws, launch::attn_layer_workspace_bytes(attn_shape(), nb, cfg.n_ctx));
  if (n_gdn) ws = std::max(ws, launch::gdn_layer_workspace_bytes(gdn_shape(), nb));
  if (h.count(models::ffn_type::dense)) ws = std::max(ws, launch::dense_ffn_workspace_bytes(ffn_shape(), nb));
  if (h.count(models::ffn_type::moe)) ws = std::max(ws, launch::moe_workspace_bytes(ffn_shape(), nb));
  Q35_TRY(workspace_.allocate(align_256(ws)));

  // activations and the batch description, allocated once (a recorded graph keeps their addresses)
  const int64_t logit_rows = cfg.keep_all_logits ? nb : 1;
  Q35_TRY(h_.allocate(size_t(nb * h.n_embd)));
  Q35_TRY(a_.allocate(size_t(nb * h.n_embd)));
  if (h.n_embd % quant::act16_group_elems == 0)
    Q35_TRY(a16_.allocate(quant::act16_bytes(h.n_embd, std::min<int64_t>(nb, launch::gemv_max_tokens))));
  Q35_TRY(logits_.allocate(size_t(logit_rows * h.n_vocab)));
  Q35_TRY(ids_.allocate(size_t(nb)));
  Q35_TRY(positions_.allocate(size_t(nb)));
  Q35_TRY(seq_offsets_.allocate(2));
  Q35_TRY(slots_.allocate(1));
  Q35_TRY(page_rows_.allocate(2));
  Q35_TRY(page_indices_.allocate(size_t(max_pages)));
  Q35_TRY(seq_lens_.allocate(1));
  Q35_TRY(error_flag_.allocate(1));
  Q35_TRY(rng_counter_.allocate(1));
  Q35_TRY(fill_bytes(rng_counter_.data(), 0, 8, stream()));
  Q35_TRY(sample_ws_.allocate(align_256(launch::sample_workspace_bytes(1, int(h.n_vocab)))));
  return clear();
}

launch::attn_shape decoder::attn_shape() const {
  const io::model_hparams& h = m_->hparams();
  return {int(h.n_embd),    int(h.n_heads),  int(h.n_kv_heads),   int(h.head_dim),
          int(h.value_dim), int(h.rope_dim), float(h.rope_theta), float(h.rms_eps)};
}
launch::gdn_shape decoder::gdn_shape() const {
  const io::model_hparams& h = m_->hparams();
  return {int(h.n_embd),           int(h.ssm_n_k_heads),   int(h.ssm_n_v_heads), int(h.ssm_k_head_dim),
          int(h.ssm_v_head_dim()), int(h.ssm_conv_kernel), float(h.rms_eps)};
}
launch::ffn_shape decoder::ffn_shape() const {
  const io::model_hparams& h = m_->hparams();
  return {int(h.n_embd),         int(h.ff_dim),        int(h.n_experts),
          int(h.n_experts_used), int(h.expert_ff_dim), int(h.shared_ff_dim)};
}

status decoder::clear() {
  n_past_ = 0;
  history_.clear();
  logits_rows_ = 0;
  if (seq_ >= 0) pages_.free(seq_);
  seq_ = kv_.bytes() > 0 ? pages_.add_sequence() : -1;
  if (recurrent_bytes_ > 0) Q35_TRY(rs_.reset(0, stream()));
  Q35_TRY(fill_bytes(error_flag_.data(), 0, sizeof(int), stream()));
  return synchronize(stream());
}

status decoder::eval(std::span<const int32_t> tokens, std::vector<float>* host_logits) {
  if (!m_) return error(status_code::invalid_argument, "decoder: not initialised");
  if (n_past_ + int64_t(tokens.size()) > cfg_.n_ctx)
    return error(status_code::invalid_argument, "the context is full: " + std::to_string(n_past_) + " + " +
                                                    std::to_string(tokens.size()) + " tokens exceed the context of " +
                                                    std::to_string(cfg_.n_ctx));
  const int32_t n_vocab = int32_t(m_->hparams().n_vocab);
  for (size_t i = 0; i < tokens.size(); ++i)
    if (tokens[i] < 0 || tokens[i] >= n_vocab)
      return error(status_code::invalid_argument, "token id " + std::to_string(tokens[i]) + " at position " +
                                                      std::to_string(n_past_ + int64_t(i)) +
                                                      " is outside the vocabulary of " + std::to_string(n_vocab));
  for (size_t i = 0; i < tokens.size(); i += size_t(cfg_.n_batch))
    Q35_TRY(eval_chunk(tokens.subspan(i, std::min(tokens.size() - i, size_t(cfg_.n_batch))), host_logits));
  return status::success();
}

status decoder::upload_batch(std::span<const int32_t> tokens) {
  const int64_t n = int64_t(tokens.size());
  const int64_t p0 = n_past_;
  stream_t s = stream();
  Q35_TRY(ids_.upload(tokens.data(), size_t(n), s));
  std::vector<int32_t> pos(static_cast<size_t>(n));
  std::iota(pos.begin(), pos.end(), int32_t(p0));
  Q35_TRY(positions_.upload(pos.data(), pos.size(), s));
  const int32_t offsets[2] = {0, int32_t(n)}, slot = 0;
  Q35_TRY(seq_offsets_.upload(offsets, 2, s));
  Q35_TRY(slots_.upload(&slot, 1, s));
  if (seq_ >= 0) {
    Q35_TRY(pages_.reserve(seq_, p0 + n));
    Q35_TRY(table_.build(pages_, std::vector<int>{seq_}));
    Q35_TRY(page_rows_.upload(table_.row_offsets.data(), table_.row_offsets.size(), s));
    Q35_TRY(page_indices_.upload(table_.page_indices.data(), table_.page_indices.size(), s));
    Q35_TRY(seq_lens_.upload(table_.seq_lens.data(), table_.seq_lens.size(), s));
  }
  // (cudaMemcpyAsync from pageable memory returns once the bytes are staged: the vectors may die now)
  return status::success();
}

status decoder::forward(int64_t n, int64_t rows, int64_t max_seq_len) {
  const io::model_hparams& h = m_->hparams();
  const int64_t e = h.n_embd;
  stream_t s = stream();
  auto mark = [&](call c) {
    if (hook_) hook_(c);
  };
  launch::attn_batch ab{};
  ab.seq_offsets = seq_offsets_.data();
  ab.positions = positions_.data();
  ab.page_row_offsets = page_rows_.data();
  ab.page_indices = page_indices_.data();
  ab.seq_lens = seq_lens_.data();
  ab.n_seqs = 1;
  ab.n_tokens = n;
  ab.max_seq_tokens = int(n);
  ab.max_seq_len = max_seq_len;
  const launch::gdn_batch gb{seq_offsets_.data(), slots_.data(), 1, n, int(n)};

  launch::embedding_args em;
  em.table = m_->token_embd(), em.ids = ids_.data(), em.out = h_.data(), em.n_tokens = n;
  em.maybe_error_flag = error_flag_.data();
  Q35_TRY(launch::embedding(em, s));
  mark(call::embedding);

  // The norm also writes its output quantized for the projections that read it (a step of <= 8
  // tokens, the GEMV's integer path), so they launch no quantization of their own; a16 is its view.
  quant::act16_view a16;
  auto norm = [&](const float* w, const float* x, float* y, int64_t r) {
    launch::rmsnorm_args a;
    a.x = x, a.maybe_w = w, a.y = y, a.rows = r, a.n = int(e), a.eps = float(h.rms_eps);
    if (a16_.data() && r <= launch::gemv_max_tokens) a.maybe_act16 = a16_.data(), a.act16_bytes = a16_.bytes();
    a16 = launch::act16_view_of(a);
    return launch::rmsnorm(a, s);
  };
  const auto& layers = m_->layers();
  for (size_t il = 0; il < layers.size(); ++il) {
    const layer_views& l = layers[il];
    // a = rms(h) * attn_norm;  h += mixer(a)
    Q35_TRY(norm(l.attn_norm, h_.data(), a_.data(), n));
    mark(call::norm);
    if (l.kind == models::layer_type::full_attention) {
      launch::attn_layer_args a;
      a.shape = attn_shape();
      a.w = l.attn;
      a.batch = ab;
      a.kv = kv_.layer(attn_index_[il]);
      a.x = a_.data(), a.h = h_.data(), a.maybe_x16 = a16;
      a.workspace = workspace_.data(), a.workspace_bytes = workspace_.bytes();
      Q35_TRY(launch::attention_layer(a, s));
      mark(call::attention);
    } else {
      launch::gdn_layer_args g;
      g.shape = gdn_shape();
      g.w = l.gdn;
      g.batch = gb;
      g.state = rs_.layer(gdn_index_[il]);
      g.x = a_.data(), g.h = h_.data(), g.maybe_x16 = a16;
      g.workspace = workspace_.data(), g.workspace_bytes = workspace_.bytes();
      Q35_TRY(launch::gdn_layer(g, s));
      mark(call::gdn);
    }
    // f = rms(h) * post_attention_norm;  h += FFN(f)
    Q35_TRY(norm(l.post_attention_norm, h_.data(), a_.data(), n));
    mark(call::norm);
    launch::ffn_layer_args f;
    f.shape = ffn_shape();
    f.x = a_.data(), f.h = h_.data(), f.n_tokens = n, f.maybe_x16 = a16;
    f.workspace = workspace_.data(), f.workspace_bytes = workspace_.bytes();
    f.error_flag = error_flag_.data();
    if (l.ffn_kind == models::ffn_type::dense) {
      Q35_TRY(launch::dense_ffn(f, l.ffn, s));
      mark(call::dense_ffn);
    } else {
      Q35_TRY(launch::moe_ffn(f, l.moe, s));
      mark(call::moe_ffn);
    }
  }

  // y = rms(h) * output_norm on the last `rows` rows; logits = output . y
  Q35_TRY(norm(m_->output_norm(), h_.data() + (n - rows) * e, a_.data(), rows));
  mark(call::norm);
  launch::matmul_args lm;
  lm.w = m_->output(), lm.x = a_.data(), lm.y = logits_.data(), lm.n_tokens = rows, lm.maybe_x16 = a16;
  lm.maybe_workspace = workspace_.data(), lm.workspace_bytes = workspace_.bytes();
  Q35_TRY(launch::matmul(lm, s));
  mark(call::lm_head);
  return status::success();
}

status decoder::eval_chunk(std::span<const int32_t> tokens, std::vector<float>* host_logits) {
  const int64_t n = int64_t(tokens.size());
  const int64_t rows = cfg_.keep_all_logits ? n : 1;
  Q35_TRY(upload_batch(tokens));
  if (hook_) hook_(call::batch_upload);
  if (n == 1 && cfg_.use_graphs && !graph_failed_ && !hook_) {
    // One-token step: every launch depends only on device data and on bounds that do not change from step
    // to step (the attention split is sized for the whole context), so it is recorded once and replayed.
    if (!graph_.ready()) {
      const status c = graph_.capture(stream(), [&] { return forward(1, 1, cfg_.n_ctx); });
      if (!c.ok()) graph_failed_ = true;  // the sim has no graphs; on CUDA a failed capture runs eagerly
    }
    if (graph_.ready()) {
      Q35_TRY(graph_.replay(stream()));
      ++graph_replays_;
    } else {
      Q35_TRY(forward(1, 1, cfg_.n_ctx));
    }
  } else {
    Q35_TRY(forward(n, rows, n_past_ + n));
  }
  logits_rows_ = rows;
  n_past_ += n;
  history_.insert(history_.end(), tokens.begin(), tokens.end());
  if (host_logits) {
    const int64_t nv = m_->hparams().n_vocab;
    const size_t off = host_logits->size();
    host_logits->resize(off + size_t(rows * nv));
    Q35_TRY(
        copy(host_logits->data() + off, logits_.data(), size_t(rows * nv) * 4, copy_kind::device_to_host, stream()));
    Q35_TRY(synchronize(stream()));
  }
  return status::success();
}

status decoder::last_logits(std::vector<float>& out) const {
  if (logits_rows_ == 0) return error(status_code::invalid_argument, "decoder: no logits yet");
  const int64_t nv = m_->hparams().n_vocab;
  out.resize(size_t(nv));
  Q35_TRY(
      copy(out.data(), logits_.data() + (logits_rows_ - 1) * nv, size_t(nv) * 4, copy_kind::device_to_host, stream()));
  return synchronize(stream());
}

status decoder::sample(const launch::sampling_params& p, std::span<const int32_t> recent, int32_t& id) {
  if (logits_rows_ == 0) return error(status_code::invalid_argument, "decoder: sample() before any eval()");
  const int32_t nv = int32_t(m_->hparams().n_vocab);
  const int window = std::max(p.repeat_last_n, 0);
  stream_t s = stream();
  if (window > 0 && p.repeat_penalty != 1.0f) {
    // the last `window` ids, newest first; -1 where the history is shorter
    std::vector<int32_t> ring(size_t(window), -1);
    for (int i = 0; i < window && i < int(recent.size()); ++i) ring[size_t(i)] = recent[recent.size() - 1 - size_t(i)];
    if (recent_.size() < ring.size()) Q35_TRY(recent_.allocate(ring.size()));
    Q35_TRY(recent_.upload(ring.data(), ring.size(), s));
  }
  launch::sample_args a;
  a.logits = logits_.data() + (logits_rows_ - 1) * int64_t(nv);
  a.n_rows = 1, a.n_vocab = nv, a.params = p;
  a.maybe_recent = window > 0 && p.repeat_penalty != 1.0f ? recent_.data() : nullptr;
  if (!a.maybe_recent) a.params.repeat_last_n = 0;
  a.rng_counter = rng_counter_.data();
  a.out_ids = ids_.data();
  a.workspace = sample_ws_.data(), a.workspace_bytes = sample_ws_.bytes();
  Q35_TRY(launch::sample(a, s));
  // the one host synchronization of a decode step: the id (and the kernels' error flag) come back
  int flag = 0;
  Q35_TRY(ids_.download(&id, 1, s));
  Q35_TRY(error_flag_.download(&flag, 1, s));
  Q35_TRY(synchronize(s));
  if (flag) return error(status_code::kernel_fault, "a kernel reported an out-of-range token or expert id");
  return status::success();
}

// K and V of the sequence's first n_tokens tokens, page by page for every layer, to or from `blob`.
status decoder::copy_sequence_kv(std::vector<uint8_t>& blob, bool to_host, int64_t n_tokens) const {
  if (seq_ < 0) return status::success();
  const std::vector<int32_t>& pages = pages_.pages(seq_);
  const int64_t n_pages = (n_tokens + kv::default_page_tokens - 1) / kv::default_page_tokens;
  size_t off = 0;
  std::vector<uint8_t> sized;
  for (int pass = 0; pass < 2; ++pass) {  // pass 0 sizes the blob, pass 1 copies
    off = 0;
    for (int il = 0; il < int(attn_index_.size()); ++il) {
      if (attn_index_[size_t(il)] < 0) continue;
      const kv::kv_layer_view v = const_cast<kv::kv_pool&>(kv_).layer(attn_index_[size_t(il)]);
      const size_t eb = kv::kv_type_bytes(v.type);
      const size_t kp = size_t(v.n_kv_heads) * size_t(v.page_tokens) * size_t(v.head_dim) * eb;
      const size_t vp = size_t(v.n_kv_heads) * size_t(v.page_tokens) * size_t(v.value_dim) * eb;
      for (int64_t i = 0; i < n_pages; ++i) {
        const size_t p = size_t(pages[size_t(i)]);
        uint8_t* k = static_cast<uint8_t*>(v.k) + p * kp;
        uint8_t* vv = static_cast<uint8_t*>(v.v) + p * vp;
        if (pass == 1) {
          if (to_host) {
            Q35_TRY(copy(blob.data() + off, k, kp, copy_kind::device_to_host, stream()));
            Q35_TRY(copy(blob.data() + off + kp, vv, vp, copy_kind::device_to_host, stream()));
          } else {
            Q35_TRY(copy(k, blob.data() + off, kp, copy_kind::host_to_device, stream()));
            Q35_TRY(copy(vv, blob.data() + off + kp, vp, copy_kind::host_to_device, stream()));
          }
        }
        off += kp + vp;
      }
    }
    if (pass == 0) {
      if (to_host) {
        blob.assign(off, 0);
      } else if (blob.size() != off) {
        return error(status_code::invalid_argument, "the saved KV holds " + std::to_string(blob.size()) +
                                                        " bytes, this decoder needs " + std::to_string(off));
      }
    }
  }
  return synchronize(stream());
}

status decoder::save(decoder_state& out) const {
  out.tokens = history_;
  out.last_logits.clear();
  if (logits_rows_ > 0) Q35_TRY(last_logits(out.last_logits));
  out.recurrent.clear();
  if (recurrent_bytes_ > 0) Q35_TRY(rs_.snapshot(0, out.recurrent, stream()));
  return copy_sequence_kv(out.kv, true, n_past_);
}

status decoder::load(const decoder_state& in) {
  Q35_TRY(clear());
  const int64_t n = int64_t(in.tokens.size());
  if (n > cfg_.n_ctx)
    return error(status_code::invalid_argument, "the saved state holds " + std::to_string(n) +
                                                    " tokens, more than the context of " + std::to_string(cfg_.n_ctx));
  if (recurrent_bytes_ > 0) Q35_TRY(rs_.restore(0, in.recurrent, stream()));
  if (seq_ >= 0) {
    Q35_TRY(pages_.reserve(seq_, n));
    Q35_TRY(copy_sequence_kv(const_cast<std::vector<uint8_t>&>(in.kv), false, n));
  }
  if (!in.last_logits.empty()) {
    if (int64_t(in.last_logits.size()) != int64_t(m_->hparams().n_vocab))
      return error(status_code::invalid_argument, "the saved logits have " + std::to_string(in.last_logits.size()) +
                                                      " entries, the model's vocabulary " +
                                                      std::to_string(m_->hparams().n_vocab));
    Q35_TRY(logits_.upload(in.last_logits.data(), in.last_logits.size(), stream()));
    logits_rows_ = 1;
  }
  history_ = in.tokens;
  n_past_ = n;
  return synchronize(stream());
}

}  // namespace q35::gen
