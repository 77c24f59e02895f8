// launch::add_logit_bias against a float reference that adds each listed bias in list order (llama.cpp's
// logit-bias sampler): bit for bit, out of place and in place, with duplicates, empty slots, infinite
// biases, full lists and a Qwen3.5-sized row; bad ids raise the flag; bad arguments name themselves.
// Then the sampler sees the biased row: greedy picks what the bias makes largest, and the penalties
// act on the biased logits (llama.cpp's order).
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "q35/launch/logit_bias.hpp"
#include "q35/launch/sample.hpp"
#include "test_util.hpp"

namespace {

using namespace q35;
using launch::logit_bias_entry;

// out = logits, then out[id] += bias for every valid entry, in list order (plain float additions).
std::vector<float> reference(std::vector<float> logits, int n_rows, int n_vocab,
                             const std::vector<logit_bias_entry>& lists, int width) {
  for (int r = 0; r < n_rows; ++r)
    for (int i = 0; i < width; ++i) {
      const logit_bias_entry e = lists[size_t(r) * size_t(width) + size_t(i)];
      if (e.id >= 0 && e.id < n_vocab) {
        float& l = logits[size_t(r) * size_t(n_vocab) + size_t(e.id)];
        l = l + e.bias;
      }
    }
  return logits;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// Random lists: ids drawn from a few hot ids (duplicates) and the whole vocabulary, some empty slots.
std::vector<logit_bias_entry> random_lists(int n_rows, int n_vocab, int width, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int> any_id(0, n_vocab - 1), hot(0, 3), kind(0, 9);
  std::uniform_real_distribution<float> b(-100.0f, 100.0f);
  std::vector<logit_bias_entry> lists(size_t(n_rows) * size_t(width));
  for (logit_bias_entry& e : lists) {
    const int k = kind(rng);
    e.id = k == 0 ? -1 : k < 4 ? hot(rng) * 7 % n_vocab : any_id(rng);
    e.bias = b(rng);
  }
  return lists;
}

struct run_result {
  std::vector<float> out, in_after;
  int flag = 0;
};

run_result run(const std::vector<float>& logits, int n_rows, int n_vocab, const std::vector<logit_bias_entry>& lists,
               int width, bool in_place) {
  auto d_in = test::to_device(logits);
  auto d_out = test::poisoned<float>(logits.size());
  auto d_lists = test::to_device(lists.empty() ? std::vector<logit_bias_entry>(1) : lists);
  auto d_flag = test::to_device(std::vector<int>{0});
  launch::logit_bias_args a;
  a.logits = d_in.data(), a.out = in_place ? d_in.data() : d_out.data();
  a.n_rows = n_rows, a.n_vocab = n_vocab, a.lists = d_lists.data(), a.width = width;
  a.maybe_error_flag = d_flag.data();
  Q35_REQUIRE_OK(launch::add_logit_bias(a));
  run_result r;
  r.in_after = test::to_host(d_in);
  r.out = in_place ? r.in_after : test::to_host(d_out);
  r.flag = test::to_host(d_flag)[0];
  return r;
}

}  // namespace

TEST_CASE("add_logit_bias: each listed bias added in list order, bit for bit, the rest copied" * test::needs_device()) {
  struct shape {
    int n_rows, n_vocab, width;
  };
  const shape shapes[] = {{1, 1, 1}, {3, 1000, 5}, {2, 37, 300}, {4, 5000, launch::logit_bias_max_entries}};
  for (const shape& s : shapes)
    for (const bool in_place : {false, true}) {
      CAPTURE(s.n_rows);
      CAPTURE(s.n_vocab);
      CAPTURE(s.width);
      CAPTURE(in_place);
      const auto logits = test::random_floats(size_t(s.n_rows) * size_t(s.n_vocab), 11, -30.0f, 30.0f);
      const auto lists = random_lists(s.n_rows, s.n_vocab, s.width, 5 + uint64_t(s.width));
      const auto want = reference(logits, s.n_rows, s.n_vocab, lists, s.width);
      REQUIRE(!same_bits(want, logits));  // the case changes something
      test::for_each_order([&] {
        const run_result r = run(logits, s.n_rows, s.n_vocab, lists, s.width, in_place);
        CHECK(same_bits(r.out, want));
        if (!in_place) CHECK(same_bits(r.in_after, logits));  // the input is not modified
        CHECK(r.flag == 0);
      });
    }
}

TEST_CASE("add_logit_bias: duplicates round after each addition; infinities; a Qwen3.5 row" * test::needs_device()) {
  const int n_vocab = 248320;
  std::vector<float> logits = test::random_floats(size_t(n_vocab), 3, -20.0f, 20.0f);
  logits[10] = 1.0f;
  // 1 + 2^-24 rounds to 1 each time; summed first (2^-23) it would not
  const float tiny = std::ldexp(1.0f, -24);
  const std::vector<logit_bias_entry> list = {{10, tiny}, {n_vocab - 1, -INFINITY}, {-1, 5.0f},
                                              {10, tiny}, {77, INFINITY},           {123456, 2.5f}};
  const int width = int(list.size());
  const run_result r = run(logits, 1, n_vocab, list, width, false);
  const auto want = reference(logits, 1, n_vocab, list, width);
  CHECK(same_bits(r.out, want));
  CHECK(r.out[10] == 1.0f);
  CHECK(r.out[size_t(n_vocab - 1)] == -INFINITY);
  CHECK(r.out[77] == INFINITY);
  CHECK(r.out[123456] == logits[123456] + 2.5f);
  CHECK(r.flag == 0);
}

TEST_CASE("add_logit_bias: an id outside [-1, n_vocab) raises the flag and the other entries still apply" *
          test::needs_device()) {
  const int n_vocab = 100;
  const auto logits = test::random_floats(size_t(n_vocab), 4);
  for (const int32_t bad : {-2, n_vocab, 1 << 30}) {
    CAPTURE(bad);
    const std::vector<logit_bias_entry> list = {{3, 1.0f}, {bad, 1.0f}, {4, -2.0f}};
    const run_result r = run(logits, 1, n_vocab, list, 3, false);
    CHECK(r.flag == 1);
    CHECK(same_bits(r.out, reference(logits, 1, n_vocab, list, 3)));
  }
}

TEST_CASE("add_logit_bias: width 0 copies; the arguments and host lists are checked by name") {
  SUBCASE("width 0") {
    if (!device_available()) return;
    const auto logits = test::random_floats(64, 8);
    CHECK(same_bits(run(logits, 1, 64, {}, 0, false).out, logits));
  }
  float x = 0.0f;
  const logit_bias_entry e{};
  const auto fails_with = [](const launch::logit_bias_args& a, const char* text) {
    const status s = launch::add_logit_bias(a);
    CHECK(!s.ok());
    CHECK(s.message().find(text) != std::string::npos);
  };
  launch::logit_bias_args a;
  a.logits = &x, a.out = &x, a.n_rows = 1, a.n_vocab = 1, a.lists = &e, a.width = 1;
  auto b = a;
  b.n_rows = -1;
  fails_with(b, "n_rows = -1");
  b = a, b.n_vocab = 0;
  fails_with(b, "n_vocab = 0");
  b = a, b.width = launch::logit_bias_max_entries + 1;
  fails_with(b, "width = 1025 is outside 0..1024");
  b = a, b.lists = nullptr;
  fails_with(b, "lists is null");
  b = a, b.out = nullptr;
  fails_with(b, "logits or out is null");

  CHECK(launch::check_logit_bias(std::vector<logit_bias_entry>{{0, 1.0f}, {-1, 0.0f}, {9, -INFINITY}}, 10).ok());
  const status s1 = launch::check_logit_bias(std::vector<logit_bias_entry>{{0, 1.0f}, {10, 1.0f}}, 10);
  CHECK(s1.message().find("entry 1: id 10 is outside the vocabulary of 10 tokens") != std::string::npos);
  const status s2 = launch::check_logit_bias(std::vector<logit_bias_entry>{{-2, 1.0f}}, 10);
  CHECK(s2.message().find("id -2 is outside") != std::string::npos);
  const status s3 = launch::check_logit_bias(std::vector<logit_bias_entry>{{3, NAN}}, 10);
  CHECK(s3.message().find("entry 0 (id 3): the bias is NaN") != std::string::npos);
  const status s4 = launch::check_logit_bias(std::vector<logit_bias_entry>(1025), 10);
  CHECK(s4.message().find("1025 entries exceed the 1024") != std::string::npos);
}

TEST_CASE("sampling a biased row: greedy follows the bias, and the penalties act on the biased logits" *
          test::needs_device()) {
  const int n_vocab = 2000;
  std::vector<float> logits(size_t(n_vocab), 0.0f);
  logits[5] = 3.0f;     // the unbiased argmax
  logits[900] = -1.0f;  // the biased id
  logits[901] = 0.6f;   // never penalised (not in the window)
  const auto d_logits = test::to_device(logits);
  auto d_biased = test::poisoned<float>(logits.size());
  const auto d_recent = test::to_device(std::vector<int32_t>{5, 900, 5});
  auto d_id = test::to_device(std::vector<int32_t>{-7});

  const auto argmax_after = [&](const std::vector<logit_bias_entry>& list, bool penalize) {
    const auto d_list = test::to_device(list);
    launch::logit_bias_args b;
    b.logits = d_logits.data(), b.out = d_biased.data(), b.n_rows = 1, b.n_vocab = n_vocab;
    b.lists = d_list.data(), b.width = int(list.size());
    Q35_REQUIRE_OK(launch::add_logit_bias(b));
    launch::sample_args a;
    a.logits = d_biased.data(), a.n_rows = 1, a.n_vocab = n_vocab, a.out_ids = d_id.data();
    a.params.temperature = 0.0f;
    a.params.repeat_penalty = penalize ? 2.0f : 1.0f;
    a.params.repeat_last_n = 3;
    a.maybe_recent = d_recent.data();
    Q35_REQUIRE_OK(launch::sample(a));
    return test::to_host(d_id)[0];
  };
  CHECK(argmax_after({}, false) == 5);
  CHECK(argmax_after({{900, 4.5f}}, false) == 900);  // 3.5 > 3
  CHECK(argmax_after({{900, 4.5f}, {5, -5.0f}}, false) == 900);
  // with the repetition penalty 2 over the window {5, 900}: 5 -> 3 / 2 = 1.5, 900 -> (-1 + 4.5) / 2 = 1.75
  CHECK(argmax_after({{900, 4.5f}}, true) == 900);
  // 900 -> (-1 + 2.5) / 2 = 0.75 beats 901's 0.6 (5 -> 0); had the penalty come before the bias, 900
  // would be -1 * 2 + 2.5 = 0.5 and 901 would win
  CHECK(argmax_after({{900, 2.5f}, {5, -3.0f}}, true) == 900);
  CHECK(argmax_after({{5, -INFINITY}, {900, -INFINITY}}, true) == 901);  // banned ids never win
}
