// Many sequences in one decoder: requests decoded together (admitted and departing mid-run, prompts in
// chunks next to other sequences' decode tokens) give bit-identical logits and tokens to each request
// decoded alone, on the dense, MoE and interleaved fixtures; a cancelled request gives back every page;
// refused steps name the problem and change nothing.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <deque>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "decoder.hpp"
#include "q35/launch/gemv.hpp"
#include "test_model.hpp"

namespace {

using namespace q35;

struct request {
  std::vector<int32_t> prompt;
  int n_gen = 0;
  launch::sampling_params params;
  int cancel_after = -1;  // >= 0: cancelled after taking part in this many steps
};

// What one request saw: the last logits row after each step it took part in, and its tokens.
struct trace {
  std::vector<std::vector<float>> logits;
  std::vector<int32_t> generated;
};

// A small continuous-batching scheduler: requests are admitted in order while a sequence is free; each
// step every decoding sequence feeds its last token, and prefilling ones feed their next chunk (<= n_batch
// tokens) while the step's prompt tokens stay within `budget` (the first chunk always goes); a request
// departs after n_gen tokens (or when cancelled) and frees its sequence.
// max_decode_rows: the most one-token inputs (a decode group's rows) of one step.
std::vector<trace> run(gen::decoder& d, const std::vector<request>& reqs, int slots, int64_t n_batch, int64_t budget,
                       int* max_decode_rows = nullptr) {
  struct active {
    size_t req;
    int seq;
    size_t fed = 0;  // prompt tokens fed
    int steps = 0;
    std::vector<int32_t> history;  // prompt + generated, for the repetition window
  };
  std::vector<trace> out(reqs.size());
  std::deque<size_t> waiting;
  for (size_t i = 0; i < reqs.size(); ++i) waiting.push_back(i);
  std::vector<active> act;
  std::vector<int> free_seqs;
  for (int s = slots - 1; s >= 0; --s) free_seqs.push_back(s);
  const int64_t pages_at_start = d.pages_free();
  while (!waiting.empty() || !act.empty()) {
    while (!waiting.empty() && !free_seqs.empty()) {
      act.push_back(active{waiting.front(), free_seqs.back()});
      act.back().history = reqs[waiting.front()].prompt;
      free_seqs.pop_back();
      waiting.pop_front();
    }
    std::vector<gen::seq_input> inputs;
    std::vector<size_t> who;  // index in act of each input
    int64_t prompt_tokens = 0;
    for (size_t i = 0; i < act.size(); ++i) {
      active& a = act[i];
      const request& r = reqs[a.req];
      if (a.fed < r.prompt.size()) {
        const int64_t n = std::min<int64_t>(int64_t(r.prompt.size() - a.fed), n_batch);
        if (prompt_tokens > 0 && prompt_tokens + n > budget) continue;  // waits for a later step
        prompt_tokens += n;
        inputs.push_back({a.seq, std::span<const int32_t>(r.prompt).subspan(a.fed, size_t(n))});
      } else {
        inputs.push_back({a.seq, std::span<const int32_t>(&a.history.back(), 1)});
      }
      who.push_back(i);
    }
    REQUIRE(!inputs.empty());
    if (max_decode_rows)
      *max_decode_rows = std::max(
          *max_decode_rows,
          int(std::count_if(inputs.begin(), inputs.end(), [](const auto& in) { return in.tokens.size() == 1; })));
    Q35_OK(d.step(inputs));
    std::vector<gen::seq_sample> draws;
    std::vector<size_t> drawn;
    for (size_t k = 0; k < inputs.size(); ++k) {
      active& a = act[who[k]];
      const request& r = reqs[a.req];
      if (a.fed < r.prompt.size()) a.fed += inputs[k].tokens.size();
      ++a.steps;
      std::vector<float> row;
      Q35_OK(d.last_logits(a.seq, row));
      out[a.req].logits.push_back(std::move(row));
      if (a.fed == r.prompt.size()) {
        draws.push_back({a.seq, r.params, a.history});
        drawn.push_back(who[k]);
      }
    }
    if (!draws.empty()) {
      std::vector<int32_t> ids;
      Q35_OK(d.sample(draws, ids));
      for (size_t k = 0; k < drawn.size(); ++k) {
        act[drawn[k]].history.push_back(ids[k]);
        out[act[drawn[k]].req].generated.push_back(ids[k]);
      }
    }
    // departures: done, or cancelled
    for (size_t i = act.size(); i-- > 0;) {
      const request& r = reqs[act[i].req];
      const bool done = int(out[act[i].req].generated.size()) >= r.n_gen;
      const bool cancelled = r.cancel_after >= 0 && act[i].steps >= r.cancel_after;
      if (!done && !cancelled) continue;
      const int64_t before = d.pages_free();
      const int64_t held = (d.n_past(act[i].seq) + d.page_tokens() - 1) / d.page_tokens();
      Q35_OK(d.clear(act[i].seq));
      if (d.pages_total() > 0) CHECK(d.pages_free() == before + held);
      CHECK(d.n_past(act[i].seq) == 0);
      free_seqs.push_back(act[i].seq);
      act.erase(act.begin() + std::ptrdiff_t(i));
    }
  }
  CHECK(d.pages_free() == pages_at_start);
  return out;
}

// extra_gen: tokens every request generates past its own 3..11, so that the first ones still decode when the
// last prompts are in (their chunks go one per step).
std::vector<request> make_requests(int count, int32_t n_vocab, uint32_t seed, int extra_gen = 0) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> tok(0, n_vocab - 1);
  // prompt lengths: one token, a few (the GEMV's buckets), more than a chunk (GEMM, chunked GDN past 16)
  const int lengths[] = {7, 1, 41, 3, 19, 12, 2, 33, 9, 26, 5, 17};
  std::vector<request> reqs(static_cast<size_t>(count));
  for (int i = 0; i < count; ++i) {
    request& r = reqs[size_t(i)];
    r.prompt.resize(size_t(lengths[i % 12]));
    for (int32_t& t : r.prompt) t = tok(rng);
    r.n_gen = 3 + (i * 5) % 9 + extra_gen;
    r.params.temperature = i % 3 == 0 ? 0.0f : 0.9f;  // greedy and sampled, each with its own seed
    r.params.top_k = i % 2 ? 0 : 20;
    r.params.top_p = 0.95f, r.params.min_p = 0.02f;
    r.params.repeat_penalty = i % 4 == 1 ? 1.1f : 1.0f;
    r.params.repeat_last_n = 16;
    r.params.seed = 1000 + uint64_t(i);
  }
  return reqs;
}

