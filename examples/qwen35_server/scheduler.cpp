// server::scheduler: admission, step planning, sampling and delivery (see scheduler.hpp for the policy).
#include "scheduler.hpp"

#include <algorithm>
#include <cmath>
#include <exception>
#include <limits>
#include <optional>
#include <string>
#include <utility>

namespace q35::server {

const char* to_string(outcome o) {
  switch (o) {
    case outcome::stop:
      return "stop";
    case outcome::length:
      return "length";
    case outcome::cancelled:
      return "cancelled";
    case outcome::error:
      return "error";
  }
  return "unknown";
}

void detail::wake_signal::notify() {
  {
    std::lock_guard<std::mutex> lk(m);
    pending = true;
  }
  cv.notify_all();
}

void request_handle::cancel() const {
  if (!state_) return;
  state_->cancel.store(true);
  state_->wake->notify();
}

scheduler::scheduler() : wake_(std::make_shared<detail::wake_signal>()) {}

scheduler::~scheduler() {
  stop();
  std::lock_guard<std::mutex> step(step_m_);
  std::deque<waiting> left;
  {
    std::lock_guard<std::mutex> lk(queue_m_);
    left.swap(queue_);
  }
  const std::string why = "the scheduler shut down before the request finished";
  for (waiting& w : left) notify_done(w, {outcome::error, why, int64_t(w.req.prompt.size()), 0});
  while (!active_.empty()) end(active_.size() - 1, outcome::error, why);
  for (const cached_prefix& c : prefixes_) d_->drop_prefix(c.id);
}

void scheduler::drop_prefixes() {
  if (!d_) return;
  std::lock_guard<std::mutex> step(step_m_);
  for (const cached_prefix& c : prefixes_) d_->drop_prefix(c.id);
  prefixes_.clear();
  publish();
}

std::vector<int64_t> scheduler::checkpoint_positions(const std::vector<int32_t>& prompt) const {
  std::vector<int64_t> cuts;
  if (d_->n_prefix_slots() == 0) return cuts;
  const int64_t pt = d_->page_tokens(), n = int64_t(prompt.size());
  const auto add = [&](int64_t pos) {
    const int64_t c = pos / pt * pt;
    if (c > 0 && (cuts.empty() || cuts.back() != c)) cuts.push_back(c);
  };
  for (int64_t i = 1; i < n; ++i)
    if (std::find(cfg_.prefix_boundary_ids.begin(), cfg_.prefix_boundary_ids.end(), prompt[size_t(i)]) !=
        cfg_.prefix_boundary_ids.end())
      add(i);
  if (cuts.size() > 5) cuts.erase(cuts.begin() + 2, cuts.end() - 3);  // the first 2 and the last 3
  add(n - 1);  // >= every boundary's floor; leaves at least one token to compute
  return cuts;
}

int scheduler::find_prefix(const std::vector<int32_t>& prompt, const std::vector<int64_t>& cuts,
                           int64_t min_len) const {
  for (size_t k = cuts.size(); k-- > 0;) {
    if (cuts[k] < min_len) break;
    for (size_t i = 0; i < prefixes_.size(); ++i) {
      const std::vector<int32_t>& t = d_->prefix_tokens(prefixes_[i].id);
      if (int64_t(t.size()) == cuts[k] && std::equal(t.begin(), t.end(), prompt.begin())) return int(i);
    }
  }
  return -1;
}

bool scheduler::evict_prefix(int keep) {
  size_t lru = prefixes_.size();
  for (size_t i = 0; i < prefixes_.size(); ++i)
    if (prefixes_[i].id != keep && (lru == prefixes_.size() || prefixes_[i].last_used < prefixes_[lru].last_used))
      lru = i;
  if (lru == prefixes_.size()) return false;
  d_->drop_prefix(prefixes_[lru].id);
  prefixes_.erase(prefixes_.begin() + std::ptrdiff_t(lru));
  ++prefix_counts_.prefix_evictions;
  return true;
}

void scheduler::checkpoint(const active& a) {
  if (!std::binary_search(a.cuts.begin(), a.cuts.end(), a.fed)) return;
  const std::vector<int64_t> here{a.fed};
  if (const int i = find_prefix(a.history, here); i >= 0) {
    prefixes_[size_t(i)].last_used = ++tick_;
    return;
  }
  if (d_->prefixes_free() == 0 && !evict_prefix()) return;
  int id = -1;
  if (!d_->save_prefix(a.seq, id).ok()) return;  // (cannot fail: aligned, a slot free) the request goes on
  prefixes_.push_back({id, ++tick_});
  ++prefix_counts_.prefix_checkpoints;
}

status scheduler::init(gen::decoder& d, const scheduler_config& cfg) {
  const auto bad = [](const std::string& what) { return error(status_code::invalid_argument, "scheduler: " + what); };
  if (d_) return bad("already initialised");
  if (cfg.max_queue < 1) return bad("max_queue = 0: every request would be refused");
  if (cfg.n_batch < 1 || cfg.n_batch > d.n_ctx())
    return bad("n_batch = " + std::to_string(cfg.n_batch) + " is outside 1..n_ctx (" + std::to_string(d.n_ctx()) +
               "); give the decoder's n_batch");
  if (cfg.prompt_budget < 1 || cfg.prompt_budget > cfg.n_batch)
    return bad("prompt_budget = " + std::to_string(cfg.prompt_budget) + " is outside 1..n_batch (" +
               std::to_string(cfg.n_batch) + "): a step holds n_batch + n_seq_max tokens");
  if (cfg.n_vocab < 0) return bad("n_vocab = " + std::to_string(cfg.n_vocab) + " is negative (0: unchecked)");
  for (int s = 0; s < d.n_seq_max(); ++s)
    if (d.n_past(s) != 0)
      return bad("sequence " + std::to_string(s) + " of the decoder holds " + std::to_string(d.n_past(s)) +
                 " tokens; the scheduler needs every sequence cleared");
  d_ = &d;
  cfg_ = cfg;
  free_seqs_.clear();
  for (int s = d.n_seq_max() - 1; s >= 0; --s) free_seqs_.push_back(s);  // sequence 0 is used first
  std::lock_guard<std::mutex> lk(queue_m_);
  metrics_.kv_pages_total = d.pages_total();
  return status::success();
}

submit_result scheduler::submit(request r) {
  submit_result out;
  const auto refuse = [&](submit_error e, std::string msg) {
    std::lock_guard<std::mutex> lk(queue_m_);
    ++metrics_.requests_rejected;
    out.error = e;
    out.message = std::move(msg);
    return out;
  };
  if (!d_) return refuse(submit_error::invalid_request, "the scheduler is not initialised");
  const int64_t n = int64_t(r.prompt.size()), n_ctx = d_->n_ctx();
  if (n == 0) return refuse(submit_error::invalid_request, "the prompt is empty");
  if (n > n_ctx)
    return refuse(submit_error::invalid_request, "prompt of " + std::to_string(n) + " tokens exceeds the context of " +
                                                     std::to_string(n_ctx) + " tokens");
  if (r.max_tokens < 0)
    return refuse(submit_error::invalid_request, "max_tokens = " + std::to_string(r.max_tokens) + " is below 0");
  if (r.prompt_logprobs < -1 || r.prompt_logprobs > launch::logprobs_max_top)
    return refuse(submit_error::invalid_request, "prompt_logprobs = " + std::to_string(r.prompt_logprobs) +
                                                     " is outside -1.." + std::to_string(launch::logprobs_max_top));
  if (r.prompt_logprobs >= 0 && d_->score_rows() == 0)
    return refuse(submit_error::invalid_request,
                  "prompt log-probabilities are off (the decoder was made without score_rows)");
  for (int64_t i = 0; i < n; ++i) {
    const int32_t id = r.prompt[size_t(i)];
    if (id < 0 || (cfg_.n_vocab > 0 && id >= cfg_.n_vocab))
      return refuse(submit_error::invalid_request, "prompt token " + std::to_string(id) + " at position " +
                                                       std::to_string(i) + " is outside the vocabulary of " +
                                                       std::to_string(cfg_.n_vocab));
  }
  for (const launch::logit_bias_entry& e : r.logit_bias)
    if (e.id < 0 || (cfg_.n_vocab > 0 && e.id >= cfg_.n_vocab) || std::isnan(e.bias))
      return refuse(submit_error::invalid_request,
                    "logit_bias: token " + std::to_string(e.id) +
                        (std::isnan(e.bias) ? " has a NaN bias"
                                            : " is outside the vocabulary of " + std::to_string(cfg_.n_vocab)));
  if (r.ignore_eos)
    for (const int32_t id : cfg_.stop_ids) r.logit_bias.push_back({id, -INFINITY});
  if (r.top_logprobs < -1 || r.top_logprobs > launch::logprobs_max_top)
    return refuse(submit_error::invalid_request, "top_logprobs = " + std::to_string(r.top_logprobs) +
                                                     " is outside -1.." + std::to_string(launch::logprobs_max_top));
  if (r.logit_bias.size() > size_t(launch::logit_bias_max_entries))
    return refuse(submit_error::invalid_request, "logit_bias: " + std::to_string(r.logit_bias.size()) +
                                                     " tokens, at most " +
                                                     std::to_string(launch::logit_bias_max_entries));
  // the sampler's own checks, so that a bad value cannot fail the other draws of a step
  launch::sample_args probe;
  probe.n_rows = 0, probe.n_vocab = std::max(1, cfg_.n_vocab), probe.params = r.sampling;
  if (const status s = launch::validate(probe); !s.ok()) return refuse(submit_error::invalid_request, s.message());

  auto state = std::make_shared<detail::request_state>();
  state->wake = wake_;
  {
    std::lock_guard<std::mutex> lk(queue_m_);
    if (queue_.size() >= cfg_.max_queue) {
      ++metrics_.requests_rejected;
      out.error = submit_error::queue_full;
      out.message = "the queue is full (" + std::to_string(cfg_.max_queue) + " requests waiting)";
      return out;
    }
    state->id = next_id_++;
    queue_.push_back(waiting{std::move(r), state});
    ++metrics_.requests_submitted;
    metrics_.queue_length = int64_t(queue_.size());
  }
  wake_->notify();
  out.handle = request_handle(std::move(state));
  return out;
}

int64_t scheduler::pages_for(int64_t tokens) const {
  const int64_t pt = d_->page_tokens();
  return (tokens + pt - 1) / pt;
}

int64_t scheduler::promised(const active& a) const {
  const int64_t target = std::min<int64_t>(int64_t(a.w.req.prompt.size()) + 1, d_->n_ctx());
  return std::max<int64_t>(0, pages_for(target) - pages_for(d_->n_past(a.seq)));
}

void scheduler::notify_done(waiting& w, const finish_info& f) {
  if (!w.req.on_done) return;
  try {
    w.req.on_done(f);
  } catch (...) {
    // nothing is left to tell the request; the scheduler must go on serving the others
  }
}

void scheduler::end(size_t i, outcome why, std::string error) {
  active a = std::move(active_[i]);
  active_.erase(active_.begin() + std::ptrdiff_t(i));
  if (d_->clear(a.seq).ok()) {
    free_seqs_.push_back(a.seq);
  } else {
    // its state is unknown: the slot is not handed out again
    std::lock_guard<std::mutex> lk(queue_m_);
    ++metrics_.sequences_lost;
  }
  {
    std::lock_guard<std::mutex> lk(queue_m_);
    if (why == outcome::cancelled)
      ++metrics_.requests_cancelled;
    else if (why == outcome::error)
      ++metrics_.requests_failed;
    else
      ++metrics_.requests_finished;
    // the sequence and its pages are free before its client hears of the end: a /metrics read after
    // the response never shows them still held
    publish_occupancy();
  }
  notify_done(a.w, {why, std::move(error), int64_t(a.w.req.prompt.size()), a.drawn});
}

namespace {
constexpr std::chrono::seconds rate_window{10};

// Runs a request's callback (`what`: its name); what it threw, as the request's error message.
template <class F>
std::optional<std::string> callback_error(const char* what, F&& f) {
  try {
    f();
    return std::nullopt;
  } catch (const std::exception& e) {
    return std::string(what) + " threw: " + e.what();
  } catch (...) {
    return std::string(what) + " threw";
  }
}
}  // namespace

void scheduler::publish() {
  const auto now = std::chrono::steady_clock::now();
  // the expert cache's record: a device read (and a wait for the stream), so not after every step
  std::vector<gen::expert_cache_stats> cache;
  int64_t steps = 0;
  {
    std::lock_guard<std::mutex> lk(queue_m_);
    steps = metrics_.steps;
  }
  const bool read_experts = d_->expert_slots() >= 0 && steps != expert_read_steps_ &&
                            (active_.empty() || now - expert_read_at_ >= std::chrono::seconds(1));
  if (read_experts && d_->expert_cache(cache).ok()) expert_read_at_ = now, expert_read_steps_ = steps;

  std::lock_guard<std::mutex> lk(queue_m_);
  if (read_experts && expert_read_at_ == now) {
    metrics_.expert_hits = metrics_.expert_misses = metrics_.expert_staged = 0;
    metrics_.expert_host_bytes = metrics_.expert_promotions = 0;
    for (const gen::expert_cache_stats& c : cache) {
      metrics_.expert_hits += c.hits, metrics_.expert_misses += c.misses, metrics_.expert_staged += c.staged;
      metrics_.expert_host_bytes += c.host_bytes, metrics_.expert_promotions += c.promotions;
    }
  }
  metrics_.expert_slots = d_->expert_slots();
  if (rate_samples_.empty() || now - rate_samples_.back().first >= std::chrono::milliseconds(250))
    rate_samples_.emplace_back(now, metrics_.tokens_generated);
  while (rate_samples_.size() >= 2 && rate_samples_[1].first <= now - rate_window) rate_samples_.pop_front();
  publish_occupancy();
}

void scheduler::publish_occupancy() {
  metrics_.active_sequences = int64_t(active_.size());
  metrics_.kv_pages_total = d_->pages_total();
  metrics_.kv_pages_used = d_->pages_total() - d_->pages_free();
  metrics_.queue_length = int64_t(queue_.size());
  metrics_.prefix_hits = prefix_counts_.prefix_hits;
  metrics_.prefix_tokens_reused = prefix_counts_.prefix_tokens_reused;
  metrics_.prefix_checkpoints = prefix_counts_.prefix_checkpoints;
  metrics_.prefix_evictions = prefix_counts_.prefix_evictions;
  metrics_.prefix_cached = int64_t(prefixes_.size());
  metrics_.prefix_pages = d_->prefix_pages();
}

bool scheduler::step_once() {
  if (!d_) return false;
  std::lock_guard<std::mutex> step(step_m_);
  bool work = false;

  // 1. cancellations: waiting requests leave the queue, running ones their sequence
  std::vector<waiting> dropped;
  {
    std::lock_guard<std::mutex> lk(queue_m_);
    for (auto it = queue_.begin(); it != queue_.end();) {
      if (!it->state->cancel.load()) {
        ++it;
        continue;
      }
      dropped.push_back(std::move(*it));
      it = queue_.erase(it);
      ++metrics_.requests_cancelled;
    }
  }
  if (!dropped.empty()) {
    std::lock_guard<std::mutex> lk(queue_m_);
    publish_occupancy();  // the queue without them, before they hear of it
  }
  for (waiting& w : dropped) notify_done(w, {outcome::cancelled, {}, int64_t(w.req.prompt.size()), 0});
  work |= !dropped.empty();
  for (size_t i = active_.size(); i-- > 0;)
    if (active_[i].w.state->cancel.load()) {
      end(i, outcome::cancelled);
      work = true;
    }

  // 2. room for every decoding sequence's next token. Pages promised to prefilling sequences are not
  // free to take; a sequence takes its own promise first.
  const bool paged = d_->pages_total() > 0;  // no pages at all: a model without attention layers
  const int64_t n_ctx = d_->n_ctx();
  int64_t reserved = 0;         // pages of the pool taken by this step's needy sequences (below)
  const auto spare_now = [&] {  // free pages nobody is promised
    if (!paged) return std::numeric_limits<int64_t>::max() / 2;
    int64_t n = d_->pages_free() - reserved;
    for (const active& a : active_) n -= promised(a);
    return n;
  };
  int64_t spare = spare_now();
  std::vector<size_t> needy;  // decoding sequences that need a page beyond their promise, oldest first
  for (size_t i = 0; i < active_.size();) {
    const active& a = active_[i];
    const int64_t n_past = d_->n_past(a.seq);
    if (a.fed < int64_t(a.w.req.prompt.size())) {
      ++i;
      continue;
    }
    if (n_past + 1 > n_ctx) {  // (ended when drawn already; kept so that no path feeds past the context)
      end(i, outcome::length);
      work = true;
      continue;
    }
    if (paged && pages_for(n_past + 1) - pages_for(n_past) > promised(a)) needy.push_back(i);
    ++i;
  }
  // too few: cached prefixes go first, then the newest needy sequence ends, and its pages go to the others
  while (int64_t(needy.size()) > spare && evict_prefix()) spare = spare_now();
  while (int64_t(needy.size()) > spare) {
    const size_t i = needy.back();
    needy.pop_back();
    spare += pages_for(d_->n_past(active_[i].seq));
    end(i, outcome::length);  // indices before i (all of needy's) stay valid
    work = true;
  }
  reserved = int64_t(needy.size());
  spare -= reserved;

  // 3. admissions, oldest first, while a slot and the pages for prompt + 1 token are there
  {
    std::lock_guard<std::mutex> lk(queue_m_);
    while (!queue_.empty() && !free_seqs_.empty()) {
      waiting& w = queue_.front();
      std::vector<int64_t> cuts = checkpoint_positions(w.req.prompt);
      // (a request for prompt log-probabilities computes every prompt row)
      const int hit = w.req.prompt_logprobs < 0 ? find_prefix(w.req.prompt, cuts) : -1;
      const int hit_id = hit >= 0 ? prefixes_[size_t(hit)].id : -1;
      const int64_t reused = hit >= 0 ? int64_t(d_->prefix_tokens(hit_id).size()) : 0;
      const int64_t need =
          paged ? pages_for(std::min<int64_t>(int64_t(w.req.prompt.size()) + 1, n_ctx)) - pages_for(reused) : 0;
      while (need > spare && evict_prefix(hit_id)) spare = spare_now();
      if (need > spare) break;
      spare -= need;
      active a;
      a.seq = free_seqs_.back();
      a.cuts = std::move(cuts);
      if (hit_id >= 0 && d_->start_from_prefix(a.seq, hit_id).ok()) {
        a.fed = reused;
        for (cached_prefix& c : prefixes_)
          if (c.id == hit_id) c.last_used = ++tick_;
        ++prefix_counts_.prefix_hits;
        prefix_counts_.prefix_tokens_reused += reused;
      } else if (hit_id >= 0) {
        // (cannot happen: the checkpoint was just found) a cold start, whose extra pages come from spare
        if (!d_->clear(a.seq).ok()) break;
        spare -= pages_for(reused);
      }
      free_seqs_.pop_back();
      a.history = w.req.prompt;
      if (w.req.prompt_logprobs >= 0) a.prompt_scores.assign(w.req.prompt.size(), launch::token_logprobs{});
      a.w = std::move(w);
      queue_.pop_front();
      active_.push_back(std::move(a));
    }
  }

  // 4. the step's inputs: each decoding sequence's last id, prompt chunks within the budget
  std::vector<gen::seq_input> inputs;
  std::vector<size_t> who;  // active_ index of each input
  int64_t prompt_tokens = 0;
  for (size_t i = 0; i < active_.size(); ++i) {
    const active& a = active_[i];
    const int64_t n_prompt = int64_t(a.w.req.prompt.size());
    if (a.fed < n_prompt) {
      int64_t n = std::min(n_prompt - a.fed, cfg_.n_batch);
      const auto cut = std::upper_bound(a.cuts.begin(), a.cuts.end(), a.fed);
      if (cut != a.cuts.end()) n = std::min(n, *cut - a.fed);
      if (prompt_tokens > 0 && prompt_tokens + n > cfg_.prompt_budget) continue;  // a later step
      prompt_tokens += n;
      const int score = a.w.req.prompt_logprobs;
      const int32_t next = a.fed + n < n_prompt ? a.history[size_t(a.fed + n)] : -1;
      inputs.push_back({a.seq, std::span<const int32_t>(a.history).subspan(size_t(a.fed), size_t(n)), score,
                        score >= 0 ? next : -1});
    } else {
      inputs.push_back({a.seq, std::span<const int32_t>(&a.history.back(), 1)});
    }
    who.push_back(i);
  }
  if (inputs.empty()) {
    publish();
    return work;
  }

  // 5. the step; a failure leaves the state of every sequence in it undefined
  std::vector<launch::token_logprobs> scores;
  const status s = d_->step(inputs, nullptr, &scores);
  {
    std::lock_guard<std::mutex> lk(queue_m_);
    ++metrics_.steps;
    if (s.ok()) metrics_.tokens_prompt += prompt_tokens;
  }
  if (!s.ok()) {
    std::sort(who.begin(), who.end());
    for (size_t k = who.size(); k-- > 0;) end(who[k], outcome::error, s.to_string());
    publish();
    return true;
  }
  std::vector<gen::seq_sample> draws;
  bool any_logprobs = false;
  std::vector<size_t> drawn;                            // active_ index of each draw
  std::vector<std::pair<size_t, finish_info>> endings;  // active_ index, why
  size_t answer = 0;                                    // the next of `scores`
  for (size_t k = 0; k < inputs.size(); ++k) {
    active& a = active_[who[k]];
    const int64_t n_prompt = int64_t(a.w.req.prompt.size());
    if (a.fed < n_prompt) {
      const int64_t n = int64_t(inputs[k].tokens.size());
      if (inputs[k].score >= 0) {  // row t answers for prompt[fed + t + 1] (the last row of the prompt: none)
        for (int64_t t = 0; t < n; ++t, ++answer)
          if (a.fed + t + 1 < n_prompt) a.prompt_scores[size_t(a.fed + t + 1)] = scores[answer];
      }
      a.fed += n;
      checkpoint(a);
      if (a.fed == n_prompt && a.w.req.prompt_logprobs >= 0 && a.w.req.on_prompt) {
        if (auto e = callback_error("on_prompt", [&] { a.w.req.on_prompt(a.prompt_scores); })) {
          endings.push_back({who[k], {outcome::error, std::move(*e)}});
          continue;
        }
      }
      if (a.fed == n_prompt && a.w.req.max_tokens == 0) {  // the prompt only
        endings.push_back({who[k], {outcome::length}});
        continue;
      }
    }
    if (a.fed == n_prompt) {
      draws.push_back({a.seq, a.w.req.sampling, a.history, a.w.req.logit_bias, a.w.req.top_logprobs});
      any_logprobs = any_logprobs || a.w.req.top_logprobs >= 0;
      drawn.push_back(who[k]);
    }
  }

  // 6. the draws, their delivery, and the endings they bring
  if (!draws.empty()) {
    std::vector<int32_t> ids;
    std::vector<launch::token_logprobs> lps;
    const status ds = d_->sample(draws, ids, any_logprobs ? &lps : nullptr);
    for (size_t k = 0; k < drawn.size(); ++k) {
      active& a = active_[drawn[k]];
      if (!ds.ok()) {
        endings.push_back({drawn[k], {outcome::error, ds.to_string()}});
        continue;
      }
      const int32_t id = ids[k];
      a.history.push_back(id);
      ++a.drawn;
      {
        std::lock_guard<std::mutex> lk(queue_m_);
        ++metrics_.tokens_generated;
      }
      if (std::find(cfg_.stop_ids.begin(), cfg_.stop_ids.end(), id) != cfg_.stop_ids.end()) {
        endings.push_back({drawn[k], {outcome::stop}});
        continue;
      }
      if (a.w.req.on_token) {
        if (auto e = callback_error("on_token",
                                    [&] { a.w.req.on_token(id, a.w.req.top_logprobs >= 0 ? &lps[k] : nullptr); })) {
          endings.push_back({drawn[k], {outcome::error, std::move(*e)}});
          continue;
        }
      }
      // max_tokens reached, or the id just drawn has no room in the context
      if (a.drawn >= a.w.req.max_tokens || d_->n_past(a.seq) + 1 > n_ctx)
        endings.push_back({drawn[k], {outcome::length}});
    }
  }
  std::sort(endings.begin(), endings.end(), [](const auto& x, const auto& y) { return x.first > y.first; });
  for (auto& [i, f] : endings) end(i, f.reason, std::move(f.error));
  publish();
  return true;
}

status scheduler::run() {
  if (!d_) return error(status_code::invalid_argument, "scheduler::run: not initialised");
  if (thread_.joinable()) return error(status_code::invalid_argument, "scheduler::run: already running");
  {
    std::lock_guard<std::mutex> lk(wake_->m);
    wake_->stop = false;
  }
  thread_ = std::thread([this] { loop(); });
  return status::success();
}

void scheduler::loop() {
  for (;;) {
    {
      std::lock_guard<std::mutex> lk(wake_->m);
      if (wake_->stop) return;
      wake_->pending = false;  // what comes after this is seen by step_once or wakes the wait below
    }
    if (step_once()) continue;
    {
      std::lock_guard<std::mutex> lk(queue_m_);
      ++metrics_.idle_waits;
    }
    std::unique_lock<std::mutex> lk(wake_->m);
    wake_->cv.wait(lk, [&] { return wake_->pending || wake_->stop; });
  }
}

void scheduler::stop() {
  {
    std::lock_guard<std::mutex> lk(wake_->m);
    wake_->stop = true;
  }
  wake_->cv.notify_all();
  // from a callback (the loop's own thread) the loop ends when the callback returns; joined later
  if (thread_.joinable() && thread_.get_id() != std::this_thread::get_id()) thread_.join();
}

scheduler_metrics scheduler::metrics() const {
  std::lock_guard<std::mutex> lk(queue_m_);
  scheduler_metrics m = metrics_;
  // over [now - 10 s, now]: from the newest sample at or before the window's start (else the oldest);
  // an idle server's rate falls to 0 once its last step is 10 s old
  const auto now = std::chrono::steady_clock::now();
  if (!rate_samples_.empty()) {
    auto base = rate_samples_.front();
    for (const auto& x : rate_samples_)
      if (x.first <= now - rate_window) base = x;
    const double dt = std::chrono::duration<double>(now - base.first).count();
    m.tokens_per_second_recent = dt > 0 ? double(m.tokens_generated - base.second) / dt : 0.0;
  }
  return m;
}

}  // namespace q35::server
