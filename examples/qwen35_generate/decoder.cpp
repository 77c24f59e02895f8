// The decoder's composition: per chunk of input tokens, the batch description goes to the device, then
// embedding -> layers (norm, mixer, norm, FFN) -> final norm -> LM head, all asynchronous.
#include "decoder.hpp"

#include <algorithm>

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

// The layout of decoder::batch_ (int32 entries) for a step of n tokens:
//   [0, 8)                 header: seq_offsets {0, n}, slot 0, page_row_offsets {0, n_pages}, seq_len, 2 pad
//   [8, 8 + n)             positions
//   [8 + n, 8 + 2n)        ids
//   [pages_at_, + n_pages) the sequence's page indices (pages_at_ = 8 + 2 n_batch, fixed)
// The one-token graph always has n = 1, so the addresses it records do not change.
namespace batch_layout {
constexpr int64_t seq_offsets = 0, slot = 2, page_rows = 3, seq_len = 5, header = 8, positions = header;
constexpr int64_t ids(int64_t n) { return positions + n; }
}  // namespace batch_layout

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
  if (staging_in_flight_) Q35_TRY(sync());  // a re-init frees the staging record
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
  pages_at_ = batch_layout::ids(nb) + nb;
  Q35_TRY(batch_.allocate(size_t(pages_at_ + max_pages)));
  Q35_TRY(staging_.allocate(batch_.size()));
  Q35_TRY(result_.allocate(2));
  Q35_TRY(result_host_.allocate(2));
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
  pages_on_device_ = 0;  // the new sequence's pages are assigned afresh
  if (recurrent_bytes_ > 0) Q35_TRY(rs_.reset(0, stream()));
  Q35_TRY(fill_bytes(result_.data() + 1, 0, sizeof(int32_t), stream()));  // the error flag
  return sync();
}

status decoder::sync() const {
  Q35_TRY(synchronize(stream()));
  staging_in_flight_ = false;
  return status::success();
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
  // A copy from pinned memory reads the record when the stream reaches it, not when it is issued (a
  // pageable one was staged by the runtime at the call): the record is rewritten only after a sync().
  // Decode steps find it free (sample() synchronizes); only consecutive prefill chunks, or one-token
  // evals without a sample() in between, wait here for the previous chunk. (Two records alternating
  // behind events would let chunk k+1 be enqueued while chunk k runs; a prefill chunk's launches are
  // cheap next to its kernels, so one record it is.)
  if (staging_in_flight_) Q35_TRY(sync());
  int64_t n_pages = 0;
  if (seq_ >= 0) {
    Q35_TRY(pages_.reserve(seq_, p0 + n));
    n_pages = int64_t(pages_.pages(seq_).size());
  }
  int32_t* r = staging_.data();
  r[batch_layout::seq_offsets] = 0, r[batch_layout::seq_offsets + 1] = int32_t(n);
  r[batch_layout::slot] = 0;
  r[batch_layout::page_rows] = 0, r[batch_layout::page_rows + 1] = int32_t(n_pages);
  r[batch_layout::seq_len] = int32_t(p0 + n);
  r[batch_layout::seq_len + 1] = r[batch_layout::seq_len + 2] = 0;
  int32_t* pos = r + batch_layout::positions;
  int32_t* ids = r + batch_layout::ids(n);
  for (int64_t i = 0; i < n; ++i) pos[i] = int32_t(p0 + i), ids[i] = tokens[size_t(i)];
  stream_t s = stream();
  staging_in_flight_ = true;
  Q35_TRY(copy(batch_.data(), r, size_t(batch_layout::ids(n) + n) * sizeof(int32_t), copy_kind::host_to_device, s));
  // page indices only change by appending (clear() and load() start over): copy the ones added
  if (n_pages > pages_on_device_) {
    const std::vector<int32_t>& pages = pages_.pages(seq_);
    const int64_t first = pages_at_ + pages_on_device_;
    std::copy(pages.begin() + pages_on_device_, pages.end(), r + first);
    Q35_TRY(copy(batch_.data() + first, r + first, size_t(n_pages - pages_on_device_) * sizeof(int32_t),
                 copy_kind::host_to_device, s));
    pages_on_device_ = n_pages;
  }
  return status::success();
}

status decoder::forward(int64_t n, int64_t rows, int64_t max_seq_len) {
  const io::model_hparams& h = m_->hparams();
  const int64_t e = h.n_embd;
  stream_t s = stream();
  auto mark = [&](call c) {
    if (hook_) hook_(c);
  };
  const int32_t* b = batch_.data();
  int32_t* error_flag = result_.data() + 1;
  launch::attn_batch ab{};
  ab.seq_offsets = b + batch_layout::seq_offsets;
  ab.positions = b + batch_layout::positions;
  ab.page_row_offsets = b + batch_layout::page_rows;
  ab.page_indices = b + pages_at_;
  ab.seq_lens = b + batch_layout::seq_len;
  ab.n_seqs = 1;
  ab.n_tokens = n;
  ab.max_seq_tokens = int(n);
  ab.max_seq_len = max_seq_len;
  const launch::gdn_batch gb{b + batch_layout::seq_offsets, b + batch_layout::slot, 1, n, int(n)};

  launch::embedding_args em;
  em.table = m_->token_embd(), em.ids = b + batch_layout::ids(n), em.out = h_.data(), em.n_tokens = n;
  em.maybe_error_flag = error_flag;
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
    f.error_flag = error_flag;
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
    Q35_TRY(sync());
  }
  return status::success();
}

status decoder::last_logits(std::vector<float>& out) const {
  if (logits_rows_ == 0) return error(status_code::invalid_argument, "decoder: no logits yet");
  const int64_t nv = m_->hparams().n_vocab;
  out.resize(size_t(nv));
  Q35_TRY(
      copy(out.data(), logits_.data() + (logits_rows_ - 1) * nv, size_t(nv) * 4, copy_kind::device_to_host, stream()));
  return sync();
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
  a.out_ids = result_.data();
  a.workspace = sample_ws_.data(), a.workspace_bytes = sample_ws_.bytes();
  Q35_TRY(launch::sample(a, s));
  // the one host synchronization of a decode step: the id and the kernels' error flag come back in one copy
  Q35_TRY(result_.download(result_host_.data(), 2, s));
  Q35_TRY(sync());
  id = result_host_[0];
  if (result_host_[1]) return error(status_code::kernel_fault, "a kernel reported an out-of-range token or expert id");
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
  return sync();
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
  return sync();
}

}  // namespace q35::gen