gen::decoder_config config(int n_seq_max, int64_t n_batch, bool invariant, bool graphs = true, bool gemm = false) {
  gen::decoder_config c;
  c.n_ctx = 512, c.n_seq_max = n_seq_max, c.n_batch = n_batch, c.kv_type = kv::kv_type::f16;
  c.keep_all_logits = false, c.batch_invariant = invariant, c.use_graphs = graphs;
  c.batch_invariant_gemm = gemm;
  return c;
}

// Every request's logits rows and tokens in the batched run equal those of the request alone, bit for
// bit (a cancelled request: the rows it saw). With tol >= 0 instead: the rows whose inputs are the same
// (up to the first token that differs) agree within tol, and the largest difference is reported.
void check_same(const std::vector<trace>& alone, const std::vector<trace>& batched, const std::vector<request>& reqs,
                float tol = -1) {
  float worst_all = 0;
  for (size_t i = 0; i < reqs.size(); ++i) {
    CAPTURE(i);
    const trace &a = alone[i], &b = batched[i];
    size_t rows = b.logits.size();
    if (tol >= 0) {
      // a row after the prompt's steps feeds the token drawn before it: compare while those agree
      size_t g = 0;
      while (g < a.generated.size() && g < b.generated.size() && a.generated[g] == b.generated[g]) ++g;
      rows = std::min(rows, a.logits.size() - a.generated.size() + g + 1);
    } else if (reqs[i].cancel_after < 0) {
      CHECK(b.generated == a.generated);
      REQUIRE(b.logits.size() == a.logits.size());
    }
    REQUIRE(rows <= a.logits.size());
    for (size_t k = 0; k < rows; ++k) {
      CAPTURE(k);
      REQUIRE(b.logits[k].size() == a.logits[k].size());
      float worst = 0;
      for (size_t j = 0; j < a.logits[k].size(); ++j)
        worst = std::max(worst, std::abs(b.logits[k][j] - a.logits[k][j]));
      CAPTURE(worst);  // the largest difference, when a row differs
      worst_all = std::max(worst_all, worst);
      if (tol < 0)
        CHECK(std::memcmp(b.logits[k].data(), a.logits[k].data(), a.logits[k].size() * sizeof(float)) == 0);
      else
        CHECK(worst <= tol);
    }
  }
  if (tol >= 0) MESSAGE("largest logit difference to the requests alone: ", worst_all);
}

