// Device sampling of one Qwen3.5 logits row (248,320 entries) per step, as the decoder calls it:
// greedy, llama.cpp's defaults (the fast path), top-p over the whole vocabulary (no top-k: the
// general radix path when the window is large), plain temperature, and Qwen3.5's recommended setting
// (T 1, top-k 20, top-p 0.95, presence penalty 1.5) with a frequency penalty over windows of 64 and
// 4,096 ids (the penalty table's build and the passes' extra visits). Floor: one read of the
// logits (~1 MB per row), which stays in L2 between the LM head and the sampler in a real step;
// the time is mostly the one block per row (one SM) walking the row 3-10 times.
#include <cstdint>
#include <random>
#include <vector>

#include "bench_util.hpp"
#include "q35/launch/logit_bias.hpp"
#include "q35/launch/logprobs.hpp"
#include "q35/launch/sample.hpp"

namespace {

using namespace q35;

enum class sample_mode { greedy, defaults, top_p_only, temperature_only, penalties };

template <sample_mode Mode>
void bm_sample(benchmark::State& state) {
  if (bench::skip_without_gpu(state)) return;
#if Q35_BACKEND_CUDA
  const int n_vocab = 248320, n_rows = int(state.range(0));
  device_buffer<float> logits;
  device_buffer<int32_t> ids;
  device_buffer<uint64_t> counter;
  device_buffer<int32_t> recent;
  const int window = Mode == sample_mode::penalties ? int(state.range(1)) : 0;
  if (!logits.allocate(size_t(n_rows) * n_vocab).ok() || !ids.allocate(size_t(n_rows)).ok() ||
      !counter.allocate(1).ok() || !fill_bytes(counter.data(), 0, 8).ok() ||
      (window > 0 && !recent.allocate(size_t(n_rows) * size_t(window)).ok())) {
    state.SkipWithError("allocation failed");
    return;
  }
  // LM-head-like logits: N(0, 2.5), a few strong candidates
  std::mt19937_64 rng(1);
  std::normal_distribution<float> d(0.0f, 2.5f);
  std::vector<float> h(logits.size());
  for (auto& x : h) x = d(rng);
  for (int r = 0; r < n_rows; ++r) h[size_t(r) * n_vocab + size_t(r) * 7919 % n_vocab] += 12.0f;
  (void)logits.upload(h.data(), h.size());
  if (window > 0) {  // a generated text's ids: some frequent, most from a wide range
    std::vector<int32_t> w(recent.size());
    for (auto& id : w) id = int32_t(rng() % 4 == 0 ? rng() % 200 : rng() % uint64_t(n_vocab));
    (void)recent.upload(w.data(), w.size());
  }

  launch::sample_args a;
  a.logits = logits.data(), a.n_rows = n_rows, a.n_vocab = n_vocab;
  a.rng_counter = counter.data(), a.out_ids = ids.data();
  if (Mode == sample_mode::greedy) a.params.temperature = 0.0f;
  if (Mode == sample_mode::top_p_only) a.params.top_k = 0, a.params.min_p = 0.0f;
  if (Mode == sample_mode::temperature_only) a.params.top_k = 0, a.params.top_p = 1.0f, a.params.min_p = 0.0f;
  if (Mode == sample_mode::penalties) {
    a.params.temperature = 1.0f, a.params.top_k = 20, a.params.top_p = 0.95f, a.params.min_p = 0.0f;
    a.params.presence_penalty = 1.5f, a.params.frequency_penalty = 0.2f, a.params.repeat_last_n = window;
    a.maybe_recent = recent.data();
  }
  bench::time_launches(state, [&](int) { return launch::sample(a); });
  bench::report_bytes(state, double(n_rows) * n_vocab * sizeof(float));
  state.SetLabel(bench::device_name() + " n_vocab=248320");
#endif
}

BENCHMARK_TEMPLATE(bm_sample, sample_mode::greedy)->Arg(1)->Arg(4)->UseManualTime()->Unit(benchmark::kMicrosecond);
BENCHMARK_TEMPLATE(bm_sample, sample_mode::defaults)->Arg(1)->Arg(4)->UseManualTime()->Unit(benchmark::kMicrosecond);
BENCHMARK_TEMPLATE(bm_sample, sample_mode::top_p_only)->Arg(1)->UseManualTime()->Unit(benchmark::kMicrosecond);
BENCHMARK_TEMPLATE(bm_sample, sample_mode::temperature_only)->Arg(1)->UseManualTime()->Unit(benchmark::kMicrosecond);
BENCHMARK_TEMPLATE(bm_sample, sample_mode::penalties)
    ->Args({1, 64})
    ->Args({1, 4096})
    ->Args({4, 64})
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);

