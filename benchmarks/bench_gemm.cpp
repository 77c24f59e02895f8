// The prompt path: launch::matmul past 8 tokens (the int8 tensor-core GEMM for the GGUF integer
// formats, including its activation-split launch; the split f16/bf16 mma GEMM for F16/BF16/F32
// weights) on the projection shapes of Qwen3.5-9B, -27B and -35B-A3B at 16, 32, 64, 512 and 4,096
// tokens: time, TFLOPS (2 rows cols tokens per matrix) and % of the mma.sync fp16 peak that a plain
// mma loop measures in the same run ("mma_peak" below). Calls of one token tile (<= 64 tokens) also
// run "/unsplit": without room for split-K's partials, i.e. as before split-K (launch/gemm_i8.hpp);
// and calls of 16 and 32 tokens on GGUF integer weights "/tile64": on the 64-token tile instead of their
// own (16 / 32 tokens, launch::gemm_i8_tile_tokens), i.e. as before the narrow tiles. The 9B shapes at
// 1, 4 and 8 tokens "/every_count": matmul_args::gemm_every_count, the GEMM where the GEMV would run
// (batch invariance on tensor cores, decoder_config::batch_invariant_gemm): against bench_gemv's same
// shapes, what a sequence alone pays for that mode.
// Skips without a GPU.
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "bench_util.hpp"
#include "q35/arch/mma.hpp"
#include "q35/launch/launch.hpp"
#include "q35/launch/matmul.hpp"

