// attn_prefill_mma_kernel (launch::attention_prefill with f16 / bf16 KV) against the float64 reference,
// with the K/V the cache holds (exact in their type, so u_kv = 0) and the kernel's own bound (its file
// header): the score coefficient c_s replaces the fp32 dot's (E + 8) of attend_row, and c_pv u
// sum_j p_j |v_jd| (+ 2^-40 sum_j |v_jd| for f16's P floor) is added for the P V products.
//
// Every case also checks the RMS error of all its outputs relative to their RMS, which sees what the
// worst-case element bound (dominated by e^(2 eps) - 1 of the score bound) cannot: a dropped split
// part. Measured on the sim (rounding to nearest): 0.7-1.7e-7 with every part; without the lo part of
// P or q 1.1-1.7e-4 (f16), without the third bf16 part of P or q 1.3-2.0e-6 (bf16). The sim's limit
// 2^-21 (4.8e-7) sits between. Tensor cores truncate each mma's sum (<= 2^-23 relative per mma of a
// chain of N_s <= 48: up to ~6e-6 on the scores), so on a GPU the limit is 2^-16, which still catches
// a missing f16 lo part (and any single-16-bit rounding of q or P).
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "attn_mma_check.hpp"
#include "q35/kernels/attn_prefill_mma.hpp"
#include "test_util.hpp"