// gemm: batch invariance on the GEMM (decoder_config::batch_invariant_gemm: decode groups of up to 64 rows).
void check_model(const std::string& gguf, int n_requests, int slots, bool gemm = false) {
  INFO(gguf);
  CAPTURE(gemm);
  const auto l = test::load_model(gguf);
  const int64_t n_batch = 16;
  // past 8 sequences: long enough generations for more than 8 to decode together (checked below)
  auto reqs =
      make_requests(n_requests, int32_t(l->model.hparams().n_vocab), 7, slots > launch::gemv_max_tokens ? 10 : 0);
  reqs[4].cancel_after = 1;  // mid-prompt (19 tokens in chunks of 16)
  reqs[5].cancel_after = 4;  // mid-generation
  gen::decoder d;
  Q35_OK(d.init(l->model, config(slots, n_batch, true, true, gemm)));
  std::vector<trace> alone;
  for (const request& r : reqs) alone.push_back(run(d, {r}, 1, n_batch, n_batch)[0]);
  int decode_rows = 0;
  const std::vector<trace> batched = run(d, reqs, slots, n_batch, n_batch, &decode_rows);
  MESSAGE("one-token inputs in a step at most: ", decode_rows);
  if (slots > launch::gemv_max_tokens) CHECK(decode_rows > launch::gemv_max_tokens);
  check_same(alone, batched, reqs);
  // Decode-only steps of k sequences replay the graph recorded by the first such step (the sim
  // records graphs as CUDA does); the same requests with every launch issued directly give the same
  // bits, so nothing a replay reuses (kernel arguments, group bounds) was left stale from the capture.
  CHECK(d.graph_replays() > 0);
  gen::decoder eager;
  Q35_OK(eager.init(l->model, config(slots, n_batch, true, false, gemm)));
  check_same(batched, run(eager, reqs, slots, n_batch, n_batch), reqs);
  CHECK(eager.graph_replays() == 0);
  if (slots > launch::gemv_max_tokens) {
    // Without batch_invariant all decoding sequences form one group (the tensor-core GEMM past 8 rows,
    // attention split into 256 / 12 = 21 per sequence): the same weights and 16-bit integer activations
    // (the float path where Q6_K rows ran alone), other summation orders, so the rows agree to rounding,
    // amplified by the layers and the generated tokens: at most 1.01e-3 (batch_invariant, GEMV groups)
    // and 1.10e-3 (batch_invariant_gemm, the GEMM at every count) on logits of RMS ~4 and up to ~15;
    // bound 2e-3. A wrong page, slot or row would differ by whole units.
    gen::decoder fast;
    Q35_OK(fast.init(l->model, config(slots, n_batch, false)));
    check_same(alone, run(fast, reqs, slots, n_batch, n_batch), reqs, 2e-3f);
  }
}

}  // namespace

TEST_CASE("decoder batch: requests decoded together equal each decoded alone, bit for bit") {
  // 8 sequences at once: one decode group, the GEMV's 1-, 4- and 8-token instances
  for (const char* gguf : test::q4km_fixtures) check_model(gguf, 10, 8);
}

TEST_CASE("decoder batch: past 8 decoding sequences, batch_invariant keeps every row the same") {
  // up to 10 decoding at once: decode groups of 8 and 2 rows; then the same requests without batch_invariant
  check_model("tiny_interleaved_q4km.gguf", 12, 12);
}

TEST_CASE("decoder batch: batch_invariant_gemm keeps every row the same in decode groups past 8 rows") {
  // one decode group of up to 10 rows on the GEMM at every row count; the MoE layers in one call of
  // their decode kernels (moe_ffn with gemm_every_count)
  for (const char* gguf : test::q4km_fixtures) check_model(gguf, 12, 12, true);
  // it refines batch_invariant, and says so when that is off
  const auto l = test::load_model(test::q4km_fixtures[0]);
  gen::decoder d;
  gen::decoder_config c = config(4, 16, false);
  c.batch_invariant_gemm = true;
  const status st = d.init(l->model, c);
  CHECK(st.to_string().find("batch_invariant_gemm asks for batch_invariant, which is off") != std::string::npos);
}

