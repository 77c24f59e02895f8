// Weight-streaming GEMV on the Qwen3.5-9B decode shapes, per weight format and token count: time,
// bytes moved, GB/s and % of the measured copy bandwidth. Weights rotate over enough copies to
// exceed 4x L2, so every launch streams from HBM. Skips without a GPU.
#include <algorithm>
#include <cstdint>
#include <vector>

#include "bench_util.hpp"
#include "q35/launch/gemv.hpp"

namespace {

using namespace q35;

// Copies of a weight tensor the benchmark cycles through: together > 4x L2, at least 2, at most
// what fits in 16 GB.
[[maybe_unused]] int rotation_count(size_t weight_bytes) {
#if Q35_BACKEND_CUDA
  const size_t want = 4 * bench::l2_bytes();
  const size_t n = std::max<size_t>(2, (want + weight_bytes - 1) / weight_bytes);
  return int(std::min<size_t>(n, std::max<size_t>(2, (size_t(16) << 30) / weight_bytes)));
#else
  (void)weight_bytes;
  return 2;
#endif
}

// y = W x (epilogue store) or y = silu(W_g x) * (W_u x) (swiglu) for args {rows, cols, n_tokens}.
template <class Format, ops::epilogue Epilogue>
void bm_gemv(benchmark::State& state) {
  if (bench::skip_without_gpu(state)) return;
#if Q35_BACKEND_CUDA
  const int64_t rows = state.range(0), cols = state.range(1);
  const int n_tokens = int(state.range(2));
  const int n_mats = ops::epilogue_mats<Epilogue>;
  const size_t w_bytes = size_t(rows) * size_t(Format::row_bytes(cols));
  const int n_rot = rotation_count(w_bytes * n_mats);
  std::vector<device_buffer<uint8_t>> w(size_t(n_rot * n_mats));
  for (auto& b : w) {
    // 0x3c bytes: finite scales (f16 0x3c3c ~ 1.06) and quants; timing does not depend on values
    if (!b.allocate(w_bytes).ok() || !fill_bytes(b.data(), 0x3c, w_bytes).ok()) {
      state.SkipWithError("weight allocation failed");
      return;
    }
  }
  device_buffer<float> x, y;
  if (!x.allocate(size_t(n_tokens * cols)).ok() || !y.allocate(size_t(n_tokens * rows)).ok() ||
      !fill_bytes(x.data(), 0, x.bytes()).ok()) {
    state.SkipWithError("activation allocation failed");
    return;
  }
  auto args = [&](int i) {
    launch::gemv_args<Format> a;
    a.w = reinterpret_cast<const typename Format::block*>(w[size_t(i * n_mats)].data());
    if (n_mats == 2) a.maybe_w_up = reinterpret_cast<const typename Format::block*>(w[size_t(i * n_mats + 1)].data());
    a.x = x.data(), a.y = y.data(), a.rows = rows, a.cols = cols, a.n_tokens = n_tokens, a.epilogue = Epilogue;
    return a;
  };
  bench::time_launches(state, [&](int i) { return launch::gemv(args(i % n_rot)); });
  // bytes: every weight once, x once per block row tile is served by L2 (counted once), y written
  bench::report_bytes(state, double(w_bytes * n_mats) + 4.0 * double(n_tokens) * double(cols + rows));
  state.SetLabel(bench::device_name() + " " + Format::name);
#endif
}

// Expert mode, Qwen3.5-35B-A3B decode: fused gate+up of the top-8 of 256 experts (2048 -> 512 each),
// one token, args {n_pairs}. Ids are spread over all experts and change every iteration (a fresh
// top-8 per step), so the weights come from HBM; bytes = the 2 x n_pairs expert matrices read.
template <class Format>
void bm_gemv_experts(benchmark::State& state) {
  if (bench::skip_without_gpu(state)) return;
#if Q35_BACKEND_CUDA
  const int n_experts = 256, n_pairs = int(state.range(0));
  const int64_t rows = 512, cols = 2048;
  const size_t w_bytes = size_t(n_experts) * size_t(rows) * size_t(Format::row_bytes(cols));
  device_buffer<uint8_t> wg, wu;
  device_buffer<float> x, y;
  device_buffer<int32_t> ids;
  device_buffer<int> flag;
  const int n_steps = 64;  // id sets cycled through
  std::vector<int32_t> host_ids(size_t(n_steps * n_pairs));
  for (size_t i = 0; i < host_ids.size(); ++i) host_ids[i] = int32_t((i * 37 + i / size_t(n_pairs) * 11) % n_experts);
  if (!wg.allocate(w_bytes).ok() || !wu.allocate(w_bytes).ok() || !fill_bytes(wg.data(), 0x3c, w_bytes).ok() ||
      !fill_bytes(wu.data(), 0x3c, w_bytes).ok() || !x.allocate(size_t(cols)).ok() ||
      !fill_bytes(x.data(), 0, x.bytes()).ok() || !y.allocate(size_t(n_pairs * rows)).ok() ||
      !ids.allocate(host_ids.size()).ok() || !ids.upload(host_ids.data(), host_ids.size()).ok() ||
      !flag.allocate(1).ok() || !fill_bytes(flag.data(), 0, flag.bytes()).ok()) {
    state.SkipWithError("allocation failed");
    return;
  }
  auto args = [&](int step) {
    launch::gemv_args<Format> a;
    a.w = reinterpret_cast<const typename Format::block*>(wg.data());
    a.maybe_w_up = reinterpret_cast<const typename Format::block*>(wu.data());
    a.x = x.data(), a.y = y.data(), a.rows = rows, a.cols = cols, a.epilogue = ops::epilogue::swiglu;
    a.maybe_expert_ids = ids.data() + step * n_pairs, a.n_pairs = n_pairs, a.n_experts = n_experts;
    a.x_group_div = n_pairs, a.maybe_error_flag = flag.data();
    return a;
  };
  bench::time_launches(state, [&](int i) { return launch::gemv(args(i % n_steps)); });
  bench::report_bytes(state, 2.0 * n_pairs * double(rows) * double(Format::row_bytes(cols)));
  state.SetLabel(bench::device_name() + " " + Format::name + " experts");
#endif
}
BENCHMARK_TEMPLATE(bm_gemv_experts, quant::q4_k_format)
    ->Arg(8)
    ->ArgName("pairs")
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);