namespace {

using namespace q35;
using kv::kv_type;
using test::check_mma;
using test::check_result;

#if Q35_BACKEND_SIM
constexpr double rms_limit = 0x1p-21;  // see the file header
#else
constexpr double rms_limit = 0x1p-16;
#endif

// Sequences of (cached, new) tokens: the cached ones appended (with attention) in an earlier call,
// then one prefill step of all the new ones, checked.
void ragged(int n_kv_heads, int group, int head_dim, kv_type t, int page_tokens,
            const std::vector<std::pair<int64_t, int64_t>>& lens, int n_splits, uint64_t seed) {
  CAPTURE(n_kv_heads);
  CAPTURE(group);
  CAPTURE(head_dim);
  const std::string kv_name = kv::to_string(t);
  CAPTURE(kv_name);
  CAPTURE(page_tokens);
  CAPTURE(n_splits);
  test::attn_case c(n_kv_heads, group, head_dim, head_dim / 4, t, page_tokens, 1024 / page_tokens * 4, seed);
  std::vector<size_t> batch, hist_batch;
  std::vector<int64_t> hist, fresh;
  for (size_t i = 0; i < lens.size(); ++i) {
    c.grow(i, lens[i].first + lens[i].second);
    batch.push_back(i), fresh.push_back(lens[i].second);
    if (lens[i].first > 0) hist_batch.push_back(i), hist.push_back(lens[i].first);
  }
  if (!hist_batch.empty()) Q35_REQUIRE_OK(c.step(hist_batch, hist, true, 0).st);
  auto r = c.step(batch, fresh, true, n_splits);
  Q35_REQUIRE_OK(r.st);
  const check_result res = check_mma(c, r.out, batch, fresh);
  CHECK(res.bad == 0);
  CHECK(res.rms_rel <= rms_limit);
}

TEST_CASE("attention prefill mma: ragged batches, GQA 1 2 4 6 8, head_dim 128 and 256, f16 and bf16 KV" *
          test::needs_device()) {
  // (cached, new): a fresh prompt not a multiple of any tile, a cached prefix ending inside a page
  // plus a chunk, a long cached prefix plus a few tokens crossing a page boundary
  const std::vector<std::pair<int64_t, int64_t>> lens{{0, 37}, {21, 12}, {45, 4}};
  ragged(2, 1, 128, kv_type::f16, 16, lens, 1, 201);
  ragged(2, 2, 256, kv_type::bf16, 16, lens, 1, 202);
  ragged(1, 4, 128, kv_type::bf16, 4, lens, 1, 203);  // 4-token pages: a tile spans 8 pages
  ragged(1, 4, 256, kv_type::f16, 64, lens, 1, 204);
  ragged(1, 6, 128, kv_type::f16, 16, lens, 1, 205);
  ragged(1, 6, 256, kv_type::bf16, 16, lens, 1, 206);
  ragged(1, 8, 128, kv_type::bf16, 16, lens, 1, 207);
  ragged(1, 8, 256, kv_type::f16, 8, lens, 1, 208);
}

TEST_CASE("attention prefill mma: split-KV partials and the merge, automatic and forced splits" *
          test::needs_device()) {
  // automatic (2 splits of 40 keys) and 3 forced (28 keys; the 12-key sequence has 2 empty ones)
  const std::vector<std::pair<int64_t, int64_t>> lens{{70, 5}, {3, 9}};
  ragged(1, 4, 128, kv_type::f16, 16, lens, 0, 211);
  ragged(1, 2, 256, kv_type::bf16, 16, lens, 3, 212);
  // 5 forced become 4 splits of 12 keys (not a multiple of the 32-key tile); the 1-token sequence
  // leaves 3 of them without keys
  ragged(2, 2, 128, kv_type::bf16, 16, {{40, 2}, {0, 1}}, 5, 213);
}

TEST_CASE("attention prefill mma: every thread order" * test::needs_device()) {
  test::attn_case c(1, 4, 128, 32, kv_type::f16, 16, 64, 221);
  c.grow(0, 20), c.grow(1, 16);
  Q35_REQUIRE_OK(c.step({1}, {9}, true, 0, true).st);
  test::for_each_order([&] {
    auto r = c.step({0, 1}, {20, 7}, true, 1);
    Q35_REQUIRE_OK(r.st);
    const check_result res = check_mma(c, r.out, {0, 1}, {20, 7});
    CHECK(res.bad == 0);
    CHECK(res.rms_rel <= rms_limit);
    c.seqs[0].len -= 20, c.seqs[1].len -= 7;  // the same step again
  });
}

// A NaN in a q projection spoils its (token, head) row only (the norm spreads it over the head),
// not the other heads sharing its mma tiles, and the row reads as attn_paged_kernel (f32 KV) leaves
// it: l = NaN fails "l > 0", so both write 0. A NaN gate element spoils only its own output element.
TEST_CASE("attention prefill mma: NaN in q stays in its row, as attn_paged_kernel; a NaN gate in its element" *
          test::needs_device()) {
  const int D = 128, H = 4;
  const size_t nan_row = size_t((11 * H + 2) * D);  // token 11, head 2
  std::vector<float> paged_row;
  for (kv_type t : {kv_type::f32, kv_type::f16, kv_type::bf16}) {
    const std::string kv_name = kv::to_string(t);
    CAPTURE(kv_name);
    test::attn_case c(1, 4, 128, 32, t, 16, 64, 231);
    c.grow(0, 30);
    c.seqs[0].qg[size_t((11 * H + 2) * 2 * D + 7)] = NAN;  // q dim 7
    auto r = c.step({0}, {30}, true, 1);
    Q35_REQUIRE_OK(r.st);
    const std::vector<float> row(r.out.begin() + long(nan_row), r.out.begin() + long(nan_row + D));
    if (t == kv_type::f32) {
      paged_row = row;
      continue;
    }
    const check_result res = check_mma(c, r.out, {0}, {30}, {{0, 11, 2}});
    CHECK(res.bad == 0);
    int64_t differ = 0;
    for (int d = 0; d < D; ++d)
      differ +=
          !(row[size_t(d)] == paged_row[size_t(d)] || (std::isnan(row[size_t(d)]) && std::isnan(paged_row[size_t(d)])));
    CHECK(differ == 0);
    MESSAGE("the NaN row reads " << row[0] << " (attn_paged_kernel: " << paged_row[0] << ")");
  }
  test::attn_case c(1, 2, 256, 64, kv_type::bf16, 16, 64, 232);
  c.grow(0, 9);
  const int D2 = 256, H2 = 2;
  c.seqs[0].qg[size_t((4 * H2 + 1) * 2 * D2 + D2 + 100)] = NAN;  // token 4, head 1, gate dim 100
  auto r = c.step({0}, {9}, true, 1);
  Q35_REQUIRE_OK(r.st);
  int64_t nans = 0;
  for (size_t i = 0; i < r.out.size(); ++i) nans += std::isnan(r.out[i]);
  CHECK(nans == 1);
  CHECK(std::isnan(r.out[size_t((4 * H2 + 1) * D2 + 100)]));
}

// The invariant of test_attention.cpp for the other type and width: bf16, head_dim 256, a group of 8
// (8 tokens per block), the prompt whole and in chunks of 17, 16, 1 and 16 tokens.
TEST_CASE("attention prefill mma: whole prompt and chunks are bit-identical, bf16 head_dim 256" *
          test::needs_device()) {
  test::attn_case whole(1, 8, 256, 64, kv_type::bf16, 16, 64, 241);
  test::attn_case chunked(1, 8, 256, 64, kv_type::bf16, 16, 64, 241);
  whole.grow(0, 50);
  chunked.grow(0, 50);
  auto w = whole.step({0}, {50}, true, 1);
  Q35_REQUIRE_OK(w.st);
  CHECK(check_mma(whole, w.out, {0}, {50}).bad == 0);
  CHECK(test::count_differences(test::prefill_in_chunks(chunked, {17, 16, 1, 16}), w.out) == 0);
}

#if Q35_BACKEND_SIM
// The instance follows the device's shared memory (launch::max_shared_bytes): head_dim 256 needs 102 /
// 133 KB (f16 / bf16) for 4 row warps, more than sm_86 / sm_89 give a block (99 KB, the sim's default),
// so there it runs 2 (32 rows per block). A row's result does not depend on which rows share its block,
// so with one split both give the same bits; each is checked against the reference on its own.
TEST_CASE(
    "attention prefill mma: head_dim 256 runs 4 row warps where a block has their shared memory, else "
    "2, with the same bits") {
  using launch::detail::attn_mma_rows;
  const size_t limits[] = {99 * 1024, 163 * 1024, 227 * 1024};  // sm_86 / sm_89, sm_80, sm_90
  for (const kv_type t : {kv_type::f16, kv_type::bf16}) {
    const std::string kv_name = kv::to_string(t);
    CAPTURE(kv_name);
    std::vector<float> out[3];
    for (int i = 0; i < 3; ++i) {
      sim::options o = sim::current_options();
      o.max_shared_bytes = limits[i];
      sim::scoped_options scope(o);
      CHECK(attn_mma_rows(t, 128) == 64);
      CHECK(attn_mma_rows(t, 256) == (i == 0 ? 32 : 64));
      // a group of 8: 4 or 8 tokens per block; a cached prefix and ragged new tokens
      test::attn_case c(1, 8, 256, 64, t, 16, 64, 251);
      c.grow(0, 29), c.grow(1, 20);
      Q35_REQUIRE_OK(c.step({1}, {9}, true, 1).st);
      auto r = c.step({0, 1}, {29, 11}, true, 1);
      Q35_REQUIRE_OK(r.st);
      REQUIRE(c.last_step_mma);
      const check_result res = check_mma(c, r.out, {0, 1}, {29, 11});
      CHECK(res.bad == 0);
      CHECK(res.rms_rel <= rms_limit);
      out[i] = r.out;
    }
    CHECK(test::count_differences(out[0], out[2]) == 0);
    CHECK(test::count_differences(out[1], out[2]) == 0);
  }
}
#endif

}  // namespace
