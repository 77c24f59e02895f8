// Paged attention (append + decode / prefill) against the float64 reference; tolerance derivation in
// tests/reference/attention_reference.hpp. A prefill step over f16 / bf16 KV runs attn_prefill_mma_kernel
// and is checked with that kernel's own bound (attn_mma_check.hpp, check_step).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "attn_mma_check.hpp"
#include "test_util.hpp"

namespace {

using namespace q35;
using kv::kv_type;

// History of `lens[i] - 1` tokens appended per sequence, then one decode step for all of them.
void decode_batch(int n_kv_heads, int group, int head_dim, kv_type t, const std::vector<int64_t>& lens, int n_splits,
                  uint64_t seed, bool all_orders = false) {
  CAPTURE(n_kv_heads);
  CAPTURE(group);
  CAPTURE(head_dim);
  CAPTURE(kv::to_string(t));
  CAPTURE(n_splits);
  test::attn_case c(n_kv_heads, group, head_dim, head_dim / 4, t, 16, 512, seed);
  std::vector<size_t> batch;
  std::vector<int64_t> hist, one;
  for (size_t i = 0; i < lens.size(); ++i) {
    c.grow(i, lens[i]);
    batch.push_back(i), hist.push_back(lens[i] - 1), one.push_back(1);
  }
  Q35_REQUIRE_OK(c.step(batch, hist, false, 0, true).st);
  const auto run = [&] {
    test::attn_case::step_result r = c.step(batch, one, false, n_splits);
    Q35_REQUIRE_OK(r.st);
    CHECK(test::check_step(c, r.out, batch, one) == 0);
    for (size_t i = 0; i < lens.size(); ++i) c.seqs[i].len -= 1;  // run the same step again
  };
  if (all_orders) {
    test::for_each_order(run);
  } else {
    run();
  }
}

TEST_CASE("attention decode: lengths 1, P-1, P, P+1, 1000 in one batch, every GQA ratio" * test::needs_device()) {
  for (int group : {1, 2, 4, 6, 8}) decode_batch(2, group, 128, kv_type::f32, {1, 15, 16, 17, 1000}, 0, 10 + group);
}

TEST_CASE("attention decode: head_dim 256, f16 and bf16 KV" * test::needs_device()) {
  decode_batch(2, 4, 256, kv_type::f16, {1, 17, 300}, 0, 31);
  decode_batch(1, 8, 256, kv_type::bf16, {16, 200}, 0, 32);
  decode_batch(2, 2, 128, kv_type::bf16, {5, 33}, 0, 33);
  decode_batch(1, 16, 128, kv_type::f16, {20, 70}, 2, 34);  // a group of 16: two 8-head chunks
}

TEST_CASE("attention decode: forced splits, including empty ones, every thread order" * test::needs_device()) {
  decode_batch(1, 4, 128, kv_type::f16, {3, 70, 129}, 3, 41, true);
  decode_batch(2, 2, 128, kv_type::f32, {2, 600}, 7, 42);
  decode_batch(2, 1, 256, kv_type::f32, {1, 40}, 64, 43);
}

// Sequence 0's decode row, alone and then next to longer and shorter sequences (lengths 200, 37, 900,
// 1), each step checked against float64; the two rows must be bit-identical. The split workspace
// starts as NaN, so a merge that read a partial nobody wrote would fail the check.
void decode_row_alone_and_in_batch(int split_keys, int seq_splits, uint64_t seed, int split_rows = 0,
                                   const std::vector<int64_t>& lens = {200, 37, 900, 1}) {
  CAPTURE(split_keys);
  CAPTURE(seq_splits);
  CAPTURE(split_rows);
  std::vector<std::vector<float>> outs;
  int pages = 8;
  for (const int64_t len : lens) pages += int((len + 15) / 16);
  for (size_t n : {size_t(1), lens.size()}) {
    CAPTURE(n);
    test::attn_case c(2, 4, 128, 32, kv_type::f16, 16, std::max(pages, 128), seed);
    std::vector<size_t> batch;
    std::vector<int64_t> hist, one;
    for (size_t i = 0; i < n; ++i) {
      c.grow(i, lens[i]);
      batch.push_back(i), hist.push_back(lens[i] - 1), one.push_back(1);
    }
    Q35_REQUIRE_OK(c.step(batch, hist, false, 0, true).st);
    c.split_keys = split_keys, c.seq_splits = seq_splits, c.split_rows = split_rows;  // the decode step
    auto r = c.step(batch, one, false, 0);
    Q35_REQUIRE_OK(r.st);
    CHECK(test::check_step(c, r.out, batch, one) == 0);
    outs.push_back(r.out);
  }
  const size_t row = outs[0].size();  // sequence 0's heads come first
  CHECK(test::count_differences(std::vector<float>(outs[1].begin(), outs[1].begin() + std::ptrdiff_t(row)), outs[0]) ==
        0);
}

// A fixed number of keys per split (attn_batch::split_keys): 64 keys gives sequence 0 4 splits, the
// longest 15 (whose length would otherwise change sequence 0's splits).
TEST_CASE("attention decode: with split_keys a row does not depend on the rest of the batch" * test::needs_device()) {
  decode_row_alone_and_in_batch(64, 0, 57);
}

// Splits cut from each sequence's own length (attn_batch::seq_splits). At 32 splits sequence 0 uses 4
// of 64 keys (the minimum), sequence 2 15, sequence 3 (1 key) one; the other splits are empty.
TEST_CASE("attention decode: with seq_splits a row does not depend on the rest of the batch" * test::needs_device()) {
  for (int seq_splits : {1, 3, 32, 64}) decode_row_alone_and_in_batch(0, seq_splits, 58);
}

// Partials for more rows than the default budget (attn_batch::split_rows): 4 rows x 128 splits need 512,
// so the partials' log-sum-exp block lies past where the default budget would put it; sequence 2 (5000
// keys) uses 79 splits of 64 keys, whose partials (splits 64..78 of 4 rows) lie past 256 rows.
TEST_CASE("attention decode: split_rows past the default budget, a row alone and in a batch" * test::needs_device()) {
  decode_row_alone_and_in_batch(0, 128, 59, 512, {200, 37, 5000, 1});
}

// seq_splits on the prefill kernels too (tensor cores for f16, the paged kernel for f32): new tokens
// after a cached history, each sequence cut by its own length.
TEST_CASE("attention prefill: with seq_splits, against float64" * test::needs_device()) {
  for (kv_type t : {kv_type::f16, kv_type::f32}) {
    CAPTURE(kv::to_string(t));
    test::attn_case c(1, 4, 128, 32, t, 16, 128, 59);
    c.grow(0, 300), c.grow(1, 90);
    Q35_REQUIRE_OK(c.step({0, 1}, {260, 70}, false, 0, true).st);
    c.seq_splits = 5;
    auto r = c.step({0, 1}, {30, 20}, true, 0);  // 5 splits x 50 tokens: within the 256 partial rows
    Q35_REQUIRE_OK(r.st);
    CHECK(test::check_step(c, r.out, {0, 1}, {30, 20}) == 0);
  }
}

// f16/bf16 KV against f32 KV on the same inputs: each within its bound of float64, so within the sum.
TEST_CASE("attention decode: f16 and bf16 KV against f32 KV" * test::needs_device()) {
  std::vector<std::vector<float>> outs;
  std::vector<double> tol;
  for (kv_type t : {kv_type::f32, kv_type::f16, kv_type::bf16}) {
    test::attn_case c(2, 4, 128, 32, t, 16, 64, 51);
    c.grow(0, 200);
    Q35_REQUIRE_OK(c.step({0}, {199}, false, 0, true).st);
    auto r = c.step({0}, {1}, false, 0);
    Q35_REQUIRE_OK(r.st);
    CHECK(test::check_step(c, r.out, {0}, {1}) == 0);
    outs.push_back(r.out);
  }
  // Outputs are o * sigmoid(g) with |o| <= max|v| <= 1: the KV rounding moves them by at most
  // u_kv (V) plus the score shift through the weights; measured differences are printed.
  for (size_t i = 1; i < outs.size(); ++i) {
    double worst = 0;
    for (size_t j = 0; j < outs[0].size(); ++j) worst = std::max(worst, std::fabs(double(outs[i][j]) - outs[0][j]));
    MESSAGE("max |out(" << (i == 1 ? "f16" : "bf16") << ") - out(f32)| = " << worst);
    CHECK(worst < (i == 1 ? 2e-3 : 2e-2));
  }
}

// With one split, a row's keys go through the same streams in the same order whatever the chunking:
// chunks give bit-identical results (a decode step of the same token uses another tiling: rounding differs).
TEST_CASE("attention prefill: whole prompt and the same prompt in chunks are bit-identical" * test::needs_device()) {
  for (int group : {1, 4, 6}) {
    CAPTURE(group);
    test::attn_case whole(1, group, 128, 32, kv_type::f16, 16, 64, 61);
    test::attn_case chunked(1, group, 128, 32, kv_type::f16, 16, 64, 61);
    whole.grow(0, 50);
    chunked.grow(0, 50);
    auto w = whole.step({0}, {50}, true, 1);
    Q35_REQUIRE_OK(w.st);
    CHECK(test::check_step(whole, w.out, {0}, {50}) == 0);
    CHECK(test::count_differences(test::prefill_in_chunks(chunked, {17, 16, 1, 16}), w.out) == 0);
  }
}

TEST_CASE("attention prefill: batches mixing cached and new lengths, splits, head_dim 256" * test::needs_device()) {
  test::attn_case c(2, 2, 256, 64, kv_type::bf16, 16, 256, 71);
  c.grow(0, 40), c.grow(1, 3), c.grow(2, 100);
  Q35_REQUIRE_OK(c.step({0, 2}, {20, 60}, true, 0).st);  // history with attention on the way
  for (int splits : {1, 3}) {
    CAPTURE(splits);
    auto r = c.step({0, 1, 2}, {20, 3, 40}, true, splits);
    Q35_REQUIRE_OK(r.st);
    CHECK(test::check_step(c, r.out, {0, 1, 2}, {20, 3, 40}) == 0);
    c.seqs[0].len -= 20, c.seqs[1].len -= 3, c.seqs[2].len -= 40;
  }
}

TEST_CASE("attention prefill: GQA ratios 1, 2, 4, 6, 8 and a full-width rotation" * test::needs_device()) {
  for (int group : {1, 2, 4, 6, 8}) {
    CAPTURE(group);
    test::attn_case c(1, group, 128, group == 2 ? 128 : 32, kv_type::f32, 16, 64, 80 + group);
    c.grow(0, 33), c.grow(1, 17);
    auto r = c.step({0, 1}, {33, 17}, true, 0);
    Q35_REQUIRE_OK(r.st);
    CHECK(test::check_step(c, r.out, {0, 1}, {33, 17}) == 0);
  }
}

TEST_CASE("attention: a forked sequence shares full pages, copies the partial one and diverges" *
          test::needs_device()) {
  test::attn_case c(2, 2, 128, 32, kv_type::f16, 16, 64, 91);
  c.grow(0, 40);
  Q35_REQUIRE_OK(c.step({0}, {40}, true, 0, true).st);
  int dst = -1;
  Q35_REQUIRE_OK(c.alloc.fork(c.seqs[0].id, dst));
  Q35_REQUIRE_OK(c.pool.copy_pages(c.alloc.take_pending_copies()));
  const auto& pa = c.alloc.pages(c.seqs[0].id);
  const auto& pb = c.alloc.pages(dst);
  REQUIRE(pa.size() == 3);
  REQUIRE(pb.size() == 3);
  CHECK(pa[0] == pb[0]);
  CHECK(pa[1] == pb[1]);
  CHECK(pa[2] != pb[2]);
  // the fork inherits the projections of the first 40 tokens, then both grow differently
  test::attn_seq b = c.seqs[0];
  b.id = dst;
  c.seqs.push_back(b);
  c.grow(0, 5), c.grow(1, 5);
  REQUIRE(c.total_tokens(1) == 45);
  auto r = c.step({0, 1}, {5, 5}, true, 0);
  Q35_REQUIRE_OK(r.st);
  CHECK(test::check_step(c, r.out, {0, 1}, {5, 5}) == 0);
  auto d = c.step({1, 0}, {0, 0}, false, 0);  // nothing new: an empty batch is a no-op
  Q35_REQUIRE_OK(d.st);
}

TEST_CASE("attention: running out of pages is a status and changes nothing" * test::needs_device()) {
  test::attn_case c(1, 1, 128, 32, kv_type::f32, 16, 4, 101);
  c.grow(0, 70);
  auto r = c.step({0}, {70}, true, 0);
  CHECK(r.st.code() == status_code::out_of_memory);
  CHECK(c.seqs[0].len == 0);
  CHECK(c.alloc.length(c.seqs[0].id) == 0);
  CHECK(c.alloc.free_pages() == 4);
  auto ok = c.step({0}, {64}, true, 0);
  Q35_REQUIRE_OK(ok.st);
  CHECK(test::check_step(c, ok.out, {0}, {64}) == 0);
}

// The >= 32k context: one kv head, two q heads, head_dim 128, f16; the history written from the host,
// then one decode step with the automatic split (64 splits of 512 keys) and with a single split (the
// longest accumulation chains). Default thread order only.
TEST_CASE("attention decode: a 32768-token context" * test::needs_device()) {
  const int64_t n = 32768;
  test::attn_case c(1, 2, 128, 32, kv_type::f16, 16, n / 16, 111);
  c.grow(0, n);
  // Needles: keys equal to the last token's q projection (head 0) at the first page, inside pages,
  // on both sides of a split boundary and in the last pages. Their scores stand out, so they carry
  // a large share of the softmax weight and a page the kernel skipped would show far above the bound.
  const std::vector<int64_t> needles{0, 5000, 16383, 16384, 32700};
  for (int64_t j : needles)
    std::copy_n(c.seqs[0].qg.begin() + (n - 1) * 2 * 2 * 128, 128, c.seqs[0].k.begin() + j * 128);
  {
    const ref::ref_kv kv = c.reference_kv(0, n);
    std::vector<double> q(128), mag(128), sc(static_cast<size_t>(n));
    ref::norm_rope(c.seqs[0].qg.data() + (n - 1) * 2 * 2 * 128, c.q_norm.data(), c.shape, n - 1, q.data(), mag.data());
    double mx = -INFINITY, z = 0, share = 0;
    for (int64_t j = 0; j < n; ++j) {
      double d = 0;
      for (int e = 0; e < 128; ++e) d += q[size_t(e)] * kv.k[size_t(j * 128 + e)];
      mx = std::max(mx, sc[size_t(j)] = d / std::sqrt(128.0));
    }
    for (int64_t j = 0; j < n; ++j) z += std::exp(sc[size_t(j)] - mx);
    for (int64_t j : needles) share += std::exp(sc[size_t(j)] - mx) / z;
    MESSAGE("softmax weight of the needles (head 0): " << share);
    CHECK(share > 0.3);  // ~0.1 each: a missing needle moves outputs over 10x past the bound
  }
  c.fill_direct(0, n - 1);
  for (int splits : {0, 1}) {
    CAPTURE(splits);
    auto r = c.step({0}, {1}, false, splits);
    Q35_REQUIRE_OK(r.st);
    CHECK(test::check_step(c, r.out, {0}, {1}) == 0);
    c.seqs[0].len -= 1;
  }
  // and a 2-token prefill chunk at the end of the same context
  c.seqs[0].len -= 1;
  auto r = c.step({0}, {2}, true, 0);
  Q35_REQUIRE_OK(r.st);
  CHECK(test::check_step(c, r.out, {0}, {2}) == 0);
}

TEST_CASE("attention: invalid arguments are statuses naming the value" * test::needs_device()) {
  test::attn_case c(2, 2, 128, 32, kv_type::f16, 16, 8, 121);
  launch::attn_core_args a;
  a.shape = c.lshape;
  a.kv = c.pool.layer(0);
  const auto msg = [&](auto mutate) {
    launch::attn_core_args b = a;
    mutate(b);
    const status s = launch::validate(b);
    CHECK(s.code() == status_code::invalid_argument);
    return s.message();
  };
  CHECK(msg([](auto& b) { b.shape.head_dim = 64; }).find("head_dim = 64") != std::string::npos);
  CHECK(msg([](auto& b) { b.shape.value_dim = 256; }).find("value_dim = 256") != std::string::npos);
  CHECK(msg([](auto& b) { b.shape.n_heads = 3; }).find("n_heads = 3") != std::string::npos);
  CHECK(msg([](auto& b) { b.shape.rope_dim = 12; }).find("rope_dim = 12") != std::string::npos);
  CHECK(msg([](auto& b) { b.shape.rope_theta = 0; }).find("rope_theta") != std::string::npos);
  CHECK(msg([](auto& b) { b.shape.n_kv_heads = 1, b.shape.n_heads = 4; }).find("KV view") != std::string::npos);
  CHECK(msg([](auto& b) { b.batch.n_splits = 129; }).find("n_splits = 129") != std::string::npos);
  CHECK(msg([](auto& b) {
          b.batch.n_tokens = 3, b.batch.max_seq_tokens = 4, b.batch.max_seq_len = 4, b.batch.n_seqs = 1;
        }).find("max_seq_tokens = 4 exceeds") != std::string::npos);
  CHECK(msg([](auto& b) { b.batch.split_keys = 6; }).find("split_keys = 6 is not") != std::string::npos);
  CHECK(msg([](auto& b) {
          b.batch.split_keys = 4, b.batch.n_tokens = 1, b.batch.n_seqs = 1;
          b.batch.max_seq_tokens = 1, b.batch.max_seq_len = 4000;
        }).find("split_keys = 4 gives 1000 splits") != std::string::npos);
  CHECK(msg([](auto& b) { b.batch.seq_splits = 129; }).find("seq_splits = 129 is outside") != std::string::npos);
  CHECK(msg([](auto& b) {
          b.batch.seq_splits = 64, b.batch.n_tokens = 5, b.batch.n_seqs = 5;
          b.batch.max_seq_tokens = 1, b.batch.max_seq_len = 40;
        }).find("seq_splits = 64 times n_tokens = 5 exceeds 256") != std::string::npos);
  CHECK(msg([](auto& b) { b.batch.split_rows = -1; }).find("split_rows = -1 is outside") != std::string::npos);
  CHECK(msg([](auto& b) { b.batch.split_rows = 8193; }).find("split_rows = 8193 is outside") != std::string::npos);
  CHECK(msg([](auto& b) {
          b.batch.seq_splits = 64, b.batch.n_tokens = 5, b.batch.n_seqs = 5, b.batch.split_rows = 319;
          b.batch.max_seq_tokens = 1, b.batch.max_seq_len = 40;
        }).find("seq_splits = 64 times n_tokens = 5 exceeds 319 split rows") != std::string::npos);
  {  // a workspace sized for the default 256 rows is too small for 320, and enough for 256
    launch::attn_core_args b = a;
    b.workspace = reinterpret_cast<void*>(256), b.workspace_bytes = launch::attn_split_workspace_bytes(b.shape);
    CHECK(launch::validate(b).ok());
    b.batch.split_rows = 320;
    const std::string need = std::to_string(launch::attn_split_workspace_bytes(b.shape, 320)) + " needed";
    CHECK(launch::validate(b).message().find(need) != std::string::npos);
  }
  CHECK(msg([](auto& b) { b.workspace_bytes = 0; }).find("workspace") != std::string::npos);
  CHECK(msg([](auto& b) { b.kv = {}; }).find("empty KV view") != std::string::npos);
}

}  // namespace
