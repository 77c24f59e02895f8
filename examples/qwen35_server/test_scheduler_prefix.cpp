// server::scheduler's prefix reuse on the tiny fixtures (sim): a shared system prompt and a growing chat
// start from checkpoints and draw the same ids as cold runs; checkpoints give way when slots or pages
// run out.
#include <doctest/doctest.h>

#include "test_scheduler_util.hpp"

namespace {

using namespace q35;
using namespace q35::scheduler_test;

// A decoder with prefix checkpoint slots and its scheduler, serving one request at a time to the end.
struct prefix_server {
  gen::decoder d;
  server::scheduler s;
  static constexpr int32_t boundary = 3;  // the tests' <|im_start|>

  prefix_server(const test::loaded_model& l, int64_t n_ctx, int n_seq, int n_slots) {
    gen::decoder_config c = decoder_config(n_ctx, n_seq, 8);
    c.n_prefix_slots = n_slots;
    Q35_OK(d.init(l.model, c));
    server::scheduler_config sc = scheduler_config(8, n_vocab(l));
    sc.prefix_boundary_ids = {boundary};
    Q35_OK(s.init(d, sc));
  }
  std::vector<int32_t> serve(const std::vector<int32_t>& prompt, const launch::sampling_params& p, int64_t max_tokens,
                             server::finish_info* fin = nullptr) {
    received r;
    submit_ok(s, make_request(prompt, p, max_tokens, r));
    drain(s);
    REQUIRE(r.n_done == 1);
    if (fin) *fin = r.fin;
    return r.ids;
  }
};

// Random ids without the boundary id; a message: the boundary id, then those.
std::vector<int32_t> plain(size_t n, int32_t n_vocab, uint32_t seed) {
  std::vector<int32_t> m = random_prompt(n, n_vocab, seed);
  for (int32_t& t : m)
    if (t == prefix_server::boundary) ++t;
  return m;
}
std::vector<int32_t> message(size_t n, int32_t n_vocab, uint32_t seed) {
  std::vector<int32_t> m = plain(n, n_vocab, seed);
  m.insert(m.begin(), prefix_server::boundary);
  return m;
}

std::vector<int32_t> cat(std::initializer_list<std::vector<int32_t>> parts) {
  std::vector<int32_t> out;
  for (const auto& p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}

void check_shared_prefixes(const char* gguf) {
  CAPTURE(gguf);
  const auto l = load_model(gguf);
  const int32_t nv = n_vocab(*l);
  // a system message, two different questions after it, an assistant header: checkpoints of p1 and p2
  // at 32 (inside the system message, which ends at 37) and 48 (before the header)
  const std::vector<int32_t> sys = message(36, nv, 1), head = message(3, nv, 2);
  const std::vector<int32_t> p1 = cat({sys, message(10, nv, 3), head}), p2 = cat({sys, message(13, nv, 4), head});
  prefix_server warm(*l, 256, 2, 8);
  const std::vector<int32_t> a1 = warm.serve(p1, sampling(1), 5);
  CHECK(warm.s.metrics().prefix_checkpoints == 2);
  CHECK(warm.s.metrics().prefix_hits == 0);
  const std::vector<int32_t> a2 = warm.serve(p2, sampling(0), 5);
  CHECK(warm.s.metrics().prefix_hits == 1);
  CHECK(warm.s.metrics().prefix_tokens_reused == 32);  // the system message's full pages
  CHECK(warm.s.metrics().prefix_checkpoints == 3);     // p2's 48; its 32 was cached
  // the next turn of the first chat: p1, the answer, a new question, a header: from p1's 48
  const std::vector<int32_t> p3 = cat({p1, a1, message(6, nv, 5), head});
  const std::vector<int32_t> a3 = warm.serve(p3, sampling(3), 5);
  CHECK(warm.s.metrics().prefix_hits == 2);
  CHECK(warm.s.metrics().prefix_tokens_reused == 32 + 48);
  CHECK(warm.s.metrics().prefix_evictions == 0);

  // each alone on a cold server (the same checkpoint cuts, nothing cached): the same ids
  CHECK(prefix_server(*l, 256, 2, 8).serve(p2, sampling(0), 5) == a2);
  CHECK(prefix_server(*l, 256, 2, 8).serve(p3, sampling(3), 5) == a3);
  // and the hit next to a request prefilling at the same time
  {
    prefix_server both(*l, 256, 2, 8);
    both.serve(p1, sampling(1), 5);
    received r2, r3;
    submit_ok(both.s, make_request(p2, sampling(0), 5, r2));
    submit_ok(both.s, make_request(p3, sampling(3), 5, r3));
    drain(both.s);
    CHECK(both.s.metrics().prefix_hits == 2);
    CHECK(r2.ids == a2);
    CHECK(r3.ids == a3);
  }

  // idle: the only pages in use are the checkpoints'; dropping them gives every page back
  const server::scheduler_metrics m = warm.s.metrics();
  CHECK(m.active_sequences == 0);
  CHECK(m.prefix_cached == int64_t(m.prefix_checkpoints));
  CHECK(m.kv_pages_used == m.prefix_pages);
  CHECK(m.prefix_cached == 4);             // p1's 32 and 48, p2's 48, p3's 64 (its boundaries: 37, 48, 57, 64)
  CHECK(m.prefix_pages == 2 + 1 + 1 + 1);  // 2 shared by all, the third page of p1 and p2, the fourth of p3
  warm.s.drop_prefixes();
  CHECK(warm.s.metrics().kv_pages_used == 0);
  CHECK(warm.d.pages_free() == warm.d.pages_total());
  CHECK(warm.d.prefixes_free() == 8);
}

}  // namespace

TEST_CASE("scheduler prefix: a shared system prompt and a growing chat start from checkpoints, same ids as cold") {
  for (const char* gguf : {"tiny_dense_q4km.gguf", "tiny_interleaved_q4km.gguf"}) check_shared_prefixes(gguf);
}

TEST_CASE("scheduler prefix: checkpoints give way when slots or pages run out, before any request waits or ends") {
  const auto l = load_model("tiny_moe_q4km.gguf");
  const int32_t nv = n_vocab(*l);
  // 4 pages, 1 sequence, 1 checkpoint slot
  prefix_server s(*l, 64, 1, 1);
  const std::vector<int32_t> pa = plain(40, nv, 61), pb = plain(20, nv, 62), pc = plain(50, nv, 63),
                             pd = plain(10, nv, 64);
  s.serve(pa, sampling(0), 2);  // its checkpoint at 32: 2 pages
  CHECK(s.s.metrics().prefix_cached == 1);
  CHECK(s.s.metrics().kv_pages_used == 2);
  s.serve(pb, sampling(0), 2);  // its checkpoint at 16 takes the only slot
  CHECK(s.s.metrics().prefix_evictions == 1);
  CHECK(s.s.metrics().prefix_pages == 1);
  server::finish_info fc, fd;
  const std::vector<int32_t> c = s.serve(pc, sampling(1), 5, &fc);  // needs all 4 pages at admission
  CHECK(s.s.metrics().prefix_evictions == 2);
  CHECK(fc.completion_tokens == 5);
  CHECK(s.s.metrics().prefix_pages == 3);  // its checkpoint at 48
  // pd grows to 10 + 40 tokens: past 16 it needs pages the checkpoint holds, which it gets
  const std::vector<int32_t> dd = s.serve(pd, sampling(2), 40, &fd);
  CHECK(fd.reason == outcome::length);
  CHECK(fd.completion_tokens == 40);
  CHECK(s.s.metrics().prefix_evictions == 3);
  CHECK(s.s.metrics().prefix_cached == 0);
  CHECK(prefix_server(*l, 64, 1, 1).serve(pc, sampling(1), 5) == c);
  CHECK(prefix_server(*l, 64, 1, 1).serve(pd, sampling(2), 40) == dd);
  CHECK(s.d.pages_free() == s.d.pages_total());
}