// The extras a request may ask for around the draw: launch::logprobs (one pass over the row, 20-entry
// lists) for 1 and 32 rows, and launch::add_logit_bias of a 16- and a 1,024-entry list (a row copy and
// one small launch). Floor: the rows' bytes (read once; the bias also writes the copy).
void bm_logprobs(benchmark::State& state) {
  if (bench::skip_without_gpu(state)) return;
#if Q35_BACKEND_CUDA
  const int n_vocab = 248320, n_rows = int(state.range(0));
  device_buffer<float> logits;
  device_buffer<int32_t> ids;
  device_buffer<launch::token_logprobs> out;
  if (!logits.allocate(size_t(n_rows) * n_vocab).ok() || !ids.allocate(size_t(n_rows)).ok() ||
      !out.allocate(size_t(n_rows)).ok() || !fill_bytes(ids.data(), 0, ids.bytes()).ok()) {
    state.SkipWithError("allocation failed");
    return;
  }
  std::mt19937_64 rng(2);
  std::normal_distribution<float> d(0.0f, 2.5f);
  std::vector<float> h(logits.size());
  for (auto& x : h) x = d(rng);
  (void)logits.upload(h.data(), h.size());
  launch::logprobs_args a;
  a.logits = logits.data(), a.n_rows = n_rows, a.n_vocab = n_vocab, a.ids = ids.data(), a.top_n = 20;
  a.out = out.data();
  bench::time_launches(state, [&](int) { return launch::logprobs(a); });
  bench::report_bytes(state, double(n_rows) * n_vocab * sizeof(float));
  state.SetLabel(bench::device_name() + " n_vocab=248320 top_n=20");
#endif
}

void bm_logit_bias(benchmark::State& state) {
  if (bench::skip_without_gpu(state)) return;
#if Q35_BACKEND_CUDA
  const int n_vocab = 248320, width = int(state.range(0));
  device_buffer<float> logits, biased;
  device_buffer<launch::logit_bias_entry> list;
  std::vector<launch::logit_bias_entry> h(static_cast<size_t>(width));
  for (int i = 0; i < width; ++i) h[size_t(i)] = {int32_t(i * 241 % n_vocab), 1.0f};
  if (!logits.allocate(size_t(n_vocab)).ok() || !biased.allocate(size_t(n_vocab)).ok() ||
      !fill_bytes(logits.data(), 0, logits.bytes()).ok() || !list.allocate(h.size()).ok() ||
      !list.upload(h.data(), h.size()).ok()) {
    state.SkipWithError("allocation failed");
    return;
  }
  launch::logit_bias_args a;
  a.logits = logits.data(), a.out = biased.data(), a.n_rows = 1, a.n_vocab = n_vocab;
  a.lists = list.data(), a.width = width;
  bench::time_launches(state, [&](int) { return launch::add_logit_bias(a); });
  bench::report_bytes(state, 2.0 * n_vocab * sizeof(float));
  state.SetLabel(bench::device_name() + " n_vocab=248320");
#endif
}

BENCHMARK(bm_logprobs)->Arg(1)->Arg(32)->UseManualTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(bm_logit_bias)->Arg(16)->Arg(1024)->UseManualTime()->Unit(benchmark::kMicrosecond);

}  // namespace
