// server::scheduler on the tiny fixtures (sim): requests batched by the scheduler draw the same ids as
// each request fed to the decoder alone by hand; the queue bound, the request checks, cancellation
// (waiting, mid-prompt, mid-generation) giving back every page and slot; max_tokens, stop ids and a full
// context ending requests with the right counts; a failed step; the threaded loop under concurrent submits.
#include <doctest/doctest.h>

#include "test_scheduler_util.hpp"

namespace {

using namespace q35;
using namespace q35::scheduler_test;

void check_batched_equals_alone(const char* gguf) {
  CAPTURE(gguf);
  const auto l = load_model(gguf);
  const int64_t n_batch = 8;
  gen::decoder d;
  Q35_OK(d.init(l->model, decoder_config(256, 4, n_batch)));
  const int64_t pages0 = d.pages_free();
  // one token, a few, more than a chunk (5 chunks), exactly a chunk; more requests than sequences
  const size_t lengths[] = {7, 1, 37, 3, 8, 12};
  const int64_t max_tokens[] = {5, 4, 3, 6, 4, 5};
  const int n = 6;
  // log-probabilities: none, the drawn id's alone, and with the 3 most likely
  const int top_logprobs[] = {-1, 0, 3, -1, 3, 0};
  std::vector<std::vector<int32_t>> prompts, truth;
  std::vector<std::vector<launch::token_logprobs>> truth_logprobs(n);
  int64_t steps_alone = 0, prompt_total = 0, gen_total = 0;
  for (int i = 0; i < n; ++i) {
    prompts.push_back(random_prompt(lengths[i], n_vocab(*l), 11 + uint32_t(i)));
    truth.push_back(
        alone(d, n_batch, prompts.back(), sampling(i), max_tokens[i], -1, top_logprobs[i], &truth_logprobs[size_t(i)]));
    steps_alone += (int64_t(lengths[i]) + n_batch - 1) / n_batch + max_tokens[i] - 1;
    prompt_total += int64_t(lengths[i]), gen_total += max_tokens[i];
  }
  server::scheduler s;
  Q35_OK(s.init(d, scheduler_config(n_batch, n_vocab(*l))));
  std::vector<received> got(n);
  // when a request hears of its end, the metrics already count it out: finished + active + queued
  // requests = submitted (a server's client reading /metrics after its response sees no stale sequence)
  int inconsistent = 0;
  const auto consistent = [&] {
    const server::scheduler_metrics m = s.metrics();
    inconsistent += m.requests_finished + m.active_sequences + m.queue_length != m.requests_submitted;
  };
  for (int i = 0; i < n; ++i) {
    server::request q = make_request(prompts[size_t(i)], sampling(i), max_tokens[i], got[size_t(i)], consistent);
    q.top_logprobs = top_logprobs[i];
    submit_ok(s, std::move(q));
  }
  CHECK(s.metrics().queue_length == n);
  int64_t most_active = 0;
  while (s.step_once()) most_active = std::max(most_active, s.metrics().active_sequences);
  for (int i = 0; i < n; ++i) {
    CAPTURE(i);
    const received& r = got[size_t(i)];
    CHECK(r.ids == truth[size_t(i)]);
    // batch invariance carries over: the same logits rows give the same log-probabilities, bit for bit
    REQUIRE(r.logprobs.size() == truth_logprobs[size_t(i)].size());
    CHECK(r.logprobs.size() == (top_logprobs[i] >= 0 ? r.ids.size() : 0));
    for (size_t t = 0; t < r.logprobs.size(); ++t) {
      CHECK(same_logprobs(r.logprobs[t], truth_logprobs[size_t(i)][t]));
      CHECK(r.logprobs[t].n_top == top_logprobs[i]);
    }
    CHECK(r.n_done == 1);
    CHECK(r.fin.reason == outcome::length);
    CHECK(r.fin.prompt_tokens == int64_t(lengths[i]));
    CHECK(r.fin.completion_tokens == max_tokens[i]);
  }
  CHECK(inconsistent == 0);
  const server::scheduler_metrics m = s.metrics();
  CHECK(most_active == 4);  // every sequence in use at once
  CAPTURE(steps_alone);
  CHECK(m.steps < steps_alone / 2);  // and steps shared
  CHECK(m.requests_submitted == n);
  CHECK(m.requests_finished == n);
  CHECK(m.tokens_prompt == prompt_total);
  CHECK(m.tokens_generated == gen_total);
  CHECK(m.queue_length == 0);
  CHECK(m.active_sequences == 0);
  CHECK(m.kv_pages_used == 0);
  CHECK(m.kv_pages_total == d.pages_total());
  CHECK(d.pages_free() == pages0);
}

}  // namespace

