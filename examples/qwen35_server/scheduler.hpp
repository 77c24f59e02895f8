// scheduler: continuous batching of generation requests over one gen::decoder. Requests come from any
// thread; one thread steps the decoder: every step each decoding sequence feeds its last token and
// prefilling ones feed their next prompt chunk, so prompts never stall the sequences already streaming.
//
//   server::scheduler s;
//   Q35_TRY(s.init(decoder, {.max_queue = 64, .n_batch = 512, .prompt_budget = 512, .n_vocab = nv,
//                             .stop_ids = {eos}}));
//   Q35_TRY(s.run());                                  // the scheduling thread
//   auto r = s.submit({prompt_ids, params, 256, on_token, on_done});
//   if (!r.ok()) ...                                   // r.error: queue_full (503) or invalid_request (400)
//   r.handle.cancel();                                 // any thread; effective at the next step boundary
//   s.stop();
//
// Policy:
// - Admission is FIFO: the oldest waiting request starts when a sequence slot is free and the KV pool
//   holds pages for its prompt plus one token that no other sequence has a claim on. Those pages stay
//   promised to it until its first generated token is fed, so its prefill can never run out of pages.
// - Prompts go in chunks of n_batch tokens (the last one shorter), always cut the same way whatever
//   else runs, because the decoder's batch invariance holds only for a prompt chunked the same way.
//   With prefix reuse a prompt is also cut at its checkpoint positions (below), and chunks of n_batch
//   count from the last cut: the cuts are a function of the prompt alone.
//   A step takes chunks, oldest sequence first, while its prompt tokens stay within prompt_budget
//   (the first chunk of a step always goes; one that does not fit waits, a later smaller one may go).
// - A decoding sequence whose next token has no room ends with "length": at the context (n_ctx tokens)
//   or when the pool has no free, unpromised page for it. When several need a new page and too few
//   are free, the newest of them ends first (its pages let the older ones go on). Ending rather than
//   waiting is what keeps the pool from deadlocking: a sequence only ever waits for a page in the queue.
// - A stop id (eos, ...) ends the request with "stop": it counts as a generated token (usage) but is
//   not passed to on_token.
// - A failed decoder step fails every request of that step with the decoder's message and frees their
//   sequences (a partly run step leaves their state undefined, so none of them can go on); the others
//   keep going. Checks done at submit (ids within the vocabulary, lengths, sampling values) keep the
//   decoder's refusals from hitting the innocent requests of a step.
//
// - Prefix reuse (the decoder has prefix checkpoint slots): a prompt's checkpoint positions are the
//   page-aligned floors of the positions of its prefix_boundary_ids (the chat template's <|im_start|>,
//   so that a shared system prompt, or a chat's earlier turns, end on one) - the first 2 and the last
//   3 of them - and the floor of its last position (a repeated prompt). When a prefilling sequence
//   reaches one, the decoder checkpoints it (KV pages shared, recurrent state copied) unless a
//   checkpoint of the same tokens is cached. A new request starts from the longest cached checkpoint
//   whose tokens begin its prompt at one of its own checkpoint positions, so its chunks are cut as in
//   a cold run: the same ids and logits as without the cache, bit for bit. Checkpoints go
//   least-recently-used first when slots run out, and whenever pages do (before a request waits or a
//   sequence ends for lack of a page).
//
// Callbacks run on the stepping thread, outside the scheduler's queue lock: they may call submit() and
// cancel(), not step_once() or stop() (stop() from a callback only asks the loop to end).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "decoder.hpp"
#include "q35/core/status.hpp"
#include "q35/launch/sample.hpp"

