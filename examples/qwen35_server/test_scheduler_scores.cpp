// server::scheduler's prompt log-probabilities (request::prompt_logprobs, a completion's echo with
// logprobs) on the tiny fixtures (sim): the answers equal decoder::eval_scored of the prompt alone, bit for
// bit, among other requests; generation after a scored prompt is unchanged; max_tokens 0 ends after the
// prompt; a scored request never starts from a cached prefix; the refusals.
#include <doctest/doctest.h>

#include "test_scheduler_util.hpp"

namespace {

using namespace q35;
using namespace q35::scheduler_test;

struct scored {
  std::vector<launch::token_logprobs> answers;
  int calls = 0;
};

server::request scored_request(std::vector<int32_t> prompt, const launch::sampling_params& p, int64_t max_tokens,
                               received& r, int top_n, scored& sc) {
  server::request q = make_request(std::move(prompt), p, max_tokens, r);
  q.prompt_logprobs = top_n;
  q.on_prompt = [&sc, &r](const std::vector<launch::token_logprobs>& a) {
    std::lock_guard<std::mutex> lk(r.m);
    CHECK(r.ids.empty());  // before the first token
    sc.answers = a;
    ++sc.calls;
  };
  return q;
}

// The truth: eval_scored of the prompt on sequence 0 of a fresh decoder (chunks of n_batch), answer i
// for prompt[i] (the first has none).
std::vector<launch::token_logprobs> truth(gen::decoder& d, const std::vector<int32_t>& prompt, int top_n) {
  Q35_OK(d.clear(0));
  std::vector<launch::token_logprobs> rows;
  Q35_OK(d.eval_scored(prompt, top_n, -1, rows));
  REQUIRE(rows.size() == prompt.size());
  std::vector<launch::token_logprobs> out(prompt.size());
  for (size_t i = 1; i < prompt.size(); ++i) out[i] = rows[i - 1];
  Q35_OK(d.clear(0));
  return out;
}

void check_same(const std::vector<launch::token_logprobs>& got, const std::vector<launch::token_logprobs>& want,
                const std::vector<int32_t>& prompt) {
  REQUIRE(got.size() == want.size());
  CHECK(got[0].id == -1);
  for (size_t i = 1; i < got.size(); ++i) {
    CAPTURE(i);
    CHECK(got[i].id == prompt[i]);
    CHECK(same_logprobs(got[i], want[i]));
  }
}

TEST_CASE("scheduler: prompt log-probabilities among other requests equal the prompt scored alone") {
  for (const char* gguf : {"tiny_dense_q4km.gguf", "tiny_interleaved_q4km.gguf"}) {
    CAPTURE(gguf);
    const auto l = load_model(gguf);
    const int64_t n_batch = 8;
    gen::decoder_config c = decoder_config(256, 3, n_batch);
    c.score_rows = 5;
    gen::decoder d, ref;
    Q35_OK(d.init(l->model, c));
    Q35_OK(ref.init(l->model, c));
    const int64_t pages0 = d.pages_free();
    const auto a = random_prompt(21, n_vocab(*l), 71), b = random_prompt(12, n_vocab(*l), 72),
               e = random_prompt(5, n_vocab(*l), 73);
    const auto want_a = truth(ref, a, 3), want_e = truth(ref, e, 0);
    const auto ids_a = alone(ref, n_batch, a, sampling(0), 2), ids_b = alone(ref, n_batch, b, sampling(1), 3);
    server::scheduler s;
    Q35_OK(s.init(d, scheduler_config(n_batch, n_vocab(*l))));
    received ra, rb, re;
    scored sa, se;
    submit_ok(s, scored_request(a, sampling(0), 2, ra, 3, sa));
    submit_ok(s, make_request(b, sampling(1), 3, rb));
    submit_ok(s, scored_request(e, sampling(2), 0, re, 0, se));  // the prompt only
    drain(s);
    REQUIRE(sa.calls == 1);
    REQUIRE(se.calls == 1);
    check_same(sa.answers, want_a, a);
    check_same(se.answers, want_e, e);
    CHECK(ra.ids == ids_a);  // scoring changes nothing of what follows
    CHECK(rb.ids == ids_b);
    CHECK(re.ids.empty());
    CHECK(re.n_done == 1);
    CHECK(re.fin.reason == outcome::length);
    CHECK(re.fin.completion_tokens == 0);
    CHECK(re.fin.prompt_tokens == 5);
    CHECK(d.pages_free() == pages0);
    CHECK(s.metrics().active_sequences == 0);
  }
}

TEST_CASE("scheduler: a scored request does not start from a cached prefix, and answers as on a fresh server") {
  const auto l = load_model("tiny_dense_q4km.gguf");
  const int32_t nv = n_vocab(*l);
  auto prompt = random_prompt(40, nv, 81);
  for (int32_t& t : prompt)
    if (t == 3) t = 4;
  prompt[0] = 3, prompt[20] = 3;  // message boundaries: checkpoints at 16 and 32
  auto make = [&](gen::decoder& d, server::scheduler& s) {
    gen::decoder_config c = decoder_config(256, 2, 8);
    c.n_prefix_slots = 4, c.score_rows = 3;
    Q35_OK(d.init(l->model, c));
    server::scheduler_config sc = scheduler_config(8, nv);
    sc.prefix_boundary_ids = {3};
    Q35_OK(s.init(d, sc));
  };
  scored fresh, warm;
  {
    gen::decoder d;
    server::scheduler s;
    make(d, s);
    received r;
    submit_ok(s, scored_request(prompt, sampling(0), 1, r, 2, fresh));
    drain(s);
  }
  gen::decoder d;
  server::scheduler s;
  make(d, s);
  received r0, r1;
  submit_ok(s, make_request(prompt, sampling(0), 1, r0));  // caches checkpoints of the prompt
  drain(s);
  REQUIRE(s.metrics().prefix_cached > 0);
  const int64_t hits = s.metrics().prefix_hits;
  submit_ok(s, scored_request(prompt, sampling(0), 1, r1, 2, warm));
  drain(s);
  CHECK(s.metrics().prefix_hits == hits);
  REQUIRE(warm.calls == 1);
  check_same(warm.answers, fresh.answers, prompt);
  CHECK(r1.ids == r0.ids);
}

TEST_CASE("scheduler: prompt log-probability refusals name the value") {
  const auto l = load_model("tiny_dense_q4km.gguf");
  gen::decoder d, off;
  gen::decoder_config c = decoder_config(64, 1, 8);
  Q35_OK(off.init(l->model, c));
  c.score_rows = 4;
  Q35_OK(d.init(l->model, c));
  const auto refused = [&](gen::decoder& dec, server::request q, const std::string& what) {
    server::scheduler s;
    Q35_OK(s.init(dec, scheduler_config(8, n_vocab(*l))));
    const server::submit_result r = s.submit(std::move(q));
    CHECK(!r.ok());
    CHECK(r.message.find(what) != std::string::npos);
  };
  received r;
  scored sc;
  const std::vector<int32_t> p{1, 2, 3};
  refused(off, scored_request(p, sampling(0), 1, r, 0, sc), "prompt log-probabilities are off");
  refused(d, scored_request(p, sampling(0), 1, r, 21, sc), "prompt_logprobs = 21 is outside -1..20");
  refused(d, scored_request(p, sampling(0), -1, r, 0, sc), "max_tokens = -1 is below 0");
  CHECK(sc.calls == 0);
}

}  // namespace