TEST_CASE("scheduler: requests batched through step_once draw the same ids as each alone") {
  for (const char* gguf : test::q4km_fixtures) check_batched_equals_alone(gguf);
}

TEST_CASE("scheduler: a long prompt comes in chunks within the budget while a decoding sequence keeps going") {
  const auto l = load_model("tiny_dense_q4km.gguf");
  const int64_t n_batch = 8;
  gen::decoder d;
  Q35_OK(d.init(l->model, decoder_config(256, 3, n_batch)));
  const std::vector<int32_t> pa = random_prompt(3, n_vocab(*l), 21), pb = random_prompt(40, n_vocab(*l), 22),
                             pc = random_prompt(7, n_vocab(*l), 23);
  const std::vector<int32_t> ta = alone(d, n_batch, pa, sampling(1), 12), tb = alone(d, n_batch, pb, sampling(2), 3),
                             tc = alone(d, n_batch, pc, sampling(3), 3);
  server::scheduler s;
  Q35_OK(s.init(d, scheduler_config(n_batch, n_vocab(*l))));
  received a, b, c;
  submit_ok(s, make_request(pa, sampling(1), 12, a));
  CHECK(s.step_once());
  CHECK(a.ids.size() == 1);
  submit_ok(s, make_request(pb, sampling(2), 3, b));
  submit_ok(s, make_request(pc, sampling(3), 3, c));
  // sequences in admission order: a 0, b 1, c 2. b's 40 tokens go 8 a step (the budget), c's 7 wait
  // behind them, and a draws one id every step all along.
  for (int k = 1; k <= 5; ++k) {
    CAPTURE(k);
    const int64_t fed = s.metrics().tokens_prompt;
    CHECK(s.step_once());
    CHECK(s.metrics().tokens_prompt - fed == 8);
    CHECK(a.ids.size() == size_t(1 + k));
    CHECK(d.n_past(1) == 8 * k);
    CHECK(d.n_past(2) == 0);
  }
  CHECK(b.ids.size() == 1);  // its prompt complete, its first id drawn
  CHECK(s.step_once());
  CHECK(d.n_past(2) == 7);
  CHECK(a.ids.size() == 7);
  drain(s);
  CHECK(a.ids == ta);
  CHECK(b.ids == tb);
  CHECK(c.ids == tc);
}