namespace q35::server {

// How a request ended.
enum class outcome { stop, length, cancelled, error };
// "stop", "length", "cancelled", "error"
const char* to_string(outcome o);

struct finish_info {
  outcome reason = outcome::stop;
  std::string error;              // outcome::error: what failed
  int64_t prompt_tokens = 0;      // the prompt's length
  int64_t completion_tokens = 0;  // ids drawn, a stop id included
};

struct request {
  std::vector<int32_t> prompt;  // token ids, 1 .. n_ctx of them
  launch::sampling_params sampling;
  int64_t max_tokens = 16;  // ids drawn at most; 0: the prompt only (its log-probabilities), ending "length"
  // Each drawn id but a stop id, as it is drawn; `logprobs` holds its log-probabilities when
  // top_logprobs >= 0, else is null (valid during the call only).
  std::function<void(int32_t id, const launch::token_logprobs* logprobs)> on_token;
  std::function<void(const finish_info&)> on_done;   // exactly once per accepted request
  std::vector<launch::logit_bias_entry> logit_bias;  // added to every draw's logits (launch::add_logit_bias)
  int top_logprobs = -1;  // -1: none; 0 .. launch::logprobs_max_top: with each id, its log-probability
                          // and this many of the most likely ids (launch::logprobs)
  // The stop ids are never drawn (a bias of -inf each, after logit_bias): the request runs to
  // max_tokens or the context (llama.cpp's --ignore-eos).
  bool ignore_eos = false;
  // Prompt log-probabilities (a completion's echo with logprobs; the decoder needs score_rows): -1 none;
  // 0 .. launch::logprobs_max_top: once the prompt is fed, on_prompt receives prompt.size() answers,
  // answer i for prompt[i] under the logits after prompt[0..i) (answer 0, which has none, with id -1),
  // each with this many of the most likely ids. Such a request computes its whole prompt (no prefix
  // checkpoint is reused). Called on the stepping thread, before the first on_token.
  int prompt_logprobs = -1;
  std::function<void(const std::vector<launch::token_logprobs>& answers)> on_prompt;
};

namespace detail {
// What wakes the scheduling thread: submit, cancel, stop. Shared with the handles, which may outlive it.
struct wake_signal {
  std::mutex m;
  std::condition_variable cv;
  bool pending = false;  // something happened since the loop last looked
  bool stop = false;
  void notify();
};
struct request_state {
  uint64_t id = 0;
  std::atomic<bool> cancel{false};
  std::shared_ptr<wake_signal> wake;
};
}  // namespace detail

// A submitted request: its id and a cancel() callable from any thread.
class request_handle {
 public:
  request_handle() = default;
  bool valid() const { return state_ != nullptr; }
  uint64_t id() const { return state_ ? state_->id : 0; }
  // The request ends with "cancelled" at the next step boundary (no effect once it has ended).
  void cancel() const;

 private:
  friend class scheduler;
  explicit request_handle(std::shared_ptr<detail::request_state> s) : state_(std::move(s)) {}
  std::shared_ptr<detail::request_state> state_;
};

enum class submit_error { none, queue_full, invalid_request };

struct submit_result {
  request_handle handle;  // valid when ok()
  submit_error error = submit_error::none;
  std::string message;  // why not, naming the value
  bool ok() const { return error == submit_error::none; }
};

struct scheduler_config {
  size_t max_queue = 64;  // requests waiting for admission at most; submit() refuses more (queue_full)
  // Tokens of one prompt chunk: the decoder's n_batch (decoder_config::n_batch, at most n_ctx), or less.
  // The decoder does not report it, so it is given again here.
  int64_t n_batch = 512;
  // Prompt tokens per step (the first chunk of a step always goes), <= n_batch: a step holds n_batch +
  // n_seq_max rows. Smaller keeps decoding sequences' steps short while long prompts come in.
  int64_t prompt_budget = 512;
  int32_t n_vocab = 0;            // submit() checks prompt ids against it; 0: unchecked (the step fails)
  std::vector<int32_t> stop_ids;  // ids that end a generation with "stop" (eos, end of turn)
  // Ids that begin a message (<|im_start|>): prefix checkpoints go at their page-aligned positions.
  std::vector<int32_t> prefix_boundary_ids;
};

struct scheduler_metrics {
  int64_t requests_submitted = 0;  // accepted by submit()
  int64_t requests_rejected = 0;   // refused by submit(): queue full or invalid
  int64_t requests_finished = 0;   // ended with stop or length
  int64_t requests_cancelled = 0;
  int64_t requests_failed = 0;   // ended with an error
  int64_t tokens_prompt = 0;     // prompt tokens fed to the decoder
  int64_t tokens_generated = 0;  // ids drawn
  int64_t queue_length = 0;      // waiting for admission
  int64_t active_sequences = 0;
  int64_t kv_pages_used = 0, kv_pages_total = 0;
  int64_t steps = 0;                    // decoder steps run, failed ones included
  int64_t idle_waits = 0;               // times the run() loop went to sleep for lack of work
  int64_t sequences_lost = 0;           // slots retired because decoder::clear failed on them
  int64_t prefix_hits = 0;              // requests that started from a cached prefix checkpoint
  int64_t prefix_tokens_reused = 0;     // prompt tokens those requests did not compute
  int64_t prefix_checkpoints = 0;       // checkpoints taken
  int64_t prefix_evictions = 0;         // checkpoints dropped (slots or pages ran out)
  int64_t prefix_cached = 0;            // checkpoints held now
  int64_t prefix_pages = 0;             // KV pages they hold now (shared ones counted once)
  double tokens_per_second_recent = 0;  // tokens generated per second over the last ~10 s (metrics() computes it)
  // Routed experts in host memory (expert_slots >= 0: device slots per MoE layer; -1: all on the device):
  // the decoder's expert cache record summed over the MoE layers, refreshed after steps at most once a
  // second and whenever the scheduler runs out of work.
  int64_t expert_slots = -1;
  uint64_t expert_hits = 0, expert_misses = 0, expert_staged = 0, expert_host_bytes = 0, expert_promotions = 0;
};

class scheduler {
 public:
  scheduler();
  scheduler(const scheduler&) = delete;
  scheduler& operator=(const scheduler&) = delete;
  // Stops the thread; requests still waiting or running end with an error. The decoder must outlive it.
  ~scheduler();

