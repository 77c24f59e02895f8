// The GEMV engine on every decode matrix of Qwen3.5-9B (Q4_K_M) and Qwen3.5-35B-A3B, at 1, 2, 4 and
// 8 tokens: time, bytes moved, GB/s and % of the measured copy bandwidth. The integer path runs as
// the decoder calls it (launch::gemv with a workspace: the activation quantization launch is inside
// the timed call); weights rotate over enough copies to exceed 4x L2, so every launch streams from
// HBM. Skips without a GPU.
#include <algorithm>
#include <cstdint>
#include <string>
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

// A plain (or fused gate+up) decode matrix: rows x cols, epilogue store or swiglu.
template <class Format, ops::epilogue Epilogue>
void bm_gemv(benchmark::State& state, int64_t rows, int64_t cols, int n_tokens) {
  if (bench::skip_without_gpu(state)) return;
#if Q35_BACKEND_CUDA
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
  device_buffer<uint8_t> ws;
  if (!x.allocate(size_t(n_tokens * cols)).ok() || !y.allocate(size_t(n_tokens * rows)).ok() ||
      !fill_bytes(x.data(), 0, x.bytes()).ok() || !ws.allocate(launch::gemv_workspace_bytes(cols, n_tokens)).ok()) {
    state.SkipWithError("activation allocation failed");
    return;
  }
  auto args = [&](int i) {
    launch::gemv_args<Format> a;
    a.w = reinterpret_cast<const typename Format::block*>(w[size_t(i * n_mats)].data());
    if (n_mats == 2) a.maybe_w_up = reinterpret_cast<const typename Format::block*>(w[size_t(i * n_mats + 1)].data());
    a.x = x.data(), a.y = y.data(), a.rows = rows, a.cols = cols, a.n_tokens = n_tokens, a.epilogue = Epilogue;
    a.maybe_workspace = ws.data(), a.workspace_bytes = ws.bytes();
    return a;
  };
  bench::time_launches(state, [&](int i) { return launch::gemv(args(i % n_rot)); });
  // bytes: every weight once, x read once (L2 serves the re-reads), y written
  bench::report_bytes(state, double(w_bytes * n_mats) + 4.0 * double(n_tokens) * double(cols + rows));
  state.SetLabel(bench::device_name() + " " + Format::name +
                 (launch::gemv_has_int_path(args(0)) ? " int16" : " float"));
#else
  (void)rows, (void)cols, (void)n_tokens;
#endif
}

// Expert mode (35B-A3B): the top-8 of 256 experts per token, n_tokens tokens (8 n_tokens pairs),
// rows x cols per expert; ids spread over all experts and changing every step (a fresh top-8 per
// step), so the weights come from HBM; bytes = the n_mats x pairs expert matrices read.
template <class Format, ops::epilogue Epilogue>
void bm_gemv_experts(benchmark::State& state, int64_t rows, int64_t cols, int n_tokens) {
  if (bench::skip_without_gpu(state)) return;
#if Q35_BACKEND_CUDA
  const int n_experts = 256, top_k = 8, n_pairs = top_k * n_tokens;
  const int n_mats = ops::epilogue_mats<Epilogue>;
  const size_t w_bytes = size_t(n_experts) * size_t(rows) * size_t(Format::row_bytes(cols));
  device_buffer<uint8_t> wg, wu, ws;
  device_buffer<float> x, y;
  device_buffer<int32_t> ids;
  device_buffer<int> flag;
  const int n_steps = 64;  // id sets cycled through
  std::vector<int32_t> host_ids(size_t(n_steps * n_pairs));
  for (size_t i = 0; i < host_ids.size(); ++i) host_ids[i] = int32_t((i * 37 + i / size_t(n_pairs) * 11) % n_experts);
  if (!wg.allocate(w_bytes).ok() || !wu.allocate(w_bytes).ok() || !fill_bytes(wg.data(), 0x3c, w_bytes).ok() ||
      !fill_bytes(wu.data(), 0x3c, w_bytes).ok() || !x.allocate(size_t(n_tokens * cols)).ok() ||
      !fill_bytes(x.data(), 0, x.bytes()).ok() || !y.allocate(size_t(n_pairs * rows)).ok() ||
      !ids.allocate(host_ids.size()).ok() || !ids.upload(host_ids.data(), host_ids.size()).ok() ||
      !flag.allocate(1).ok() || !fill_bytes(flag.data(), 0, flag.bytes()).ok() ||
      !ws.allocate(launch::gemv_workspace_bytes(cols, n_tokens)).ok()) {
    state.SkipWithError("allocation failed");
    return;
  }
  auto args = [&](int step) {
    launch::gemv_args<Format> a;
    a.w = reinterpret_cast<const typename Format::block*>(wg.data());
    if (n_mats == 2) a.maybe_w_up = reinterpret_cast<const typename Format::block*>(wu.data());
    a.x = x.data(), a.y = y.data(), a.rows = rows, a.cols = cols, a.epilogue = Epilogue;
    a.maybe_expert_ids = ids.data() + step * n_pairs, a.n_pairs = n_pairs, a.n_experts = n_experts;
    a.x_group_div = top_k, a.maybe_error_flag = flag.data();
    a.maybe_workspace = ws.data(), a.workspace_bytes = ws.bytes();
    return a;
  };
  bench::time_launches(state, [&](int i) { return launch::gemv(args(i % n_steps)); });
  bench::report_bytes(state, double(n_mats) * n_pairs * double(rows) * double(Format::row_bytes(cols)));
  state.SetLabel(bench::device_name() + " " + Format::name +
                 (launch::gemv_has_int_path(args(0)) ? " int16 experts" : " float experts"));
#else
  (void)rows, (void)cols, (void)n_tokens;
#endif
}