TEST_CASE("scheduler: the queue bound refuses, then accepts once admission makes room; bad requests are named") {
  const auto l = load_model("tiny_dense_q4km.gguf");
  gen::decoder d;
  Q35_OK(d.init(l->model, decoder_config(256, 1, 8)));
  server::scheduler s;
  Q35_OK(s.init(d, scheduler_config(8, n_vocab(*l), 2)));
  std::vector<received> got(3);
  const launch::sampling_params greedy = sampling(0);
  submit_ok(s, make_request({1, 2, 3}, greedy, 2, got[0]));
  submit_ok(s, make_request({4, 5}, greedy, 2, got[1]));
  server::submit_result full = s.submit(make_request({6, 7}, greedy, 2, got[2]));
  CHECK(!full.ok());
  CHECK(full.error == server::submit_error::queue_full);
  CHECK(full.message == "the queue is full (2 requests waiting)");
  CHECK(!full.handle.valid());
  CHECK(s.metrics().requests_rejected == 1);
  CHECK(s.metrics().queue_length == 2);
  CHECK(s.step_once());  // the first request takes the one sequence: one place in the queue frees
  CHECK(s.metrics().queue_length == 1);
  CHECK(s.metrics().active_sequences == 1);
  submit_ok(s, make_request({6, 7}, greedy, 2, got[2]));
  drain(s);
  for (const received& r : got) {
    CHECK(r.n_done == 1);
    CHECK(r.fin.reason == outcome::length);
    CHECK(r.ids.size() == 2);
  }

  const auto refused = [&](server::request q, const std::string& what) {
    const server::submit_result res = s.submit(std::move(q));
    CAPTURE(res.message);
    CHECK(res.error == server::submit_error::invalid_request);
    CHECK(res.message.find(what) != std::string::npos);
  };
  received unused;
  refused(make_request({}, greedy, 2, unused), "the prompt is empty");
  refused(make_request({1}, greedy, -1, unused), "max_tokens = -1 is below 0");
  refused(make_request({1, n_vocab(*l)}, greedy, 2, unused),
          "prompt token " + std::to_string(n_vocab(*l)) + " at position 1 is outside the vocabulary");
  refused(make_request(std::vector<int32_t>(257, 1), greedy, 2, unused),
          "prompt of 257 tokens exceeds the context of 256 tokens");
  launch::sampling_params bad = greedy;
  bad.top_p = 0.0f;
  refused(make_request({1}, bad, 2, unused), "top_p = 0.000000 is outside (0, 1]");
  server::request biased = make_request({1}, greedy, 2, unused);
  biased.logit_bias = {{3, 1.0f}, {n_vocab(*l), 1.0f}};
  refused(biased, "logit_bias: token " + std::to_string(n_vocab(*l)) + " is outside the vocabulary of " +
                      std::to_string(n_vocab(*l)));
  biased.logit_bias = {{-1, 1.0f}};
  refused(biased, "logit_bias: token -1 is outside");
  biased.logit_bias = {{2, NAN}};
  refused(biased, "logit_bias: token 2 has a NaN bias");
  biased.logit_bias.assign(1025, {2, 1.0f});
  refused(biased, "logit_bias: 1025 tokens, at most 1024");
  server::request asking = make_request({1}, greedy, 2, unused);
  asking.top_logprobs = 21;
  refused(asking, "top_logprobs = 21 is outside -1..20");
  CHECK(unused.n_done == 0);  // a refused request hears nothing

  // the configuration
  const auto init_refused = [&](const server::scheduler_config& c, const std::string& what) {
    server::scheduler t;
    const status st = t.init(d, c);
    CAPTURE(st.to_string());
    CHECK(st.message().find(what) != std::string::npos);
  };
  server::scheduler_config c = scheduler_config(8, n_vocab(*l));
  c.prompt_budget = 9;
  init_refused(c, "prompt_budget = 9 is outside 1..n_batch (8)");
  c = scheduler_config(300, n_vocab(*l));
  init_refused(c, "n_batch = 300 is outside 1..n_ctx (256)");
  c = scheduler_config(8, n_vocab(*l), 0);
  init_refused(c, "max_queue = 0");
  Q35_OK(d.eval(std::vector<int32_t>{1, 2}));
  init_refused(scheduler_config(8, n_vocab(*l)), "sequence 0 of the decoder holds 2 tokens");
  Q35_OK(d.clear(0));
  CHECK(s.metrics().requests_rejected == 11);
  CHECK(s.metrics().requests_submitted == 3);
}

