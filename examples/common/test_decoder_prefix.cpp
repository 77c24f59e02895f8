// Prefix checkpoints of the decoder: a sequence started from a checkpoint (its KV pages shared, its
// recurrent state copied) gives bit-identical logits and tokens to the same tokens fed from position 0,
// after the sequence the checkpoint came from has moved on; checkpoints hold pages until dropped and take
// no new page when started from; refusals name the problem. Dense, MoE and interleaved fixtures.
#include <doctest/doctest.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "decoder.hpp"
#include "test_model.hpp"

namespace {

using namespace q35;

std::vector<int32_t> random_tokens(size_t n, int32_t n_vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> tok(0, n_vocab - 1);
  std::vector<int32_t> p(n);
  for (int32_t& t : p) t = tok(rng);
  return p;
}

gen::decoder_config config(int n_prefix_slots) {
  gen::decoder_config c;
  c.n_ctx = 128, c.n_seq_max = 2, c.n_batch = 8, c.batch_invariant = true, c.n_prefix_slots = n_prefix_slots;
  return c;
}

// Feeds `tokens` to `seq` in chunks of 8 at absolute multiples of 8, then draws `n_gen` greedy ids, feeding
// each; returns the last logits after every step that ended the input or fed an id, then the ids.
struct run_result {
  std::vector<std::vector<float>> logits;
  std::vector<int32_t> ids;
};
run_result feed_and_generate(gen::decoder& d, int seq, std::span<const int32_t> tokens, int n_gen) {
  run_result r;
  size_t i = 0;
  while (i < tokens.size()) {
    const int64_t pos = d.n_past(seq);
    const size_t n = std::min<size_t>(tokens.size() - i, size_t(8 - pos % 8));
    const gen::seq_input in{seq, tokens.subspan(i, n)};
    Q35_OK(d.step({&in, 1}));
    i += n;
  }
  std::vector<int32_t> history = d.tokens(seq);
  for (int k = 0;; ++k) {
    r.logits.emplace_back();
    Q35_OK(d.last_logits(seq, r.logits.back()));
    if (k == n_gen) break;
    std::vector<int32_t> ids;
    const gen::seq_sample s{seq, {}, history};  // default parameters: greedy
    Q35_OK(d.sample({&s, 1}, ids));
    r.ids.push_back(ids[0]);
    history.push_back(ids[0]);
    const gen::seq_input in{seq, {&history.back(), 1}};
    Q35_OK(d.step({&in, 1}));
  }
  return r;
}

void check_same(const run_result& a, const run_result& b) {
  REQUIRE(a.logits.size() == b.logits.size());
  CHECK(a.ids == b.ids);
  for (size_t k = 0; k < a.logits.size(); ++k) {
    CAPTURE(k);
    REQUIRE(a.logits[k].size() == b.logits[k].size());
    CHECK(std::memcmp(a.logits[k].data(), b.logits[k].data(), a.logits[k].size() * sizeof(float)) == 0);
  }
}

void check_model(const std::string& gguf) {
  INFO(gguf);
  const auto l = test::load_model(gguf);
  const int32_t nv = int32_t(l->model.hparams().n_vocab);
  const std::vector<int32_t> prompt = random_tokens(40, nv, 11), other = random_tokens(11, nv, 12);
  gen::decoder d;
  Q35_OK(d.init(l->model, config(2)));
  const int64_t all = d.pages_total();
  REQUIRE(d.page_tokens() == 16);

  // the cold runs: the whole prompt, and its first 32 tokens followed by other tokens
  std::vector<int32_t> branch(prompt.begin(), prompt.begin() + 32);
  branch.insert(branch.end(), other.begin(), other.end());
  const run_result cold = feed_and_generate(d, 0, prompt, 5);
  Q35_OK(d.clear(0));
  const run_result cold_branch = feed_and_generate(d, 0, branch, 5);
  Q35_OK(d.clear(0));

  // sequence 0 stops at 32 tokens for the checkpoint, then goes on: its own run is unchanged by it
  const gen::seq_input head{0, std::span<const int32_t>(prompt).first(32)};
  for (size_t i = 0; i < 32; i += 8) {
    const gen::seq_input in{0, head.tokens.subspan(i, 8)};
    Q35_OK(d.step({&in, 1}));
  }
  int id = -1;
  Q35_OK(d.save_prefix(0, id));
  CHECK(d.prefix_valid(id));
  CHECK(d.prefix_tokens(id) == std::vector<int32_t>(prompt.begin(), prompt.begin() + 32));
  CHECK(d.prefixes_free() == 1);
  CHECK(d.pages_free() == all - 2);
  check_same(cold, feed_and_generate(d, 0, std::span<const int32_t>(prompt).subspan(32), 5));

  // sequence 1 from the checkpoint, while sequence 0 has written past it: the same logits and ids, the
  // checkpoint's two pages shared (no new page for them)
  const int64_t free_before = d.pages_free();
  Q35_OK(d.start_from_prefix(1, id));
  CHECK(d.n_past(1) == 32);
  CHECK(d.tokens(1) == d.prefix_tokens(id));
  CHECK(d.pages_free() == free_before);
  std::vector<float> none;
  CHECK(!d.last_logits(1, none).ok());  // no logits until its next step
  check_same(cold, feed_and_generate(d, 1, std::span<const int32_t>(prompt).subspan(32), 5));

  // a different continuation from the same checkpoint, after both sequences are gone
  Q35_OK(d.clear(0));
  Q35_OK(d.clear(1));
  CHECK(d.pages_free() == all - 2);  // the checkpoint's pages
  Q35_OK(d.start_from_prefix(0, id));
  check_same(cold_branch, feed_and_generate(d, 0, other, 5));
  Q35_OK(d.clear(0));
  d.drop_prefix(id);
  CHECK(!d.prefix_valid(id));
  CHECK(d.prefixes_free() == 2);
  CHECK(d.pages_free() == all);
}

// Two sequences from one checkpoint decode side by side in a pool of 4 pages (64 tokens): each lists the
// checkpoint's 2 pages and 1 of its own, 6 page indices in a step with 4 pages in the pool. Each one's
// logits after every joint step equal its run alone, bit for bit (batch_invariant). A record with room
// for only as many indices as the pool has pages had them overwrite the step's group headers (15.6 off).
void check_shared_pages(const std::string& gguf, bool graphs) {
  INFO(gguf);
  CAPTURE(graphs);
  const auto l = test::load_model(gguf);
  const int32_t nv = int32_t(l->model.hparams().n_vocab);
  gen::decoder_config c = config(1);
  c.n_ctx = 64, c.use_graphs = graphs;
  const std::vector<int32_t> prompt = random_tokens(32, nv, 21);
  const std::vector<int32_t> next[2] = {random_tokens(16, nv, 22), random_tokens(16, nv, 23)};  // to 48 tokens
  auto feed_alone = [&](int s) {
    gen::decoder d;
    Q35_OK(d.init(l->model, c));
    run_result r = feed_and_generate(d, 0, prompt, 0);
    for (const int32_t& t : next[s]) {
      const gen::seq_input in{0, {&t, 1}};
      Q35_OK(d.step({&in, 1}));
      r.logits.emplace_back();
      Q35_OK(d.last_logits(0, r.logits.back()));
    }
    return r;
  };
  const run_result alone[2] = {feed_alone(0), feed_alone(1)};

  gen::decoder d;
  Q35_OK(d.init(l->model, c));
  REQUIRE(d.pages_total() == 4);
  run_result joint[2];
  joint[0] = feed_and_generate(d, 0, prompt, 0);
  int id = -1;
  Q35_OK(d.save_prefix(0, id));
  Q35_OK(d.start_from_prefix(1, id));
  joint[1].logits.push_back(joint[0].logits[0]);  // the prompt's logits, computed once
  for (size_t i = 0; i < next[0].size(); ++i) {
    const std::vector<gen::seq_input> in{{0, {&next[0][i], 1}}, {1, {&next[1][i], 1}}};
    Q35_OK(d.step(in));
    for (int s = 0; s < 2; ++s) {
      joint[s].logits.emplace_back();
      Q35_OK(d.last_logits(s, joint[s].logits.back()));
    }
  }
  CHECK(d.pages_free() == 0);  // 2 shared pages and 1 own for each sequence: the pool is full
  check_same(alone[0], joint[0]);
  check_same(alone[1], joint[1]);
}

}  // namespace