using bench_fn = void (*)(benchmark::State&, int64_t, int64_t, int);

// One decode matrix: a name, rows x cols and the benchmark that runs it.
struct decode_matrix {
  const char* name;
  int64_t rows, cols;
  bench_fn fn;
};

constexpr auto store = ops::epilogue::store;
constexpr auto swiglu = ops::epilogue::swiglu;
using q4_k = quant::q4_k_format;
using q6_k = quant::q6_k_format;
using q8_0 = quant::q8_0_format;

// Qwen3.5-9B Q4_K_M (hidden 4096, 16 heads of 256 with an output gate, 4 kv heads, GDN 16/32 heads
// of 128, FFN 12288, vocabulary 248320) and Qwen3.5-35B-A3B (hidden 2048, 256 experts of 512, top-8,
// a shared expert of 512).
const decode_matrix decode_matrices[] = {
    {"9B/attn_q+gate", 8192, 4096, bm_gemv<q4_k, store>},
    {"9B/attn_k", 1024, 4096, bm_gemv<q4_k, store>},
    {"9B/attn_v", 1024, 4096, bm_gemv<q6_k, store>},
    {"9B/attn_output", 4096, 4096, bm_gemv<q4_k, store>},
    {"9B/attn_qkv", 8192, 4096, bm_gemv<q4_k, store>},
    {"9B/attn_gate", 4096, 4096, bm_gemv<q4_k, store>},
    {"9B/ssm_out", 4096, 4096, bm_gemv<q4_k, store>},
    {"9B/ssm_alpha", 32, 4096, bm_gemv<q4_k, store>},
    {"9B/ssm_beta", 32, 4096, bm_gemv<q4_k, store>},
    {"9B/ffn_gate+up", 12288, 4096, bm_gemv<q4_k, swiglu>},
    {"9B/ffn_down_q4_k", 4096, 12288, bm_gemv<q4_k, store>},
    {"9B/ffn_down_q6_k", 4096, 12288, bm_gemv<q6_k, store>},
    {"9B/output_q6_k", 248320, 4096, bm_gemv<q6_k, store>},
    {"35B/experts_gate+up", 512, 2048, bm_gemv_experts<q4_k, swiglu>},
    {"35B/experts_down_q4_k", 2048, 512, bm_gemv_experts<q4_k, store>},
    {"35B/experts_down_q6_k", 2048, 512, bm_gemv_experts<q6_k, store>},
    {"35B/shexp_gate+up", 512, 2048, bm_gemv<q4_k, swiglu>},
    {"35B/shexp_down", 2048, 512, bm_gemv<q6_k, store>},
    {"35B/router_q8_0", 256, 2048, bm_gemv<q8_0, store>},
};

const bool registered = [] {
  for (const decode_matrix& m : decode_matrices)
    for (int tokens : {1, 2, 4, 8})
      benchmark::RegisterBenchmark((std::string("gemv/") + m.name + "/tokens:" + std::to_string(tokens)).c_str(),
                                   [m, tokens](benchmark::State& s) { m.fn(s, m.rows, m.cols, tokens); })
          ->UseManualTime()
          ->Unit(benchmark::kMicrosecond);
  return true;
}();

}  // namespace