TEST_CASE("scheduler: cancellation waiting, mid-prompt and mid-generation gives back pages and the slot") {
  const auto l = load_model("tiny_dense_q4km.gguf");
  const int64_t n_batch = 8;
  gen::decoder d;
  Q35_OK(d.init(l->model, decoder_config(256, 1, n_batch)));
  const int64_t pages0 = d.pages_free();
  const launch::sampling_params p = sampling(1);
  const std::vector<int32_t> pa = random_prompt(40, n_vocab(*l), 1), pb = random_prompt(6, n_vocab(*l), 2);
  const std::vector<int32_t> truth_b = alone(d, n_batch, pb, p, 4);
  server::scheduler s;
  Q35_OK(s.init(d, scheduler_config(n_batch, n_vocab(*l))));

  // mid-prompt: a takes the only sequence; b waits for it
  received a, b;
  const server::request_handle ha = submit_ok(s, make_request(pa, p, 20, a));
  submit_ok(s, make_request(pb, p, 4, b));
  CHECK(s.step_once());  // a's first chunk of 8
  CHECK(d.n_past(0) == 8);
  CHECK(d.pages_free() < pages0);
  ha.cancel();
  CHECK(a.n_done == 0);  // at the next boundary, not in cancel()
  CHECK(s.step_once());
  CHECK(a.n_done == 1);
  CHECK(a.fin.reason == outcome::cancelled);
  CHECK(a.fin.completion_tokens == 0);
  CHECK(a.ids.empty());
  drain(s);  // b in a's sequence: the same ids as alone, so nothing of a remained
  CHECK(b.ids == truth_b);
  CHECK(b.fin.reason == outcome::length);
  CHECK(d.pages_free() == pages0);

  // mid-generation
  received c;
  const server::request_handle hc = submit_ok(s, make_request(pb, p, 50, c));
  while (c.ids.size() < 3) REQUIRE(s.step_once());
  hc.cancel();
  CHECK(s.step_once());
  CHECK(c.n_done == 1);
  CHECK(c.fin.reason == outcome::cancelled);
  CHECK(c.fin.completion_tokens == 3);
  CHECK(std::equal(c.ids.begin(), c.ids.end(), truth_b.begin()));
  CHECK(d.pages_free() == pages0);
  CHECK(d.n_past(0) == 0);
  CHECK(!s.step_once());  // nothing left

  // waiting: never admitted; a cancel after the end changes nothing
  received e, f;
  const server::request_handle he = submit_ok(s, make_request(pb, p, 2, e));
  const server::request_handle hf = submit_ok(s, make_request(pb, p, 2, f));
  CHECK(hf.id() != he.id());
  hf.cancel();
  drain(s);
  CHECK(f.n_done == 1);
  CHECK(f.fin.reason == outcome::cancelled);
  CHECK(f.ids.empty());
  CHECK(e.fin.reason == outcome::length);
  CHECK(e.ids == std::vector<int32_t>(truth_b.begin(), truth_b.begin() + 2));
  he.cancel();
  CHECK(!s.step_once());
  CHECK(e.n_done == 1);
  CHECK(e.fin.reason == outcome::length);
  const server::scheduler_metrics m = s.metrics();
  CHECK(m.requests_cancelled == 3);
  CHECK(m.requests_finished == 2);
  CHECK(m.kv_pages_used == 0);
  CHECK(d.pages_free() == pages0);
}

TEST_CASE("scheduler: max_tokens, a stop id and a prompt filling the context end with the right counts") {
  const auto l = load_model("tiny_interleaved_q4km.gguf");
  const int64_t n_batch = 8;
  gen::decoder d;
  Q35_OK(d.init(l->model, decoder_config(64, 2, n_batch)));
  const launch::sampling_params greedy = sampling(0);
  const std::vector<int32_t> prompt = random_prompt(9, n_vocab(*l), 3);
  const std::vector<int32_t> truth = alone(d, n_batch, prompt, greedy, 6);
  // the stop id: the third id drawn, which ends the request at its first appearance
  const int32_t stop_id = truth[2];
  const int64_t n_stop = int64_t(std::find(truth.begin(), truth.end(), stop_id) - truth.begin()) + 1;

  received by_length, by_stop, whole;
  {
    server::scheduler plain;
    Q35_OK(plain.init(d, scheduler_config(n_batch, n_vocab(*l))));
    submit_ok(plain, make_request(prompt, greedy, 2, by_length));
    drain(plain);
  }
  server::scheduler_config sc = scheduler_config(n_batch, n_vocab(*l));
  sc.stop_ids = {stop_id};
  server::scheduler s;
  Q35_OK(s.init(d, sc));
  submit_ok(s, make_request(prompt, greedy, 6, by_stop));
  drain(s);
  CHECK(by_length.fin.reason == outcome::length);
  CHECK(by_length.fin.completion_tokens == 2);
  CHECK(by_length.ids == std::vector<int32_t>(truth.begin(), truth.begin() + 2));
  CHECK(by_stop.fin.reason == outcome::stop);
  CHECK(by_stop.fin.completion_tokens == n_stop);                                         // the stop id counts ...
  CHECK(by_stop.ids == std::vector<int32_t>(truth.begin(), truth.begin() + n_stop - 1));  // ... unseen
  // ignore_eos: the stop id is never drawn, so the request runs to max_tokens; up to the stop it follows
  // the same ids
  received ignoring;
  server::request q = make_request(prompt, greedy, 6, ignoring);
  q.ignore_eos = true;
  submit_ok(s, std::move(q));
  drain(s);
  CHECK(ignoring.fin.reason == outcome::length);
  CHECK(ignoring.fin.completion_tokens == 6);
  CHECK(ignoring.ids.size() == 6);
  CHECK(std::find(ignoring.ids.begin(), ignoring.ids.end(), stop_id) == ignoring.ids.end());
  CHECK(std::vector<int32_t>(ignoring.ids.begin(), ignoring.ids.begin() + n_stop - 1) ==
        std::vector<int32_t>(truth.begin(), truth.begin() + n_stop - 1));

  // a prompt of the whole context: its pages are all the pool's; one id, then no room for it
  const std::vector<int32_t> full = random_prompt(64, n_vocab(*l), 4);
  const std::vector<int32_t> truth_full = alone(d, n_batch, full, greedy, 5);
  REQUIRE(truth_full.size() == 1);
  submit_ok(s, make_request(full, greedy, 5, whole));
  drain(s);
  CHECK(whole.fin.reason == outcome::length);
  CHECK(whole.fin.completion_tokens == 1);
  CHECK(whole.ids == truth_full);
  CHECK(d.pages_free() == d.pages_total());
}