TEST_CASE("decoder prefix: sequences sharing a checkpoint's pages list more page indices than the pool has") {
  for (const char* gguf : test::q4km_fixtures) {
    check_shared_pages(gguf, true);
    check_shared_pages(gguf, false);
  }
}

TEST_CASE("decoder prefix: a sequence started from a checkpoint equals the cold run, bit for bit") {
  for (const char* gguf : test::q4km_fixtures) check_model(gguf);
}

TEST_CASE("decoder prefix: refusals name the problem and change nothing") {
  const auto l = test::load_model("tiny_dense_q4km.gguf");
  gen::decoder d;
  gen::decoder_config bad = config(-1);
  const status s = d.init(l->model, bad);
  CHECK(s.to_string().find("prefix checkpoint count -1 is outside 0..4096") != std::string::npos);
  Q35_OK(d.init(l->model, config(1)));
  const std::vector<int32_t> t = random_tokens(8, int32_t(l->model.hparams().n_vocab), 3);
  const auto refused = [&](status r, const std::string& what) {
    CAPTURE(r.to_string());
    CHECK(!r.ok());
    CHECK(r.to_string().find(what) != std::string::npos);
  };
  int id = -1;
  refused(d.save_prefix(0, id),
          "sequence 0 holds 0 tokens; a checkpoint needs a positive multiple of the page size 16");
  Q35_OK(d.step(std::vector<gen::seq_input>{{0, t}}));
  refused(d.save_prefix(0, id), "sequence 0 holds 8 tokens");
  Q35_OK(d.step(std::vector<gen::seq_input>{{0, t}}));
  refused(d.save_prefix(2, id), "sequence 2 is outside 0..1");
  Q35_OK(d.save_prefix(0, id));
  const int64_t free0 = d.pages_free();
  int id2 = -1;
  refused(d.save_prefix(0, id2), "all 1 prefix checkpoint slots are taken");
  CHECK(d.pages_free() == free0);
  refused(d.start_from_prefix(1, 5), "no prefix checkpoint 5");
  refused(d.start_from_prefix(1, -1), "no prefix checkpoint -1");
  CHECK(d.n_past(1) == 0);
  d.drop_prefix(7);  // no such checkpoint: nothing happens
  CHECK(d.prefix_valid(id));
  d.drop_prefix(id);
  refused(d.start_from_prefix(1, id), "no prefix checkpoint 0");
  Q35_OK(d.clear(0));
  CHECK(d.pages_free() == d.pages_total());
}