// Qwen3.5-9B decode shapes {rows, cols} x tokens 1, 2, 4, 8.
void decode_shapes(benchmark::internal::Benchmark* b) {
  for (int64_t tokens : {1, 2, 4, 8}) {
    b->Args({12288, 4096, tokens});  // FFN gate / up
    b->Args({4096, 12288, tokens});  // FFN down
    b->Args({8192, 4096, tokens});   // GDN in-projection
  }
  b->ArgNames({"rows", "cols", "tokens"})->UseManualTime()->Unit(benchmark::kMicrosecond);
}
void head_shapes(benchmark::internal::Benchmark* b) {
  for (int64_t tokens : {1, 2, 4, 8}) b->Args({248320, 4096, tokens});  // output head
  b->ArgNames({"rows", "cols", "tokens"})->UseManualTime()->Unit(benchmark::kMicrosecond);
}
void gate_up_shapes(benchmark::internal::Benchmark* b) {
  for (int64_t tokens : {1, 2, 4, 8}) b->Args({12288, 4096, tokens});
  b->ArgNames({"rows", "cols", "tokens"})->UseManualTime()->Unit(benchmark::kMicrosecond);
}

constexpr auto store = ops::epilogue::store;
constexpr auto swiglu = ops::epilogue::swiglu;
BENCHMARK_TEMPLATE(bm_gemv, quant::q4_k_format, store)->Apply(decode_shapes);
BENCHMARK_TEMPLATE(bm_gemv, quant::q5_k_format, store)->Apply(decode_shapes);
BENCHMARK_TEMPLATE(bm_gemv, quant::q6_k_format, store)->Apply(decode_shapes);
BENCHMARK_TEMPLATE(bm_gemv, quant::q8_0_format, store)->Apply(decode_shapes);
BENCHMARK_TEMPLATE(bm_gemv, quant::q4_0_format, store)->Apply(decode_shapes);
BENCHMARK_TEMPLATE(bm_gemv, quant::f16_format, store)->Apply(decode_shapes);
BENCHMARK_TEMPLATE(bm_gemv, quant::bf16_format, store)->Apply(decode_shapes);
BENCHMARK_TEMPLATE(bm_gemv, quant::f32_format, store)->Apply(decode_shapes);
BENCHMARK_TEMPLATE(bm_gemv, quant::q6_k_format, store)->Apply(head_shapes);
BENCHMARK_TEMPLATE(bm_gemv, quant::q4_k_format, swiglu)->Apply(gate_up_shapes);
BENCHMARK_TEMPLATE(bm_gemv, quant::q8_0_format, swiglu)->Apply(gate_up_shapes);

}  // namespace