TEST_CASE("scheduler: a full context or pool ends a sequence with length and frees its pages") {
  const auto l = load_model("tiny_dense_q4km.gguf");
  const int64_t n_batch = 8, n_ctx = 32;  // 2 pages of 16 tokens, shared by 2 sequences
  gen::decoder d;
  Q35_OK(d.init(l->model, decoder_config(n_ctx, 2, n_batch)));
  REQUIRE(d.page_tokens() == 16);
  REQUIRE(d.pages_total() == 2);
  const launch::sampling_params greedy = sampling(0);
  const std::vector<int32_t> pa = random_prompt(4, n_vocab(*l), 5), pb = random_prompt(4, n_vocab(*l), 6);
  // alone, a runs to the end of the context: 32 - 4 tokens fed after the prompt, and one more drawn
  const std::vector<int32_t> truth_a = alone(d, n_batch, pa, greedy, 1000);
  const std::vector<int32_t> truth_b = alone(d, n_batch, pb, greedy, 13);
  REQUIRE(truth_a.size() == 29);

  server::scheduler s;
  Q35_OK(s.init(d, scheduler_config(n_batch, n_vocab(*l))));
  received a, b;
  submit_ok(s, make_request(pa, greedy, 1000, a));
  submit_ok(s, make_request(pb, greedy, 1000, b));
  CHECK(s.step_once());  // both prompts in one step (4 + 4 tokens within the budget), a page each
  CHECK(s.metrics().active_sequences == 2);
  CHECK(s.metrics().kv_pages_used == 2);
  drain(s);
  // at 16 tokens both need a second page and none is free: the newer (b) gives way, after 16 - 4 fed
  // tokens and one more drawn; its page lets a go on to the end of the context
  CHECK(b.fin.reason == outcome::length);
  CHECK(b.fin.completion_tokens == 13);
  CHECK(b.ids == truth_b);
  CHECK(a.fin.reason == outcome::length);
  CHECK(a.fin.completion_tokens == 29);
  CHECK(a.ids == truth_a);
  CHECK(d.pages_free() == 2);
  CHECK(s.metrics().kv_pages_used == 0);
  CHECK(s.metrics().requests_finished == 2);
}