// Host-resident experts (one device slot per layer) with batch_invariant_gemm: a decode group of up to
// 10 rows reads its experts through the index on the decode kernels (in place, zero-copy), so with prompt
// chunks of at most 8 tokens nothing takes the grouped path: the decoder allocates no staging area (a
// group on the grouped path would be refused without one), the cache statistics count every selection
// as a hit or a miss and none as staged, and the logits equal the all-resident run's bit for bit.
TEST_CASE("decoder batch: batch_invariant_gemm with host-resident experts reads them in place") {
  const auto l = test::load_model("tiny_moe_q4km.gguf");
  // prompt chunks of 8 tokens, one per step: generations long enough for most of the 12 to decode together
  const int64_t n_batch = 8, budget = 8;
  const auto reqs = make_requests(12, int32_t(l->model.hparams().n_vocab), 9, 30);
  gen::decoder_config cfg = config(12, n_batch, true, true, true);
  cfg.n_ctx = 1024;  // 12 sequences of up to ~80 tokens
  gen::decoder resident;
  Q35_OK(resident.init(l->model, cfg));
  const std::vector<trace> want = run(resident, reqs, 12, n_batch, budget);
  gen::device_model m;
  Q35_OK(m.load(l->file, l->bound, {}, 1));
  REQUIRE(m.experts() != nullptr);
  gen::decoder d;
  Q35_OK(d.init(m, cfg));
  CHECK(d.device_memory().expert_staging == 0);
  int decode_rows = 0;
  const std::vector<trace> got = run(d, reqs, 12, n_batch, budget, &decode_rows);
  CHECK(decode_rows > launch::gemv_max_tokens);
  check_same(want, got, reqs);
  std::vector<std::vector<uint64_t>> counts;
  Q35_OK(d.expert_counts(counts));
  std::vector<gen::expert_cache_stats> cache;
  Q35_OK(d.expert_cache(cache));
  REQUIRE(cache.size() == counts.size());
  for (size_t j = 0; j < cache.size(); ++j) {
    CAPTURE(j);
    uint64_t selections = 0;
    for (const uint64_t c : counts[j]) selections += c;
    CHECK(selections > 0);
    CHECK(cache[j].staged == 0);
    CHECK(cache[j].hits + cache[j].misses == selections);
  }
}

TEST_CASE("decoder batch: refused steps name the problem and change nothing") {
  const auto l = test::load_model("tiny_dense_q4km.gguf");
  gen::decoder d;
  gen::decoder_config c = config(2, 8, false);
  c.n_ctx = 64;  // 4 pages
  Q35_OK(d.init(l->model, c));
  const std::vector<int32_t> t(8, 5), t9(9, 5);
  auto refused = [&](std::vector<gen::seq_input> in, const std::string& what) {
    const int64_t free0 = d.pages_free(), p0 = d.n_past(0), p1 = d.n_past(1);
    const status s = d.step(in);
    CAPTURE(s.to_string());
    CHECK(!s.ok());
    CHECK(s.to_string().find(what) != std::string::npos);
    CHECK(d.pages_free() == free0);
    CHECK(d.n_past(0) == p0);
    CHECK(d.n_past(1) == p1);
  };
  refused({}, "no inputs");
  refused({{0, t}, {0, t}}, "appears twice");
  refused({{2, t}}, "sequence 2 is outside 0..1");
  refused({{0, t9}}, "9 new tokens (1..8 per step)");
  refused({{0, {}}}, "0 new tokens");
  const std::vector<int32_t> bad{1, 2, 512};
  refused({{0, bad}}, "token id 512 at position 2");
  for (int i = 0; i < 6; ++i) Q35_OK(d.step(std::vector<gen::seq_input>{{0, t}}));  // 48 tokens: 3 of 4 pages
  refused({{0, t}, {1, t}}, "16 tokens, more than a step holds (10 = batch size + sequences)");
  refused({{0, {t.data(), 1}}, {1, t}}, "out of pages: the step needs 2 more, 1 free");
  Q35_OK(d.step(std::vector<gen::seq_input>{{1, t}}));
  CHECK(d.pages_free() == 0);
  std::vector<int32_t> ids;
  CHECK(!d.sample(std::vector<gen::seq_sample>{{1, {}, {}}, {0, {}, {}}}, ids).ok());  // 0 took no part
  Q35_OK(d.clear(0));
  CHECK(d.pages_free() == 3);
  Q35_OK(d.clear(1));
  CHECK(d.pages_free() == d.pages_total());
}
