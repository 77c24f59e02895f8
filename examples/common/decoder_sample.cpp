// The decoder's outputs on the device: sampling (with logit bias and log-probabilities) after a step,
// and the scoring of an input's rows (each row's log-probability of the token after it) within a step.
#include <algorithm>

#include "decoder.hpp"
#include "q35/launch/matmul.hpp"
#include "q35/launch/norm.hpp"

namespace q35::gen {

status decoder::score_groups() {
  const io::model_hparams& h = m_->hparams();
  const int64_t e = h.n_embd;
  for (const group& g : groups_) {
    if (g.score < 0 || g.score_rows == 0) continue;
    // every scored row normed at once (a_ holds a step's rows), then the LM head and the reduction per slice
    launch::rmsnorm_args na;
    na.x = h_.data() + g.row0 * e, na.maybe_w = m_->output_norm(), na.y = a_.data(), na.rows = g.score_rows;
    na.n = int(e), na.eps = float(h.rms_eps);
    Q35_TRY(launch::rmsnorm(na, stream()));
    // Every slice on the tensor-core GEMM (gemm_every_count), at most gemm_i8_invariant_tokens rows: a
    // row's answer is bit-identical whatever the slice size and the rows beside it.
    const int64_t slice = std::min<int64_t>(cfg_.score_rows, launch::gemm_i8_invariant_tokens);
    for (int64_t r0 = 0; r0 < g.score_rows; r0 += slice) {
      const int64_t n = std::min(slice, g.score_rows - r0);
      launch::matmul_args lm;
      lm.w = m_->output(), lm.x = a_.data() + r0 * e, lm.y = score_logits_.data(), lm.n_tokens = n;
      lm.gemm_every_count = true;
      lm.maybe_workspace = workspace_.data(), lm.workspace_bytes = workspace_.bytes();
      Q35_TRY(launch::matmul(lm, stream()));
      launch::logprobs_args lp;
      lp.logits = score_logits_.data(), lp.n_rows = n, lp.n_vocab = int(h.n_vocab), lp.top_n = g.score;
      lp.ids = score_ids_.data() + g.score_out0 + r0, lp.out = scores_.data() + g.score_out0 + r0;
      Q35_TRY(launch::logprobs(lp, stream()));
    }
  }
  return status::success();
}

status decoder::eval_scored(std::span<const int32_t> tokens, int top_n, int32_t next,
                            std::vector<launch::token_logprobs>& scores) {
  if (!m_) return error(status_code::invalid_argument, "decoder: not initialised");
  const sequence& q = seqs_[0];
  if (q.n_past + int64_t(tokens.size()) > cfg_.n_ctx)
    return error(status_code::invalid_argument, "the context is full: " + std::to_string(q.n_past) + " + " +
                                                    std::to_string(tokens.size()) + " tokens exceed the context of " +
                                                    std::to_string(cfg_.n_ctx));
  scores.clear();
  for (size_t i = 0; i < tokens.size(); i += size_t(cfg_.n_batch)) {
    const size_t n = std::min(tokens.size() - i, size_t(cfg_.n_batch));
    seq_input in{0, tokens.subspan(i, n), top_n, i + n < tokens.size() ? tokens[i + n] : next};
    Q35_TRY(step({&in, 1}, nullptr, &scores));
  }
  return status::success();
}

status decoder::sample(std::span<const seq_sample> requests, std::vector<int32_t>& ids,
                       std::vector<launch::token_logprobs>* logprobs) {
  const int64_t S = cfg_.n_seq_max;
  if (int64_t(requests.size()) > S)
    return error(status_code::invalid_argument, "decoder::sample: more requests than sequences");
  const int32_t nv = int32_t(m_ ? m_->hparams().n_vocab : 0);
  // the repetition windows (the last `window` ids of each, newest first; -1 where the history is
  // shorter) and the logit-bias lists, each staged in one pinned buffer and uploaded in one copy
  size_t ring_total = 0, bias_total = 0, n_biased = 0;
  bool any_logprobs = false;
  for (const seq_sample& r : requests) {
    Q35_TRY(check_seq(r.seq, "sample"));
    const std::string who = "decoder::sample: sequence " + std::to_string(r.seq);
    if (seqs_[size_t(r.seq)].logits_row < 0) return error(status_code::invalid_argument, who + " before any eval()");
    if (launch::penalizes(r.params) && r.params.repeat_last_n > ops::sample_max_window)
      return error(status_code::invalid_argument, who + ": repeat_last_n = " + std::to_string(r.params.repeat_last_n) +
                                                      " exceeds " + std::to_string(ops::sample_max_window) + " tokens");
    if (const status st = launch::check_logit_bias(r.bias, nv); !st.ok())
      return error(status_code::invalid_argument, who + ": " + st.message());
    if (r.top_logprobs < -1 || r.top_logprobs > launch::logprobs_max_top)
      return error(status_code::invalid_argument, who + ": top_logprobs = " + std::to_string(r.top_logprobs) +
                                                      " is outside -1.." + std::to_string(launch::logprobs_max_top));
    if (launch::penalizes(r.params)) ring_total += size_t(r.params.repeat_last_n);
    bias_total += r.bias.size(), n_biased += r.bias.empty() ? 0 : 1;
    any_logprobs = any_logprobs || (logprobs && r.top_logprobs >= 0);
  }
  if (any_logprobs && logprobs_.size() < size_t(S)) {
    Q35_TRY(logprobs_.allocate(size_t(S)));
    Q35_TRY(logprobs_host_.allocate(size_t(S)));
  }
  stream_t s = stream();
  if (ring_total > 0) {
    if (recent_.size() < ring_total) Q35_TRY(recent_.allocate(ring_total));
    if (recent_host_.size() < ring_total) Q35_TRY(recent_host_.allocate(ring_total));
    size_t off = 0;
    for (const seq_sample& r : requests) {
      if (!launch::penalizes(r.params)) continue;
      for (int i = 0; i < r.params.repeat_last_n; ++i)
        recent_host_[off + size_t(i)] = size_t(i) < r.recent.size() ? r.recent[r.recent.size() - 1 - size_t(i)] : -1;
      off += size_t(r.params.repeat_last_n);
    }
    Q35_TRY(copy(recent_.data(), recent_host_.data(), ring_total * sizeof(int32_t), copy_kind::host_to_device, s));
  }
  if (bias_total > 0) {
    if (bias_.size() < bias_total) Q35_TRY(bias_.allocate(bias_total));
    if (bias_host_.size() < bias_total) Q35_TRY(bias_host_.allocate(bias_total));
    if (biased_logits_.size() < n_biased * size_t(nv)) Q35_TRY(biased_logits_.allocate(n_biased * size_t(nv)));
    size_t off = 0;
    for (const seq_sample& r : requests)
      for (const launch::logit_bias_entry& e : r.bias) bias_host_[off++] = e;
    Q35_TRY(copy(bias_.data(), bias_host_.data(), bias_total * sizeof(launch::logit_bias_entry),
                 copy_kind::host_to_device, s));
  }
  size_t ring_off = 0, bias_off = 0, biased = 0;
  for (size_t i = 0; i < requests.size(); ++i) {
    const seq_sample& r = requests[i];
    launch::sample_args a;
    const float* raw = logits_.data() + seqs_[size_t(r.seq)].logits_row * int64_t(nv);
    a.logits = raw;
    if (!r.bias.empty()) {  // the sampler reads a biased copy: the step's logits stay as computed
      launch::logit_bias_args b;
      b.logits = a.logits, b.out = biased_logits_.data() + biased++ * size_t(nv);
      b.n_rows = 1, b.n_vocab = nv, b.lists = bias_.data() + bias_off, b.width = int(r.bias.size());
      b.maybe_error_flag = result_.data() + S;
      Q35_TRY(launch::add_logit_bias(b, s));
      a.logits = b.out, bias_off += r.bias.size();
    }
    a.n_rows = 1, a.n_vocab = nv, a.params = r.params;
    const bool ring = launch::penalizes(r.params);
    a.maybe_recent = ring ? recent_.data() + ring_off : nullptr;
    if (ring) ring_off += size_t(r.params.repeat_last_n);
    if (!a.maybe_recent) a.params.repeat_last_n = 0;
    a.rng_counter = rng_counters_.data() + r.seq;
    a.out_ids = result_.data() + i;
    a.workspace = sample_ws_.data(), a.workspace_bytes = sample_ws_.bytes();
    Q35_TRY(launch::sample(a, s));
    if (logprobs && r.top_logprobs >= 0) {
      launch::logprobs_args lp;
      lp.logits = raw, lp.n_rows = 1, lp.n_vocab = nv, lp.ids = a.out_ids, lp.top_n = r.top_logprobs;
      lp.out = logprobs_.data() + i;
      Q35_TRY(launch::logprobs(lp, s));
    }
  }
  // the one host synchronization of a decode step: the ids and the kernels' error flag in one copy
  // (and the log-probabilities in a second, when asked for)
  Q35_TRY(result_.download(result_host_.data(), size_t(S + 1), s));
  if (any_logprobs) Q35_TRY(logprobs_.download(logprobs_host_.data(), requests.size(), s));
  Q35_TRY(sync());
  // The uploads above read recent_host_ and bias_host_ asynchronously: the sync() has completed them too.
  if (result_host_[size_t(S)])
    return error(status_code::kernel_fault, "a kernel reported an out-of-range token or expert id");
  ids.assign(result_host_.data(), result_host_.data() + requests.size());
  if (logprobs) {
    logprobs->assign(requests.size(), launch::token_logprobs{});
    for (size_t i = 0; i < requests.size(); ++i)
      if (requests[i].top_logprobs >= 0) (*logprobs)[i] = logprobs_host_[i];
  }
  return status::success();
}

status decoder::sample(const launch::sampling_params& p, std::span<const int32_t> recent, int32_t& id) {
  if (!m_) return error(status_code::invalid_argument, "decoder: not initialised");
  const seq_sample r{0, p, recent};
  std::vector<int32_t> ids;
  Q35_TRY(sample({&r, 1}, ids));
  id = ids[0];
  return status::success();
}

}  // namespace q35::gen