namespace {

using namespace q35;

// Eight independent m16n8k16 f16 mma chains per warp, `iters` times: the issue rate of mma.sync on
// this GPU (d = a b + d, so no chain waits on another and nothing else is issued).
struct mma_peak_kernel {
  static constexpr int threads = 128;
  static constexpr int chains = 8;
  struct params {
    float* out;  // written only if the sums are 1 (never): keeps the loop alive
    int iters, n_blocks;
  };
  struct shared_storage {};
  static dim3 grid(const params& p) { return dim3(unsigned(p.n_blocks)); }
  Q35_DEVICE void operator()(const params& p, shared_storage&) const {
    const uint32_t one = 0x3c003c00u;  // two f16 ones
    const arch::mma_a_f16_16x16 a{{one, one, one, one}};
    const arch::mma_b_f16_16x8 b{{one, one}};
    arch::mma_c_f32_16x8 c[chains] = {};
    for (int i = 0; i < p.iters; ++i) {
      Q35_UNROLL
      for (int j = 0; j < chains; ++j) arch::mma_m16n8k16_f16(c[j], a, b, c[j]);
    }
    float s = 0.0f;
    Q35_UNROLL
    for (int j = 0; j < chains; ++j) s += c[j].r[0] + c[j].r[1] + c[j].r[2] + c[j].r[3];
    if (s == 1.0f) p.out[arch::thread_rank()] = s;
  }
};

constexpr double mma_flops = 2.0 * 16 * 8 * 16;  // one m16n8k16

#if Q35_BACKEND_CUDA
// FLOP/s of the plain mma loop, measured once per process (median of 11).
double mma_peak_flops() {
  static const double peak = [] {
    device_buffer<float> out;
    if (!out.allocate(mma_peak_kernel::threads).ok()) return 0.0;
    const mma_peak_kernel::params p{out.data(), 4096, 8 * launch::sm_count()};
    bench::gpu_timer t;
    std::vector<double> s;
    for (int i = 0; i < 13; ++i) {
      t.start();
      if (!launch::launch<mma_peak_kernel>(p).ok()) return 0.0;
      const double sec = t.stop();
      if (i >= 2) s.push_back(sec);
    }
    std::sort(s.begin(), s.end());
    const double n_mma = double(p.n_blocks) * (mma_peak_kernel::threads / 32) * p.iters * mma_peak_kernel::chains;
    return n_mma * mma_flops / s[s.size() / 2];
  }();
  return peak;
}
#endif

void bm_mma_peak(benchmark::State& state) {
  if (bench::skip_without_gpu(state)) return;
#if Q35_BACKEND_CUDA
  device_buffer<float> out;
  if (!out.allocate(mma_peak_kernel::threads).ok()) {
    state.SkipWithError("allocation failed");
    return;
  }
  const mma_peak_kernel::params p{out.data(), 4096, 8 * launch::sm_count()};
  bench::time_launches(state, [&](int) { return launch::launch<mma_peak_kernel>(p); });
  const double flop =
      double(p.n_blocks) * (mma_peak_kernel::threads / 32) * p.iters * mma_peak_kernel::chains * mma_flops;
  state.counters["TFLOPS"] = benchmark::Counter(flop * 1e-12, benchmark::Counter::kIsIterationInvariantRate);
  state.SetLabel(bench::device_name() + " mma.sync m16n8k16 f16, 8 chains per warp");
#endif
}

// One projection of `tokens` tokens: rows x cols of type `type` (swiglu: gate and up), through
// launch::matmul with a workspace sized as the decoder sizes it (split: with room for split-K).
void bm_gemm(benchmark::State& state, quant::type_id type, int64_t rows, int64_t cols, int64_t tokens, bool swiglu,
             bool split, int tile = 0, bool every_count = false) {
  if (bench::skip_without_gpu(state)) return;
#if Q35_BACKEND_CUDA
  quant::weight_view w;
  w.type = uint32_t(type), w.rows = rows, w.cols = cols;
  const size_t w_bytes = size_t(rows) * size_t(w.row_bytes());
  const int n_mats = swiglu ? 2 : 1;
  device_buffer<uint8_t> wg, wu, ws;
  device_buffer<float> x, y;
  // 0x3c bytes: finite scales and quants (f16 0x3c3c ~ 1.06, f32 ~ 0.011); timing does not depend on values
  if (!wg.allocate(w_bytes).ok() || !fill_bytes(wg.data(), 0x3c, w_bytes).ok() ||
      (swiglu && (!wu.allocate(w_bytes).ok() || !fill_bytes(wu.data(), 0x3c, w_bytes).ok())) ||
      !x.allocate(size_t(tokens * cols)).ok() || !fill_bytes(x.data(), 0, x.bytes()).ok() ||
      !y.allocate(size_t(tokens * rows)).ok() ||
      !ws.allocate(std::max<size_t>(16, launch::matmul_workspace_bytes(cols, tokens, split ? n_mats * rows : 0)))
           .ok()) {
    state.SkipWithError("allocation failed");
    return;
  }
  launch::matmul_args a;
  a.w = w, a.w.data = wg.data();
  if (swiglu) a.maybe_w_up = w, a.maybe_w_up.data = wu.data();
  a.x = x.data(), a.y = y.data(), a.n_tokens = tokens;
  a.epilogue = swiglu ? ops::epilogue::swiglu : ops::epilogue::store;
  a.maybe_workspace = ws.data(), a.workspace_bytes = ws.bytes(), a.gemm_tile_tokens = tile;
  a.gemm_every_count = every_count;
  bench::time_launches(state, [&](int) { return launch::matmul(a); });
  const double flop = 2.0 * n_mats * double(rows) * double(cols) * double(tokens);
  state.counters["TFLOPS"] = benchmark::Counter(flop * 1e-12, benchmark::Counter::kIsIterationInvariantRate);
  if (const double peak = mma_peak_flops(); peak > 0)
    state.counters["%mma_peak"] =
        benchmark::Counter(flop * 100.0 / peak, benchmark::Counter::kIsIterationInvariantRate);
  bench::report_bytes(state, double(n_mats * w_bytes) + 4.0 * double(tokens) * double(cols + rows));
  std::string name = "?";
  (void)quant::with_format(uint32_t(type), [&](auto tag) { name = decltype(tag)::type::name; });
  state.SetLabel(bench::device_name() + " " + name);
#else
  (void)type, (void)rows, (void)cols, (void)tokens, (void)swiglu, (void)split, (void)tile, (void)every_count;
#endif
}

struct projection {
  const char* name;
  quant::type_id type;
  int64_t rows, cols;
  bool swiglu;
};

using quant::type_id;
// Qwen3.5-9B (hidden 4096, q+gate 16 x 2 x 256, FFN 12288), -27B (hidden 5120, q+gate 24 x 2 x 256,
// FFN 17408), -35B-A3B (hidden 2048, q+gate 16 x 2 x 256, shared expert 512); Q4_K_M types, and the
// 9B FFN as a BF16 / F16 file stores it.
const projection projections[] = {
    {"9B/attn_q+gate", type_id::q4_k, 8192, 4096, false},
    {"9B/attn_k", type_id::q4_k, 1024, 4096, false},
    {"9B/attn_v", type_id::q6_k, 1024, 4096, false},
    {"9B/attn_output", type_id::q4_k, 4096, 4096, false},
    {"9B/ffn_gate+up", type_id::q4_k, 12288, 4096, true},
    {"9B/ffn_down_q4_k", type_id::q4_k, 4096, 12288, false},
    {"9B/ffn_down_q6_k", type_id::q6_k, 4096, 12288, false},
    {"9B/ffn_gate+up_q8_0", type_id::q8_0, 12288, 4096, true},
    {"9B/ffn_gate+up_bf16", type_id::bf16, 12288, 4096, true},
    {"9B/ffn_gate+up_f16", type_id::f16, 12288, 4096, true},
    {"27B/attn_q+gate", type_id::q4_k, 12288, 5120, false},
    {"27B/ffn_gate+up", type_id::q4_k, 17408, 5120, true},
    {"27B/ffn_down_q6_k", type_id::q6_k, 5120, 17408, false},
    {"35B/attn_q+gate", type_id::q4_k, 8192, 2048, false},
    {"35B/attn_output", type_id::q4_k, 2048, 4096, false},
    {"35B/shexp_gate+up", type_id::q4_k, 512, 2048, true},
};

const bool registered = [] {
  benchmark::RegisterBenchmark("gemm/mma_peak", bm_mma_peak)->UseManualTime()->Unit(benchmark::kMicrosecond);
  for (const projection& m : projections)
    for (int64_t tokens : {16, 32, 64, 512, 4096})
      for (const bool split : {true, false}) {
        if (!split && tokens > 64) continue;  // one split past one token tile anyway
        benchmark::RegisterBenchmark(
            (std::string("gemm/") + m.name + "/tokens:" + std::to_string(tokens) + (split ? "" : "/unsplit")).c_str(),
            [m, tokens, split](benchmark::State& s) { bm_gemm(s, m.type, m.rows, m.cols, tokens, m.swiglu, split); })
            ->UseManualTime()
            ->Unit(benchmark::kMicrosecond);
      }
  for (const projection& m : projections) {
    bool integer = false;
    (void)quant::with_format(uint32_t(m.type),
                             [&](auto tag) { integer = launch::gemm_i8_supports<typename decltype(tag)::type>; });
    if (!integer) continue;
    for (int64_t tokens : {16, 32})
      benchmark::RegisterBenchmark(
          (std::string("gemm/") + m.name + "/tokens:" + std::to_string(tokens) + "/tile64").c_str(),
          [m, tokens](benchmark::State& s) { bm_gemm(s, m.type, m.rows, m.cols, tokens, m.swiglu, true, 64); })
          ->UseManualTime()
          ->Unit(benchmark::kMicrosecond);
  }
  for (const projection& m : projections) {
    if (std::string(m.name).rfind("9B/", 0) != 0) continue;
    for (int64_t tokens : {1, 4, 8})
      benchmark::RegisterBenchmark(
          (std::string("gemm/") + m.name + "/tokens:" + std::to_string(tokens) + "/every_count").c_str(),
          [m, tokens](benchmark::State& s) { bm_gemm(s, m.type, m.rows, m.cols, tokens, m.swiglu, true, 0, true); })
          ->UseManualTime()
          ->Unit(benchmark::kMicrosecond);
  }
  return true;
}();

}  // namespace