TEST_CASE("scheduler: a failed step fails its requests, frees their sequences, and serving goes on") {
  const auto l = load_model("tiny_dense_q4km.gguf");
  gen::decoder d;
  Q35_OK(d.init(l->model, decoder_config(256, 2, 8)));
  server::scheduler s;
  Q35_OK(s.init(d, scheduler_config(8, 0)));  // ids unchecked at submit: the decoder refuses the step
  const launch::sampling_params greedy = sampling(0);
  received bad, good;
  submit_ok(s, make_request({1, 2, n_vocab(*l) + 5}, greedy, 3, bad));
  drain(s);
  CHECK(bad.fin.reason == outcome::error);
  CHECK(bad.fin.error.find("token id " + std::to_string(n_vocab(*l) + 5) + " at position 2 is outside") !=
        std::string::npos);
  CHECK(d.pages_free() == d.pages_total());
  submit_ok(s, make_request({1, 2, 3}, greedy, 3, good));
  drain(s);
  CHECK(good.fin.reason == outcome::length);
  CHECK(good.ids.size() == 3);
  CHECK(s.metrics().requests_failed == 1);
  CHECK(s.metrics().requests_finished == 1);

  // a sink that throws fails its own request only
  received thrower, bystander;
  server::request q = make_request({4, 5}, greedy, 3, thrower);
  q.on_token = [](int32_t, const launch::token_logprobs*) { throw std::runtime_error("client gone"); };
  submit_ok(s, std::move(q));
  submit_ok(s, make_request({1, 2, 3}, greedy, 3, bystander));
  drain(s);
  CHECK(thrower.fin.reason == outcome::error);
  CHECK(thrower.fin.error == "on_token threw: client gone");
  CHECK(thrower.fin.completion_tokens == 1);
  CHECK(bystander.ids == good.ids);
  CHECK(d.pages_free() == d.pages_total());
}

TEST_CASE("scheduler: run() serves requests submitted from several threads; idle sleeps; stop() joins") {
  const auto l = load_model("tiny_dense_q4km.gguf");
  const int64_t n_batch = 8;
  gen::decoder d;
  Q35_OK(d.init(l->model, decoder_config(256, 4, n_batch)));
  const int n_threads = 4, per_thread = 2, n = n_threads * per_thread;
  std::vector<std::vector<int32_t>> prompts, truth;
  for (int i = 0; i < n; ++i) {
    prompts.push_back(random_prompt(size_t(2 + 3 * i), n_vocab(*l), 40 + uint32_t(i)));
    truth.push_back(alone(d, n_batch, prompts.back(), sampling(i), 3));
  }
  server::scheduler s;
  Q35_OK(s.init(d, scheduler_config(n_batch, n_vocab(*l))));
  Q35_OK(s.run());
  CHECK(!s.run().ok());  // one loop at a time

  std::mutex m;
  std::condition_variable cv;
  int n_done = 0;
  const auto count_done = [&] {
    std::lock_guard<std::mutex> lk(m);
    ++n_done;
    cv.notify_all();
  };
  std::vector<received> got(n);
  std::vector<std::thread> clients;
  for (int t = 0; t < n_threads; ++t)
    clients.emplace_back([&, t] {
      for (int k = 0; k < per_thread; ++k) {
        const int i = t * per_thread + k;
        const server::submit_result r =
            s.submit(make_request(prompts[size_t(i)], sampling(i), 3, got[size_t(i)], count_done));
        CHECK(r.ok());  // doctest's assertions are thread-safe
      }
    });
  for (std::thread& c : clients) c.join();
  {
    std::unique_lock<std::mutex> lk(m);
    REQUIRE(cv.wait_for(lk, std::chrono::seconds(120), [&] { return n_done == n; }));
  }
  for (int i = 0; i < n; ++i) {
    CAPTURE(i);
    std::lock_guard<std::mutex> lk(got[size_t(i)].m);
    CHECK(got[size_t(i)].ids == truth[size_t(i)]);
    CHECK(got[size_t(i)].fin.reason == outcome::length);
    CHECK(got[size_t(i)].token_thread != std::this_thread::get_id());
  }
  // idle: the loop sleeps instead of spinning
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  const server::scheduler_metrics idle = s.metrics();
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  CHECK(s.metrics().idle_waits == idle.idle_waits);
  CHECK(s.metrics().steps == idle.steps);
  CHECK(idle.requests_finished == n);
  CHECK(idle.active_sequences == 0);
  s.stop();
  // stopped: a request waits; run() again serves it
  received late;
  bool late_done = false;
  submit_ok(s, make_request({1, 2}, sampling(0), 2, late, [&] {
              std::lock_guard<std::mutex> lk(m);
              late_done = true;
              cv.notify_all();
            }));
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  CHECK(s.metrics().queue_length == 1);
  Q35_OK(s.run());
  {
    std::unique_lock<std::mutex> lk(m);
    REQUIRE(cv.wait_for(lk, std::chrono::seconds(60), [&] { return late_done; }));
  }
  s.stop();
  s.stop();  // twice is harmless
  CHECK(d.pages_free() == d.pages_total());
}
