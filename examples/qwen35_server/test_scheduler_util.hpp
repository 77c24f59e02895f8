// Helpers of the scheduler tests (test_scheduler.cpp, test_scheduler_prefix.cpp): configurations,
// prompts and sampling parameters, the truth a request is held to (its prompt fed to the decoder alone
// by hand), and what a request received through its callbacks.
#pragma once

#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "decoder.hpp"
#include "scheduler.hpp"
#include "test_model.hpp"

namespace q35::scheduler_test {

using server::outcome;
using test::load_model;

inline int32_t n_vocab(const test::loaded_model& l) { return int32_t(l.model.hparams().n_vocab); }

inline gen::decoder_config decoder_config(int64_t n_ctx, int n_seq_max, int64_t n_batch) {
  gen::decoder_config c;
  c.n_ctx = n_ctx, c.n_seq_max = n_seq_max, c.n_batch = n_batch;
  c.batch_invariant = true;  // a request's ids do not depend on its company
  return c;
}

inline server::scheduler_config scheduler_config(int64_t n_batch, int32_t n_vocab, size_t max_queue = 64) {
  server::scheduler_config c;
  c.max_queue = max_queue, c.n_batch = n_batch, c.prompt_budget = n_batch, c.n_vocab = n_vocab;
  return c;
}

inline std::vector<int32_t> random_prompt(size_t n, int32_t n_vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> tok(0, n_vocab - 1);
  std::vector<int32_t> p(n);
  for (int32_t& t : p) t = tok(rng);
  return p;
}

inline launch::sampling_params sampling(int i) {
  launch::sampling_params p;
  p.temperature = i % 2 == 0 ? 0.0f : 0.9f;  // greedy, or seeded sampling
  p.top_k = i % 3 == 0 ? 0 : 20;
  p.top_p = 0.95f, p.min_p = 0.02f;
  p.repeat_penalty = i % 4 == 1 ? 1.1f : 1.0f;
  p.repeat_last_n = 16;
  p.seed = 500 + uint64_t(i);
  return p;
}

// The truth a request is held to: its prompt fed to sequence 0 of the decoder by hand, in chunks of
// n_batch tokens, then draw, feed, draw ... up to max_tokens ids or a stop id (included), or the context.
// With top_logprobs >= 0, `logprobs` receives each draw's log-probabilities.
inline std::vector<int32_t> alone(gen::decoder& d, int64_t n_batch, const std::vector<int32_t>& prompt,
                                  const launch::sampling_params& p, int64_t max_tokens, int32_t stop_id = -1,
                                  int top_logprobs = -1, std::vector<launch::token_logprobs>* logprobs = nullptr) {
  Q35_OK(d.clear(0));
  for (size_t i = 0; i < prompt.size(); i += size_t(n_batch)) {
    const size_t n = std::min(prompt.size() - i, size_t(n_batch));
    const gen::seq_input in{0, std::span<const int32_t>(prompt).subspan(i, n)};
    Q35_OK(d.step({&in, 1}));
  }
  std::vector<int32_t> history = prompt, out;
  for (;;) {
    const gen::seq_sample r{0, p, history, {}, top_logprobs};
    std::vector<int32_t> ids;
    std::vector<launch::token_logprobs> lps;
    Q35_OK(d.sample({&r, 1}, ids, logprobs ? &lps : nullptr));
    if (logprobs && top_logprobs >= 0) logprobs->push_back(lps[0]);
    out.push_back(ids[0]);
    history.push_back(ids[0]);
    if (int64_t(out.size()) >= max_tokens || ids[0] == stop_id || d.n_past(0) + 1 > d.n_ctx()) break;
    const gen::seq_input in{0, {&history.back(), 1}};
    Q35_OK(d.step({&in, 1}));
  }
  Q35_OK(d.clear(0));
  return out;
}

// Whether two answers agree bit for bit on what they hold (the lists' unused slots are undefined).
inline bool same_logprobs(const launch::token_logprobs& a, const launch::token_logprobs& b) {
  const auto bits = [](float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    return u;
  };
  if (a.id != b.id || bits(a.logprob) != bits(b.logprob) || a.n_top != b.n_top) return false;
  for (int k = 0; k < a.n_top; ++k)
    if (a.top_ids[k] != b.top_ids[k] || bits(a.top_logprobs[k]) != bits(b.top_logprobs[k])) return false;
  return true;
}

// What one request received. Callbacks come from the stepping thread: guarded for the threaded test.
struct received {
  std::mutex m;
  std::vector<int32_t> ids;
  std::vector<launch::token_logprobs> logprobs;  // with each id, when the request asked for them
  int n_done = 0;
  server::finish_info fin;
  std::thread::id token_thread;
};

inline server::request make_request(std::vector<int32_t> prompt, const launch::sampling_params& p, int64_t max_tokens,
                                    received& r, std::function<void()> after_done = {}) {
  server::request q;
  q.prompt = std::move(prompt), q.sampling = p, q.max_tokens = max_tokens;
  q.on_token = [&r](int32_t id, const launch::token_logprobs* lp) {
    std::lock_guard<std::mutex> lk(r.m);
    r.ids.push_back(id);
    if (lp) r.logprobs.push_back(*lp);
    r.token_thread = std::this_thread::get_id();
  };
  q.on_done = [&r, after_done](const server::finish_info& f) {
    {
      std::lock_guard<std::mutex> lk(r.m);
      ++r.n_done;
      r.fin = f;
    }
    if (after_done) after_done();
  };
  return q;
}

inline server::request_handle submit_ok(server::scheduler& s, server::request q) {
  server::submit_result r = s.submit(std::move(q));
  INFO(r.message);
  REQUIRE(r.ok());
  REQUIRE(r.handle.valid());
  return r.handle;
}

// step_once until idle; returns the iterations that did work
inline int drain(server::scheduler& s) {
  int n = 0;
  while (s.step_once()) REQUIRE(++n < 10000);
  return n;
}

}  // namespace q35::scheduler_test
