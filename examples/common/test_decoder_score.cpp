// Scoring (seq_input::score, decoder::eval_scored): each row's log-probability of the token after it,
// computed on the device in slices of score_rows LM-head rows. Against llama.cpp's logits of every
// prompt row of the fixtures (a float64 log-softmax of its rows); against the decoder's own rows of the
// same step; scoring leaves the step's logits and the sequence's continuation as they were; refusals.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "decoder.hpp"
#include "io/ref_cases.hpp"
#include "test_model.hpp"

namespace {

using namespace q35;

const std::string data_dir = Q35_TEST_DATA_DIR;

using test::read_f32;

// float64 log-softmax of one row
std::vector<double> log_softmax(const float* row, size_t n) {
  double m = -INFINITY;
  for (size_t i = 0; i < n; ++i) m = std::max(m, double(row[i]));
  double sum = 0;
  for (size_t i = 0; i < n; ++i) sum += std::exp(double(row[i]) - m);
  std::vector<double> out(n);
  for (size_t i = 0; i < n; ++i) out[i] = double(row[i]) - m - std::log(sum);
  return out;
}

// One answer against the float64 log-softmax `want` of its row: the id's log-probability, and a top list
// whose i-th entry is (within `tol`) as likely as the i-th most likely id and carries its log-probability.
// Returns the largest difference seen.
double check_answer(const launch::token_logprobs& a, int32_t id, const std::vector<double>& want, int top_n,
                    double tol) {
  CHECK(a.id == id);
  if (a.id != id) return INFINITY;
  double worst = std::abs(double(a.logprob) - want[size_t(id)]);
  CHECK(worst <= tol);
  std::vector<double> sorted = want;
  std::sort(sorted.begin(), sorted.end(), std::greater<>());
  REQUIRE(a.n_top == top_n);
  for (int i = 0; i < top_n; ++i) {
    CAPTURE(i);
    const int32_t t = a.top_ids[i];
    REQUIRE(t >= 0);
    REQUIRE(size_t(t) < want.size());
    const double d = std::abs(double(a.top_logprobs[i]) - want[size_t(t)]);
    worst = std::max(worst, d);
    CHECK(d <= tol);
    CHECK(want[size_t(t)] >= sorted[size_t(i)] - tol);
    if (i > 0) CHECK(a.top_logprobs[i] <= a.top_logprobs[i - 1]);
  }
  return worst;
}

// Equal bit for bit (the slots past n_top are not written).
bool same_answer(const launch::token_logprobs& a, const launch::token_logprobs& b) {
  if (a.id != b.id || a.n_top != b.n_top || std::memcmp(&a.logprob, &b.logprob, 4) != 0) return false;
  return std::memcmp(a.top_ids, b.top_ids, size_t(a.n_top) * 4) == 0 &&
         std::memcmp(a.top_logprobs, b.top_logprobs, size_t(a.n_top) * 4) == 0;
}

gen::decoder_config score_config(int64_t n_batch, int64_t score_rows) {
  gen::decoder_config c;
  c.n_ctx = 256, c.kv_type = kv::kv_type::f32, c.n_batch = n_batch, c.score_rows = score_rows;
  return c;
}

TEST_CASE("decoder: scores of every prompt row against llama.cpp's logits (float64 log-softmax)") {
  const std::pair<const char*, const char*> fixtures[] = {
      {"tiny_dense.gguf", "ref_tiny_dense"},
      {"tiny_moe.gguf", "ref_tiny_moe"},
      {"tiny_interleaved_q4km.gguf", "ref_tiny_interleaved_q4km_deq"},
  };
  // chunks of 64 (one prompt GEMM) and of 4 (the GEMV; each chunk's last row scored by the next chunk's
  // first token); LM-head slices of 3 rows (several per chunk, a short last one) and of 64 (one). F32
  // weights in chunks of 64: fp32 activations, logits within ~1e-5 of llama.cpp's (a log-probability
  // moves by at most twice the largest logit error): 1e-4. Otherwise the integer paths' 16-bit
  // activations (~1e-4 relative per row, the fixture test's 1e-3 bound on the logits): 3e-3.
  const std::pair<int64_t, int64_t> shapes[] = {{64, 64}, {4, 3}};
  for (const auto& [gguf, ref] : fixtures) {
    const auto l = test::load_model(gguf);
    const size_t nv = l->model.hparams().n_vocab;
    const auto cases = test::read_ref_cases(data_dir + "/" + std::string(ref) + ".json");
    for (const auto& [n_batch, score_rows] : shapes) {
      double worst = 0;
      for (size_t ci = 0; ci < cases.size(); ++ci) {
        CAPTURE(std::string(gguf));
        CAPTURE(ci);
        CAPTURE(n_batch);
        const auto& c = cases[ci];
        const auto want = read_f32(data_dir + "/" + ref + ".case" + std::to_string(ci) + ".f32");
        gen::decoder d;
        Q35_OK(d.init(l->model, score_config(n_batch, score_rows)));
        std::vector<launch::token_logprobs> scores;
        Q35_OK(d.eval_scored(c.tokens, 5, c.greedy[0], scores));
        REQUIRE(scores.size() == c.tokens.size());
        for (size_t t = 0; t < c.tokens.size(); ++t) {
          CAPTURE(t);
          const int32_t next = t + 1 < c.tokens.size() ? c.tokens[t + 1] : c.greedy[0];
          const bool fp32 = n_batch == 64 && std::string(gguf).find("q4km") == std::string::npos;
          worst = std::max(worst, check_answer(scores[t], next, log_softmax(&want[t * nv], nv), 5, fp32 ? 1e-4 : 3e-3));
        }
      }
      MESSAGE(std::string(gguf) << " (chunks of " << n_batch << ", slices of " << score_rows
                                << "): largest log-probability difference " << worst);
    }
  }
}

TEST_CASE("decoder: scoring leaves the step's logits as they were and equals its own rows") {
  const auto l = test::load_model("tiny_interleaved_q4km.gguf");
  const size_t nv = l->model.hparams().n_vocab;
  const auto cases = test::read_ref_cases(data_dir + "/ref_tiny_dense.json");
  const std::vector<int32_t>& prompt = cases[1].tokens;  // 31 tokens
  std::vector<launch::token_logprobs> first;             // the answers of the first slice size
  for (const int64_t score_rows : {int64_t(1), int64_t(7), int64_t(31)}) {
    CAPTURE(score_rows);
    gen::decoder_config c = score_config(512, 0);
    c.keep_all_logits = true;
    gen::decoder plain, scored;
    Q35_OK(plain.init(l->model, c));
    c.score_rows = score_rows;
    Q35_OK(scored.init(l->model, c));
    std::vector<float> rows_plain, rows_scored;
    Q35_OK(plain.eval(prompt, &rows_plain));
    std::vector<launch::token_logprobs> scores;
    const gen::seq_input in{0, prompt, 20, -1};  // no `next`: the last row reports none
    Q35_OK(scored.step({&in, 1}, &rows_scored, &scores));
    CHECK(rows_scored == rows_plain);  // bit for bit
    REQUIRE(scores.size() == prompt.size());
    CHECK(scores.back().id == -1);
    double worst = 0;
    for (size_t t = 0; t + 1 < prompt.size(); ++t) {
      CAPTURE(t);
      worst = std::max(worst, check_answer(scores[t], prompt[t + 1], log_softmax(&rows_scored[t * nv], nv), 20, 1e-5));
    }
    MESSAGE("slices of " << score_rows << ": largest difference from the step's own rows " << worst);
    // every slice size gives the same answers, bit for bit
    if (first.empty()) first = scores;
    for (size_t t = 0; t < scores.size(); ++t) {
      CAPTURE(t);
      CHECK(same_answer(scores[t], first[t]));
    }
    // and the sequences continue alike
    launch::sampling_params greedy;
    greedy.temperature = 0.0f;
    for (int i = 0; i < 4; ++i) {
      int32_t a = -1, b = -1;
      Q35_OK(plain.sample(greedy, plain.tokens(), a));
      Q35_OK(scored.sample(greedy, scored.tokens(), b));
      CHECK(a == b);
      rows_plain.clear(), rows_scored.clear();
      Q35_OK(plain.eval({&a, 1}, &rows_plain));
      Q35_OK(scored.eval({&a, 1}, &rows_scored));
      CHECK(rows_scored == rows_plain);
    }
  }
}

TEST_CASE("decoder: a scored input among decoding sequences, and a one-token scored input") {
  const auto l = test::load_model("tiny_moe_q4km.gguf");
  const size_t nv = l->model.hparams().n_vocab;
  const auto cases = test::read_ref_cases(data_dir + "/ref_tiny_dense.json");
  const std::vector<int32_t>& prompt = cases[0].tokens;  // 10 tokens
  gen::decoder_config c = score_config(512, 4);
  c.n_seq_max = 3, c.keep_all_logits = true, c.batch_invariant = true;
  gen::decoder d, alone;
  Q35_OK(d.init(l->model, c));
  Q35_OK(alone.init(l->model, c));
  // sequences 1 and 2 hold a prompt and decode; sequence 0 is scored in the same steps
  for (int s : {1, 2}) Q35_OK(d.step(std::vector<gen::seq_input>{{s, std::span(prompt).first(size_t(3 + s))}}));
  Q35_OK(alone.step(std::vector<gen::seq_input>{{1, std::span(prompt).first(4)}}));
  const int32_t t1 = prompt[7], t2 = prompt[8];
  std::vector<float> rows, rows_alone;
  std::vector<launch::token_logprobs> scores, scores_alone;
  const std::vector<gen::seq_input> step{{1, {&t1, 1}}, {0, prompt, 3, t2}, {2, {&t2, 1}}};
  Q35_OK(d.step(step, &rows, &scores));
  // the decode row of sequence 1 is the row it computes alone (batch invariance holds with scoring)
  Q35_OK(alone.step(std::vector<gen::seq_input>{{1, {&t1, 1}}}, &rows_alone));
  REQUIRE(rows.size() == (2 + prompt.size()) * nv);
  CHECK(std::equal(rows_alone.begin(), rows_alone.end(), rows.begin()));
  // the scored input's answers: its rows come after sequence 1's in `rows`
  REQUIRE(scores.size() == prompt.size());
  for (size_t t = 0; t < prompt.size(); ++t) {
    CAPTURE(t);
    check_answer(scores[t], t + 1 < prompt.size() ? prompt[t + 1] : t2, log_softmax(&rows[(1 + t) * nv], nv), 3, 1e-5);
  }
  // one token, scored: its own group (not the decode group, not a graph), with `next`
  const int32_t t0 = prompt[0];
  scores.clear(), rows.clear();
  Q35_OK(d.clear(0));
  Q35_OK(d.step(std::vector<gen::seq_input>{{0, {&t0, 1}, 0, prompt[1]}}, &rows, &scores));
  REQUIRE(scores.size() == 1);
  // (its logits row came from the one-row GEMV on 16-bit activations, ~1e-4 relative; the answer from
  // the GEMM)
  check_answer(scores[0], prompt[1], log_softmax(rows.data(), nv), 0, 1e-3);
}

TEST_CASE("decoder: scoring refusals name the problem and leave the decoder as it was") {
  const auto l = test::load_model("tiny_dense_q4km.gguf");
  const std::vector<int32_t> prompt{1, 2, 3};
  std::vector<launch::token_logprobs> scores;
  auto refused = [&](gen::decoder& d, const gen::seq_input& in, std::vector<launch::token_logprobs>* out,
                     const std::string& what) {
    const status s = d.step({&in, 1}, nullptr, out);
    INFO(s.to_string());
    CHECK(!s.ok());
    CHECK(s.message().find(what) != std::string::npos);
    CHECK(d.n_past() == 0);
  };
  gen::decoder off;
  Q35_OK(off.init(l->model, score_config(64, 0)));
  refused(off, {0, prompt, 0, -1}, &scores, "scoring is off (decoder_config::score_rows = 0)");
  gen::decoder d;
  Q35_OK(d.init(l->model, score_config(64, 8)));
  refused(d, {0, prompt, 0, -1}, nullptr, "asks for scores without an output");
  refused(d, {0, prompt, 21, -1}, &scores, "score = 21 is outside -1..20");
  refused(d, {0, prompt, -2, -1}, &scores, "score = -2 is outside -1..20");
  refused(d, {0, prompt, 1, 512}, &scores, "token id 512 after position 2 is outside the vocabulary of 512");
  CHECK(scores.empty());
  gen::decoder_config neg = score_config(64, -1);
  gen::decoder bad;
  const status s = bad.init(l->model, neg);
  CHECK(s.message().find("score rows -1 < 0") != std::string::npos);
  // a context too short for the whole input: refused before any chunk runs
  gen::decoder_config small = score_config(4, 4);
  small.n_ctx = 2;
  gen::decoder full;
  Q35_OK(full.init(l->model, small));
  CHECK(full.eval_scored(prompt, 0, -1, scores).message().find("exceed the context of 2") != std::string::npos);
  CHECK(full.n_past() == 0);
}

}  // namespace
