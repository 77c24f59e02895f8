// The decoder's composition: per chunk of input tokens, the batch description goes to the device, then
// embedding -> layers (norm, mixer, norm, FFN) -> final norm -> LM head, all asynchronous.
#include "decoder.hpp"

#include <algorithm>

#include "decoder_record.hpp"
#include "q35/launch/matmul.hpp"
#include "q35/launch/norm.hpp"

namespace q35::gen {

using detail::record_layout;

status decoder::check_seq(int seq, const char* what) const {
  if (!m_) return error(status_code::invalid_argument, std::string("decoder::") + what + ": not initialised");
  if (seq < 0 || seq >= cfg_.n_seq_max)
    return error(status_code::invalid_argument, std::string("decoder::") + what + ": sequence " + std::to_string(seq) +
                                                    " is outside 0.." + std::to_string(cfg_.n_seq_max - 1));
  return status::success();
}

int64_t decoder::n_past(int seq) const {
  return seq >= 0 && size_t(seq) < seqs_.size() ? seqs_[size_t(seq)].n_past : 0;
}

const std::vector<int32_t>& decoder::tokens(int seq) const {
  static const std::vector<int32_t> none;
  return seq >= 0 && size_t(seq) < seqs_.size() ? seqs_[size_t(seq)].history : none;
}

bool decoder::graphs_active() const {
  for (const auto& g : graphs_)
    if (g && g->ready()) return true;
  return false;
}

status decoder::sync() const {
  Q35_TRY(synchronize(stream()));
  staging_in_flight_ = false;
  return status::success();
}

status decoder::plan_step(std::span<const seq_input> inputs) {
  const int32_t n_vocab = int32_t(m_->hparams().n_vocab);
  const int64_t S = cfg_.n_seq_max;
  if (inputs.empty()) return error(status_code::invalid_argument, "decoder::step: no inputs");
  if (int64_t(inputs.size()) > S)
    return error(status_code::invalid_argument, "decoder::step: " + std::to_string(inputs.size()) +
                                                    " inputs, more than the " + std::to_string(S) + " sequences");
  // every check before any state changes, so that a refused step leaves the decoder as it was
  std::vector<char> seen(size_t(S), 0);
  int64_t rows = 0, new_pages = 0;
  for (const seq_input& in : inputs) {
    Q35_TRY(check_seq(in.seq, "step"));
    if (seen[size_t(in.seq)]++)
      return error(status_code::invalid_argument,
                   "decoder::step: sequence " + std::to_string(in.seq) + " appears twice");
    const sequence& q = seqs_[size_t(in.seq)];
    const int64_t n = int64_t(in.tokens.size());
    if (n < 1 || n > cfg_.n_batch)
      return error(status_code::invalid_argument, "decoder::step: sequence " + std::to_string(in.seq) + " has " +
                                                      std::to_string(n) + " new tokens (1.." +
                                                      std::to_string(cfg_.n_batch) + " per step)");
    if (q.n_past + n > cfg_.n_ctx)
      return error(status_code::invalid_argument, "the context is full: " + std::to_string(q.n_past) + " + " +
                                                      std::to_string(n) + " tokens exceed the context of " +
                                                      std::to_string(cfg_.n_ctx));
    for (int64_t i = 0; i < n; ++i)
      if (in.tokens[size_t(i)] < 0 || in.tokens[size_t(i)] >= n_vocab)
        return error(status_code::invalid_argument, "token id " + std::to_string(in.tokens[size_t(i)]) +
                                                        " at position " + std::to_string(q.n_past + i) +
                                                        " is outside the vocabulary of " + std::to_string(n_vocab));
    if (in.score < -1 || in.score > launch::logprobs_max_top)
      return error(status_code::invalid_argument, "decoder::step: sequence " + std::to_string(in.seq) +
                                                      ": score = " + std::to_string(in.score) + " is outside -1.." +
                                                      std::to_string(launch::logprobs_max_top));
    if (in.score >= 0 && cfg_.score_rows < 1)
      return error(status_code::invalid_argument,
                   "decoder::step: sequence " + std::to_string(in.seq) +
                       " asks for scores, but scoring is off (decoder_config::score_rows = 0)");
    if (in.next < -1 || in.next >= n_vocab)
      return error(status_code::invalid_argument, "token id " + std::to_string(in.next) + " after position " +
                                                      std::to_string(q.n_past + n - 1) +
                                                      " is outside the vocabulary of " + std::to_string(n_vocab));
    rows += n;
    if (q.pages >= 0) {
      const int64_t pt = pages_.page_tokens();
      new_pages += (q.n_past + n + pt - 1) / pt - int64_t(pages_.pages(q.pages).size());
    }
  }
  if (rows > max_rows_)
    return error(status_code::invalid_argument, "decoder::step: " + std::to_string(rows) +
                                                    " tokens, more than a step holds (" + std::to_string(max_rows_) +
                                                    " = batch size + sequences)");
  if (new_pages > pages_free())
    return error(status_code::out_of_memory, "kv pool: out of pages: the step needs " + std::to_string(new_pages) +
                                                 " more, " + std::to_string(pages_free()) + " free");

  // A copy from pinned memory reads the record when the stream reaches it, not when it is issued: the
  // record is rewritten only after a sync(). Decode steps find it free (sample() synchronizes); only
  // consecutive prefill steps wait here for the previous one.
  if (staging_in_flight_) Q35_TRY(sync());

  // groups: the one-token inputs in the order given (split into groups of decode_group_rows()), then
  // each longer input alone
  // (a scored input, whatever its length, runs alone as a prompt chunk does)
  const auto decode_row = [](const seq_input& in) { return in.tokens.size() == 1 && in.score < 0; };
  std::vector<const seq_input*> order;
  for (const seq_input& in : inputs)
    if (decode_row(in)) order.push_back(&in);
  const int64_t n_decode = int64_t(order.size());
  for (const seq_input& in : inputs)
    if (!decode_row(in)) order.push_back(&in);
  const bool graph_step = n_decode == int64_t(inputs.size()) && cfg_.use_graphs && !hook_;
  const int64_t decode_cap = decode_group_rows();
  const record_layout rl{max_rows_, page_entries_, S};
  int32_t* r = staging_.data();
  groups_.clear();
  int64_t row = 0, page = 0, logit_row = 0;
  score_total_ = 0;
  for (size_t i = 0; i < order.size();) {
    group g;
    g.decode = i < size_t(n_decode);
    const size_t end = g.decode ? std::min(size_t(n_decode), i + size_t(decode_cap)) : i + 1;
    g.row0 = row;
    g.header = rl.header(int64_t(groups_.size()));
    r[rl.seq_offsets(g.header)] = 0;
    r[rl.page_rows(g.header)] = int32_t(page);
    for (size_t j = i; j < end; ++j) {
      const seq_input& in = *order[j];
      sequence& q = seqs_[size_t(in.seq)];
      const int64_t n = int64_t(in.tokens.size());
      if (q.pages >= 0) Q35_TRY(pages_.reserve(q.pages, q.n_past + n));  // cannot fail: counted above
      const std::vector<int32_t>& pg = pages_.pages(q.pages);            // none without attention layers
      std::copy(pg.begin(), pg.end(), r + rl.pages() + page);
      page += int64_t(pg.size());
      const int64_t k = int64_t(j - i);
      for (int64_t t = 0; t < n; ++t) {
        r[rl.positions() + row + t] = int32_t(q.n_past + t);
        r[rl.ids() + row + t] = in.tokens[size_t(t)];
      }
      row += n;
      g.n += n;
      r[rl.seq_offsets(g.header) + k + 1] = int32_t(g.n);
      r[rl.slots(g.header) + k] = in.seq;
      r[rl.page_rows(g.header) + k + 1] = int32_t(page);
      r[rl.seq_lens(g.header) + k] = int32_t(q.n_past + n);
      g.max_seq_tokens = std::max(g.max_seq_tokens, int(n));
      g.max_seq_len = std::max(g.max_seq_len, q.n_past + n);
      // its last logits row
      q.logits_row = logit_row + (cfg_.keep_all_logits ? g.n - 1 : k);
    }
    g.n_seqs = int(end - i);
    if (g.decode && graph_step) g.max_seq_len = cfg_.n_ctx;  // a graph serves every length
    g.first_logit_token = cfg_.keep_all_logits || g.decode ? 0 : g.n - 1;
    g.logit_row0 = logit_row;
    g.logit_rows = g.n - g.first_logit_token;
    logit_row += g.logit_rows;
    if (const seq_input& in = *order[i]; in.score >= 0) {  // a scored input: row t reports the token after it
      g.score = in.score;
      g.score_rows = g.n - (in.next < 0 ? 1 : 0);
      g.score_out0 = score_total_;
      for (int64_t t = 0; t < g.n; ++t)
        score_ids_host_[size_t(score_total_ + t)] = t + 1 < g.n ? in.tokens[size_t(t + 1)] : in.next;
      score_total_ += g.n;
    }
    groups_.push_back(g);
    i = end;
  }
  for (sequence& q : seqs_)
    if (!seen[size_t(&q - seqs_.data())]) q.logits_row = -1;  // rows of this step overwrite the old ones
  staging_in_flight_ = true;
  if (score_total_ > 0)
    Q35_TRY(copy(score_ids_.data(), score_ids_host_.data(), size_t(score_total_) * sizeof(int32_t),
                 copy_kind::host_to_device, stream()));
  return copy(batch_.data(), r, size_t(rl.pages() + page) * sizeof(int32_t), copy_kind::host_to_device, stream());
}

status decoder::forward(int64_t n_rows) {
  const io::model_hparams& h = m_->hparams();
  const int64_t e = h.n_embd;
  const int64_t S = cfg_.n_seq_max;
  const record_layout rl{max_rows_, page_entries_, S};
  stream_t s = stream();
  auto mark = [&](call c) {
    if (hook_) hook_(c);
  };
  const int32_t* b = batch_.data();
  int32_t* error_flag = result_.data() + S;

  launch::embedding_args em;
  em.table = m_->token_embd(), em.ids = b + rl.ids(), em.out = h_.data(), em.n_tokens = n_rows;
  em.maybe_error_flag = error_flag;
  Q35_TRY(launch::embedding(em, s));
  mark(call::embedding);

  // The norm also writes its output quantized for the projections that read it (a group of <= 8
  // rows, the GEMV's integer path), so they launch no quantization of their own; a16 is its view.
  quant::act16_view a16;
  auto norm = [&](const float* w, const float* x, float* y, int64_t r) {
    launch::rmsnorm_args a;
    a.x = x, a.maybe_w = w, a.y = y, a.rows = r, a.n = int(e), a.eps = float(h.rms_eps);
    if (a16_.data() && r <= launch::gemv_max_tokens) a.maybe_act16 = a16_.data(), a.act16_bytes = a16_.bytes();
    a16 = launch::act16_view_of(a);
    return launch::rmsnorm(a, s);
  };
  const bool gemm_every_count = cfg_.batch_invariant && cfg_.batch_invariant_gemm;
  const auto& layers = m_->layers();
  for (size_t il = 0; il < layers.size(); ++il) {
    const layer_views& l = layers[il];
    // Every group alone through the layer: a row's result depends only on its group (see decoder.hpp).
    for (const group& g : groups_) {
      const int64_t n = g.n;
      float* hg = h_.data() + g.row0 * e;
      float* ag = a_.data() + g.row0 * e;
      // a = rms(h) * attn_norm;  h += mixer(a)
      Q35_TRY(norm(l.attn_norm, hg, ag, n));
      mark(call::norm);
      if (l.kind == models::layer_type::full_attention) {
        launch::attn_layer_args a;
        a.shape = attn_shape();
        a.w = l.attn;
        a.batch.seq_offsets = b + rl.seq_offsets(g.header);
        a.batch.positions = b + rl.positions() + g.row0;
        a.batch.page_row_offsets = b + rl.page_rows(g.header);
        a.batch.page_indices = b + rl.pages();
        a.batch.seq_lens = b + rl.seq_lens(g.header);
        a.batch.n_seqs = g.n_seqs;
        a.batch.n_tokens = n;
        a.batch.max_seq_tokens = g.max_seq_tokens;
        a.batch.max_seq_len = g.max_seq_len;
        if (g.decode) a.batch.seq_splits = decode_splits(n);
        a.batch.split_rows = int(attn_split_rows());
        a.kv = kv_.layer(attn_index_[il]);
        a.x = ag, a.h = hg, a.maybe_x16 = a16, a.row_invariant = cfg_.batch_invariant;
        a.gemm_every_count = gemm_every_count;
        a.workspace = workspace_.data(), a.workspace_bytes = workspace_.bytes();
        Q35_TRY(launch::attention_layer(a, s));
        mark(call::attention);
      } else {
        launch::gdn_layer_args a;
        a.shape = gdn_shape();
        a.w = l.gdn;
        a.batch = {b + rl.seq_offsets(g.header), b + rl.slots(g.header), g.n_seqs, n, g.max_seq_tokens};
        a.state = rs_.layer(gdn_index_[il]);
        a.x = ag, a.h = hg, a.maybe_x16 = a16, a.row_invariant = cfg_.batch_invariant;
        a.gemm_every_count = gemm_every_count;
        a.workspace = workspace_.data(), a.workspace_bytes = workspace_.bytes();
        Q35_TRY(launch::gdn_layer(a, s));
        mark(call::gdn);
      }
      // f = rms(h) * post_attention_norm;  h += FFN(f)
      Q35_TRY(norm(l.post_attention_norm, hg, ag, n));
      mark(call::norm);
      launch::ffn_layer_args f;
      f.shape = ffn_shape();
      f.x = ag, f.h = hg, f.n_tokens = n, f.maybe_x16 = a16, f.row_invariant = cfg_.batch_invariant;
      f.workspace = workspace_.data(), f.workspace_bytes = workspace_.bytes();
      f.error_flag = error_flag;
      if (expert_load_ && moe_index_[il] >= 0) f.maybe_expert_counts = expert_load_->counts(moe_index_[il]);
      if (cfg_.moe_adaptive_k) f.route.adaptive = true, f.route.adaptive_k = *cfg_.moe_adaptive_k;
      // MoE: a decode group in one call of the decode kernels up to 64 rows (see decoder.hpp)
      f.gemm_every_count = l.ffn_kind == models::ffn_type::dense ? gemm_every_count : moe_every_count(g);
      if (l.ffn_kind == models::ffn_type::dense) {
        Q35_TRY(launch::dense_ffn(f, l.ffn, s));
        mark(call::dense_ffn);
      } else if (const expert_store::layer* el = experts_ ? experts_->find(int(il)) : nullptr; el && moe_grouped(g)) {
        // the grouped path reads packed experts: the ones the call selects, copied into the staging area
        launch::moe_weights w = l.moe;
        w.maybe_index.maybe_staging = expert_staging_.data(), w.maybe_index.staging_bytes = expert_staging_.bytes();
        Q35_TRY(launch::moe_ffn(f, w, s));
        mark(call::moe_ffn);
      } else {
        Q35_TRY(launch::moe_ffn(f, l.moe, s));  // host-resident experts: through the store's index
        mark(call::moe_ffn);
      }
    }
  }

  Q35_TRY(score_groups());  // (before the logits rows below: both use a_)
  // per group: y = rms(h) * output_norm on its logits rows; logits = output . y
  for (const group& g : groups_) {
    Q35_TRY(norm(m_->output_norm(), h_.data() + (g.row0 + g.first_logit_token) * e, a_.data(), g.logit_rows));
    mark(call::norm);
    launch::matmul_args lm;
    lm.w = m_->output(), lm.x = a_.data(), lm.y = logits_.data() + g.logit_row0 * h.n_vocab;
    lm.n_tokens = g.logit_rows, lm.maybe_x16 = a16, lm.row_invariant = cfg_.batch_invariant;
    lm.gemm_every_count = gemm_every_count;
    lm.maybe_workspace = workspace_.data(), lm.workspace_bytes = workspace_.bytes();
    Q35_TRY(launch::matmul(lm, s));
    mark(call::lm_head);
  }
  return status::success();
}

int decoder::decode_splits(int64_t n) const {
  const int64_t rows = cfg_.batch_invariant ? decode_group_rows() : std::max<int64_t>(n, 1);
  // no more than a full context can use (splits hold >= attn_min_split_keys keys): the same splits, fewer
  // blocks that would exit at once
  const int64_t usable = (cfg_.n_ctx + launch::attn_min_split_keys - 1) / launch::attn_min_split_keys;
  return int(std::clamp<int64_t>(std::min(attn_split_rows() / rows, usable), 1, launch::attn_max_splits));
}

status decoder::step(std::span<const seq_input> inputs, std::vector<float>* host_logits,
                     std::vector<launch::token_logprobs>* scores) {
  if (!m_) return error(status_code::invalid_argument, "decoder: not initialised");
  for (const seq_input& in : inputs)
    if (in.score >= 0 && !scores)  // before any state changes
      return error(status_code::invalid_argument,
                   "decoder::step: sequence " + std::to_string(in.seq) + " asks for scores without an output for them");
  Q35_TRY(plan_step(inputs));
  const bool stages = experts_ && step_stages();
  if (stages) Q35_TRY(settle_experts(false, false));  // what came before was decode-path selections
  Q35_TRY(land_promotions());
  if (hook_) hook_(call::batch_upload);
  int64_t rows = 0;
  for (const group& g : groups_) rows += g.n;
  const int64_t k = int64_t(inputs.size());
  if (rows == k && score_total_ == 0 && cfg_.use_graphs && !graph_failed_ && !hook_) {
    // Decode-only step of k sequences: every launch depends only on device data and on bounds that do not
    // change from step to step (attention cuts each sequence's keys by its length on the device, in a
    // fixed number of splits), so it is recorded once per k and replayed.
    launch_graph* gr = graphs_[size_t(k)].get();
    if (!gr) {
      graphs_[size_t(k)] = std::make_unique<launch_graph>();
      gr = graphs_[size_t(k)].get();
      const status c = gr->capture(stream(), [&] { return forward(rows); });
      if (!c.ok()) {  // a failed capture (e.g. a call that invalidates it) runs eagerly, and says why
        graph_failed_ = true;
        graph_failure_ = "capturing the decode step of " + std::to_string(k) + " sequence(s): " + c.to_string();
      }
    }
    if (gr->ready()) {
      Q35_TRY(gr->replay(stream()));
      ++graph_replays_;
    } else {
      Q35_TRY(forward(rows));
    }
  } else {
    Q35_TRY(forward(rows));
  }
  for (const seq_input& in : inputs) {
    sequence& q = seqs_[size_t(in.seq)];
    q.n_past += int64_t(in.tokens.size());
    q.history.insert(q.history.end(), in.tokens.begin(), in.tokens.end());
  }
  if (experts_) {
    const bool rebalance = cfg_.expert_rebalance_steps > 0 && ++steps_since_rebalance_ >= cfg_.expert_rebalance_steps;
    if (rebalance) steps_since_rebalance_ = 0;
    if (stages || rebalance) Q35_TRY(settle_experts(stages, rebalance));
  }
  if (score_total_ > 0) {
    Q35_TRY(scores_.download(scores_host_.data(), size_t(score_total_), stream()));
    Q35_TRY(sync());
    for (const group& g : groups_) {
      if (g.score < 0) continue;
      const launch::token_logprobs* a = scores_host_.data() + g.score_out0;
      scores->insert(scores->end(), a, a + g.score_rows);
      if (g.score_rows < g.n) scores->push_back(launch::token_logprobs{});  // the last row, without `next`
    }
  }
  if (host_logits) {
    const int64_t nv = m_->hparams().n_vocab;
    for (const seq_input& in : inputs) {
      const sequence& q = seqs_[size_t(in.seq)];
      const int64_t n = cfg_.keep_all_logits ? int64_t(in.tokens.size()) : 1;
      const size_t off = host_logits->size();
      host_logits->resize(off + size_t(n * nv));
      Q35_TRY(copy(host_logits->data() + off, logits_.data() + (q.logits_row - n + 1) * nv, size_t(n * nv) * 4,
                   copy_kind::device_to_host, stream()));
    }
    Q35_TRY(sync());
  }
  return status::success();
}

status decoder::eval(std::span<const int32_t> tokens, std::vector<float>* host_logits) {
  if (!m_) return error(status_code::invalid_argument, "decoder: not initialised");
  const sequence& q = seqs_[0];
  if (q.n_past + int64_t(tokens.size()) > cfg_.n_ctx)  // the whole input, before any chunk runs
    return error(status_code::invalid_argument, "the context is full: " + std::to_string(q.n_past) + " + " +
                                                    std::to_string(tokens.size()) + " tokens exceed the context of " +
                                                    std::to_string(cfg_.n_ctx));
  const int32_t n_vocab = int32_t(m_->hparams().n_vocab);
  for (size_t i = 0; i < tokens.size(); ++i)
    if (tokens[i] < 0 || tokens[i] >= n_vocab)
      return error(status_code::invalid_argument, "token id " + std::to_string(tokens[i]) + " at position " +
                                                      std::to_string(q.n_past + int64_t(i)) +
                                                      " is outside the vocabulary of " + std::to_string(n_vocab));
  for (size_t i = 0; i < tokens.size(); i += size_t(cfg_.n_batch)) {
    const seq_input in{0, tokens.subspan(i, std::min(tokens.size() - i, size_t(cfg_.n_batch)))};
    Q35_TRY(step({&in, 1}, host_logits));
  }
  return status::success();
}

status decoder::last_logits(int seq, std::vector<float>& out) const {
  Q35_TRY(check_seq(seq, "last_logits"));
  const int64_t row = seqs_[size_t(seq)].logits_row;
  if (row < 0) return error(status_code::invalid_argument, "decoder: no logits yet");
  const int64_t nv = m_->hparams().n_vocab;
  out.resize(size_t(nv));
  Q35_TRY(copy(out.data(), logits_.data() + row * nv, size_t(nv) * 4, copy_kind::device_to_host, stream()));
  return sync();
}

}  // namespace q35::gen