  // Takes `d` (initialised, no sequence in use) for itself. Checks the configuration.
  status init(gen::decoder& d, const scheduler_config& cfg);

  // Any thread. Refuses an invalid request (the message names the problem) or one that finds the queue
  // full; neither callback is called then.
  submit_result submit(request r);

  // One iteration: cancellations, context-full endings, admissions, one decoder step, sampling, token
  // delivery and endings. Returns whether there was anything to do. Deterministic; one caller at a time
  // (calls are serialized), and not from a callback.
  bool step_once();

  // Starts the scheduling thread: step_once() in a loop, asleep while there is nothing to do.
  status run();
  // Ends the loop after its current iteration and joins the thread. Requests stay where they are.
  void stop();

  scheduler_metrics metrics() const;  // any thread

  // Drops every cached prefix checkpoint (their pages return to the pool). Not from a callback.
  void drop_prefixes();

 private:
  struct waiting {
    request req;
    std::shared_ptr<detail::request_state> state;
  };
  struct active {
    waiting w;
    int seq = -1;
    int64_t fed = 0;                                    // prompt tokens fed
    int64_t drawn = 0;                                  // ids drawn
    std::vector<int32_t> history;                       // prompt, then the drawn ids (the last one not yet fed)
    std::vector<int64_t> cuts;                          // its prompt's checkpoint positions, ascending
    std::vector<launch::token_logprobs> prompt_scores;  // request::prompt_logprobs: [prompt.size()]
  };
  struct cached_prefix {
    int id = -1;  // the decoder's checkpoint
    uint64_t last_used = 0;
  };

  int64_t pages_for(int64_t tokens) const;
  // Pages promised to `a` beyond those it holds: room for its prompt and one token, until it has them.
  int64_t promised(const active& a) const;
  // Ends active_[i] (frees its sequence, calls on_done) and removes it.
  void end(size_t i, outcome why, std::string error = {});
  static void notify_done(waiting& w, const finish_info& f);
  void loop();
  void publish();  // the step thread's view of pages and sequences into metrics_
  // ... its occupancy part (sequences, pages, queue, prefix cache); queue_m_ held
  void publish_occupancy();
  std::vector<int64_t> checkpoint_positions(const std::vector<int32_t>& prompt) const;
  // The index in prefixes_ of the longest checkpoint whose tokens are prompt[0, c) for a c in cuts; -1.
  int find_prefix(const std::vector<int32_t>& prompt, const std::vector<int64_t>& cuts, int64_t min_len = 1) const;
  // Drops the least recently used checkpoint but `keep` (a decoder id); false when there is none.
  bool evict_prefix(int keep = -1);
  // After a step: checkpoints `a` if it stands at one of its cuts.
  void checkpoint(const active& a);

  gen::decoder* d_ = nullptr;
  scheduler_config cfg_;
  std::shared_ptr<detail::wake_signal> wake_;

  mutable std::mutex queue_m_;  // guards queue_, metrics_, next_id_
  std::deque<waiting> queue_;
  scheduler_metrics metrics_;
  // (time, tokens generated) after steps, the last ~10 s and one sample before (tokens_per_second_recent)
  std::deque<std::pair<std::chrono::steady_clock::time_point, int64_t>> rate_samples_;
  uint64_t next_id_ = 1;

  std::mutex step_m_;           // serializes step_once; guards what follows
  std::vector<active> active_;  // in admission order
  std::vector<int> free_seqs_;
  std::vector<cached_prefix> prefixes_;
  uint64_t tick_ = 0;                // for least-recently-used order
  scheduler_metrics prefix_counts_;  // the step thread's prefix_* counters, published to metrics_
  std::chrono::steady_clock::time_point expert_read_at_{};  // the step thread's last expert_cache() read
  int64_t expert_read_steps_ = -1;                          // metrics_.steps then
  std::thread thread_;
};

}  // namespace q35::server
