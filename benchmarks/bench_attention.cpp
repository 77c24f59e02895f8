// Paged attention at the Qwen3.5-9B shapes (16 q heads, 4 KV heads, head_dim 256, f16 KV, 16-token
// pages in shuffled order): decode at contexts 1k-128k for batch 1 and 8 (time, K/V bytes read, % of
// the measured copy bandwidth; floor = K/V bytes / bandwidth), also with the decoder's per-sequence
// splits (attn_batch::seq_splits), and prefill (attn_prefill_mma_kernel) of
// 512 / 2048-token prompts and of 512-token chunks after 4k / 16k cached tokens (TFLOPS of the causal
// Q K^T and P V products, 4 D flops per (row, visible key)).
// Small caches rotate over several layers' views so every launch reads K/V from HBM. Skips without a GPU.
#include <algorithm>
#include <cstdint>
#include <numeric>
#include <random>
#include <vector>

#include "bench_util.hpp"
#include "q35/kv/kv_pool.hpp"
#include "q35/launch/attention.hpp"

namespace {

using namespace q35;

[[maybe_unused]] constexpr int n_heads = 16, n_kv_heads = 4, head_dim = 256, page_tokens = 16;

// n_seqs sequences of ctx tokens each (n_new of them new), pages shuffled over the pool, attention
// decode (n_new == 1) or prefill timed alone (the K/V are whatever the pool holds: 0x3c bytes);
// seq_splits > 0: attn_batch::seq_splits (the decoder's decode groups), else the automatic split count.
[[maybe_unused]] void run_attention(benchmark::State& state, int64_t ctx, int n_seqs, int n_new, int seq_splits = 0) {
  if (bench::skip_without_gpu(state)) return;
#if Q35_BACKEND_CUDA
  const int64_t pages_per_seq = (ctx + page_tokens - 1) / page_tokens;
  const int64_t n_pages = pages_per_seq * n_seqs;
  const size_t layer_bytes = size_t(n_pages) * page_tokens * n_kv_heads * head_dim * 2 * 2;
  const int n_layers = int(std::clamp<size_t>((4 * bench::l2_bytes() + layer_bytes - 1) / layer_bytes, 1, 64));
  kv::kv_pool pool;
  if (!pool.allocate({n_layers, n_kv_heads, head_dim, head_dim, page_tokens, n_pages, kv::kv_type::f16}).ok() ||
      !fill_bytes(pool.layer(0).k, 0x3c, pool.bytes()).ok()) {
    state.SkipWithError("KV pool allocation failed");
    return;
  }
  std::vector<int32_t> pages(static_cast<size_t>(n_pages));
  std::iota(pages.begin(), pages.end(), 0);
  std::shuffle(pages.begin(), pages.end(), std::mt19937(1));
  std::vector<int32_t> rows, offs, pos, lens;
  for (int s = 0; s <= n_seqs; ++s) rows.push_back(int32_t(s * pages_per_seq)), offs.push_back(s * n_new);
  for (int s = 0; s < n_seqs; ++s) {
    lens.push_back(int32_t(ctx));
    for (int t = 0; t < n_new; ++t) pos.push_back(int32_t(ctx - n_new + t));
  }
  device_buffer<int32_t> d_pages, d_rows, d_offs, d_pos, d_lens;
  device_buffer<float> qg, out;
  device_buffer<unsigned char> ws;
  const int64_t n_tokens = int64_t(n_seqs) * n_new;
  const launch::attn_shape shape{4096, n_heads, n_kv_heads, head_dim, head_dim, 64, 1e7f, 1e-6f};
  // the decoder sizes the partials for every row of a group at seq_splits (attn_batch::split_rows)
  const int64_t split_rows = std::max<int64_t>(launch::attn_split_row_budget, n_tokens * seq_splits);
  bool ok = d_pages.allocate(pages.size()).ok() && d_pages.upload(pages.data(), pages.size()).ok() &&
            d_rows.allocate(rows.size()).ok() && d_rows.upload(rows.data(), rows.size()).ok() &&
            d_offs.allocate(offs.size()).ok() && d_offs.upload(offs.data(), offs.size()).ok() &&
            d_pos.allocate(pos.size()).ok() && d_pos.upload(pos.data(), pos.size()).ok() &&
            d_lens.allocate(lens.size()).ok() && d_lens.upload(lens.data(), lens.size()).ok() &&
            qg.allocate(size_t(n_tokens) * n_heads * 2 * head_dim).ok() && fill_bytes(qg.data(), 0, qg.bytes()).ok() &&
            out.allocate(size_t(n_tokens) * n_heads * head_dim).ok() &&
            ws.allocate(launch::attn_split_workspace_bytes(shape, split_rows)).ok();
  if (!ok) {
    state.SkipWithError("allocation failed");
    return;
  }
  launch::attn_batch b{
      d_offs.data(), d_pos.data(), d_rows.data(), d_pages.data(), d_lens.data(), n_seqs, n_tokens, n_new, ctx, 0};
  b.seq_splits = seq_splits, b.split_rows = int(split_rows);
  bench::time_launches(state, [&](int i) {
    const launch::attn_core_args a{shape, b, pool.layer(i % n_layers), qg.data(), out.data(), ws.data(), ws.bytes()};
    return n_new == 1 ? launch::attention_decode(a) : launch::attention_prefill(a);
  });
  // K/V read once per (sequence, kv head) in decode; prefill re-reads them from L2 per token tile
  const double kv_bytes = double(n_seqs) * double(ctx) * n_kv_heads * head_dim * 2 * 2;
  bench::report_bytes(state, kv_bytes);
  state.counters["tokens/s"] = benchmark::Counter(double(n_tokens), benchmark::Counter::kIsIterationInvariantRate);
  if (n_new > 1) {
    // token t of a sequence sees ctx - n_new + t + 1 keys
    const double visible = double(n_seqs) * (double(n_new) * double(ctx - n_new) + 0.5 * double(n_new) * (n_new + 1));
    state.counters["TFLOPS"] =
        benchmark::Counter(4.0 * n_heads * head_dim * visible * 1e-12, benchmark::Counter::kIsIterationInvariantRate);
  }
  state.SetLabel(bench::device_name() + ", " + std::to_string(n_layers) + " layer views rotated");
#else
  (void)ctx, (void)n_seqs, (void)n_new, (void)seq_splits;
#endif
}

// args {context, batch}
void bm_attention_decode(benchmark::State& state) { run_attention(state, state.range(0), int(state.range(1)), 1); }
// args {context, batch, seq_splits}: decode as the decoder runs it (128 splits per sequence alone, 32 in
// a batch-invariant group of 8 or 64), to compare with the automatic choice above at the same shape; and
// 4 per sequence, what a 64-row group of the GEMM mode had before its partials grew with the group
void bm_attention_decode_seq_splits(benchmark::State& state) {
  run_attention(state, state.range(0), int(state.range(1)), 1, int(state.range(2)));
}
// args {prompt tokens}: a whole prompt into an empty cache, one sequence
void bm_attention_prefill(benchmark::State& state) { run_attention(state, state.range(0), 1, int(state.range(0))); }
// args {context, new tokens}: a chunk of a prompt after the cached rest of it, one sequence
void bm_attention_prefill_chunk(benchmark::State& state) {
  run_attention(state, state.range(0), 1, int(state.range(1)));
}

BENCHMARK(bm_attention_decode)
    ->ArgsProduct({{1024, 8192, 32768, 131072}, {1, 8}})
    ->ArgNames({"ctx", "batch"})
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(bm_attention_decode_seq_splits)
    ->Args({1024, 1, 128})
    ->Args({8192, 1, 128})
    ->Args({32768, 1, 128})
    ->Args({1024, 8, 32})
    ->Args({8192, 8, 32})
    ->Args({32768, 8, 32})
    ->Args({32768, 1, 4})
    ->Args({32768, 1, 32})
    ->Args({4096, 64, 4})
    ->Args({4096, 64, 32})
    ->ArgNames({"ctx", "batch", "splits"})
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(bm_attention_prefill)->Arg(512)->Arg(2048)->ArgName("tokens")->UseManualTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(bm_attention_prefill_chunk)
    ->Args({4096, 512})
    ->Args({16384, 512})
    ->ArgNames({"ctx", "new"})
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);

}  // namespace
