// A Qwen3.5-35B-A3B MoE FFN layer (n_embd 2048, 256 experts of width 512, top-8, a shared expert
// of width 512; experts in Q4_K, router in F32) through launch::moe_ffn at batch 1, 8, 64, 512 and
// 4096: time, and bytes over the experts actually read (the distinct experts the router picked,
// averaged over the rotated inputs, plus the shared expert, router and activations) as GB/s and % of
// the measured copy bandwidth; past 8 tokens (the grouped tensor-core GEMMs) also TFLOPS of the
// expert products (2 n_embd ff per matrix, k + 1 experts of 3 matrices per token). At batch 1 and 8
// each of the three decode launches is timed alone too.
// Weights: two copies (~1.8 GB), alternated every call, and 16 inputs with their own routing, so
// the experts of one call are rarely still in L2 (~6 % overlap for random routing).
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <set>
#include <string>
#include <vector>

#include "bench_util.hpp"
#include "q35/launch/moe.hpp"
#include "q35/quant/formats.hpp"

namespace {

using namespace q35;

enum class moe_stage { whole, router, gate_up, down };

constexpr int n_embd = 2048, n_experts = 256, k = 8, expert_ff = 512, shared_ff = 512;
constexpr int n_inputs = 16, n_weight_copies = 2;

template <moe_stage Stage>
void bm_moe(benchmark::State& state) {
  if (bench::skip_without_gpu(state)) return;
#if Q35_BACKEND_CUDA
  using F = quant::q4_k_format;
  const int64_t n_tokens = state.range(0);
  launch::ffn_shape s;
  s.n_embd = n_embd, s.n_experts = n_experts, s.n_experts_used = k, s.expert_ff_dim = expert_ff;
  s.shared_ff_dim = shared_ff;
  // one copy: router F32, then gate, up, down experts, then the shared gate_inp (F32), gate, up, down
  const size_t router_bytes = size_t(n_experts) * n_embd * 4, shinp_bytes = size_t(n_embd) * 4;
  const size_t mat_bytes = size_t(F::row_bytes(n_embd)) * expert_ff;  // one expert's gate (= up = down) bytes
  const size_t sh_mat_bytes = size_t(F::row_bytes(n_embd)) * shared_ff;
  const size_t copy_bytes = router_bytes + 3 * n_experts * mat_bytes + shinp_bytes + 3 * sh_mat_bytes;
  device_buffer<uint8_t> w;
  device_buffer<float> x, h;
  device_buffer<int> flag;
  const size_t ws_bytes = launch::moe_workspace_bytes(s, n_tokens);
  device_buffer<uint8_t> ws;
  if (!w.allocate(copy_bytes * n_weight_copies).ok() || !x.allocate(size_t(n_inputs * n_tokens) * n_embd).ok() ||
      !h.allocate(size_t(n_tokens) * n_embd).ok() || !flag.allocate(1).ok() || !ws.allocate(ws_bytes * n_inputs).ok()) {
    state.SkipWithError("allocation failed");
    return;
  }
  // Bytes with small finite values: F32 router and gates, Q4_K blocks with small scales.
  {
    std::vector<uint8_t> hw(copy_bytes);
    for (size_t i = 0; i < hw.size(); ++i) hw[i] = uint8_t(i * 2654435761u >> 13);
    auto small_floats = [&](size_t at, size_t n) {
      for (size_t i = 0; i < n; ++i) {
        const float v = float(int((i + at) * 2654435761u % 2001) - 1000) * 1e-4f;
        std::memcpy(hw.data() + at + 4 * i, &v, 4);
      }
    };
    small_floats(0, router_bytes / 4);
    const size_t shinp_at = router_bytes + 3 * n_experts * mat_bytes;
    small_floats(shinp_at, n_embd);
    // d, dmin of every Q4_K block: small binary16 values (2^-11 ...)
    auto small_scales = [&](size_t at, size_t n) {
      for (size_t b = at; b < at + n; b += F::block_bytes) hw[b + 1] = 0x10, hw[b + 3] = 0x10;
    };
    small_scales(router_bytes, 3 * n_experts * mat_bytes);
    small_scales(shinp_at + shinp_bytes, 3 * sh_mat_bytes);
    for (int c = 0; c < n_weight_copies; ++c)
      (void)copy(w.data() + c * copy_bytes, hw.data(), copy_bytes, copy_kind::host_to_device);
    std::vector<float> hx(x.size());
    for (size_t i = 0; i < hx.size(); ++i) hx[i] = float(int(i * 40503u % 2001) - 1000) * 1e-3f;
    (void)x.upload(hx.data(), hx.size());
    (void)fill_bytes(h.data(), 0, h.bytes());
    (void)fill_bytes(flag.data(), 0, flag.bytes());
  }
  auto weights_of = [&](int c) {
    const uint8_t* base = w.data() + size_t(c) * copy_bytes;
    const auto q4k = uint32_t(quant::type_id::q4_k), f32 = uint32_t(quant::type_id::f32);
    launch::moe_weights mw;
    mw.router = {base, f32, n_embd, n_experts, 1, 0};
    mw.gate_exps = {base + router_bytes, q4k, n_embd, expert_ff, n_experts, 0};
    mw.up_exps = {base + router_bytes + n_experts * mat_bytes, q4k, n_embd, expert_ff, n_experts, 0};
    mw.down_exps = {base + router_bytes + 2 * n_experts * mat_bytes, q4k, expert_ff, n_embd, n_experts, 0};
    const uint8_t* sh = base + router_bytes + 3 * n_experts * mat_bytes;
    mw.shexp_gate_inp = {sh, f32, n_embd, 1, 1, 0};
    mw.shexp_gate = {sh + shinp_bytes, q4k, n_embd, shared_ff, 1, 0};
    mw.shexp_up = {sh + shinp_bytes + sh_mat_bytes, q4k, n_embd, shared_ff, 1, 0};
    mw.shexp_down = {sh + shinp_bytes + 2 * sh_mat_bytes, q4k, shared_ff, n_embd, 1, 0};
    return mw;
  };
  auto args_of = [&](int i) {
    launch::ffn_layer_args a;
    a.shape = s, a.x = x.data() + size_t(i) * n_tokens * n_embd, a.h = h.data(), a.n_tokens = n_tokens;
    a.workspace = ws.data() + size_t(i) * ws_bytes, a.workspace_bytes = ws_bytes, a.error_flag = flag.data();
    return a;
  };
  // Route every input once: the stage benchmarks reuse the ids; count the distinct experts read.
  double distinct = 0;
  for (int i = 0; i < n_inputs; ++i) {
    if (const status st = launch::moe_ffn(args_of(i), weights_of(0)); !st.ok()) {
      state.SkipWithError(st.to_string().c_str());
      return;
    }
    std::vector<int32_t> ids(size_t(n_tokens) * k);
    const auto l = launch::detail::moe_plan(s, n_tokens);
    (void)copy(ids.data(), ws.data() + size_t(i) * ws_bytes + l.ids, ids.size() * 4, copy_kind::device_to_host);
    (void)synchronize();
    distinct += double(std::set<int32_t>(ids.begin(), ids.end()).size()) / n_inputs;
  }
  const double act_bytes = double(n_tokens) * n_embd * 4;
  double bytes = 0;
  switch (Stage) {
    case moe_stage::whole:
      bytes = router_bytes + shinp_bytes + distinct * 3 * mat_bytes + 3 * sh_mat_bytes + 3 * act_bytes;
      break;
    case moe_stage::router:
      bytes = router_bytes + shinp_bytes + act_bytes;
      break;
    case moe_stage::gate_up:
      bytes = distinct * 2 * mat_bytes + 2 * sh_mat_bytes + act_bytes;
      break;
    case moe_stage::down:
      bytes = distinct * mat_bytes + sh_mat_bytes + 2 * act_bytes;
      break;
  }
  bench::time_launches(state, [&](int i) -> status {
    const launch::ffn_layer_args a = args_of(i % n_inputs);
    const launch::moe_weights mw = weights_of(i % n_weight_copies);
    switch (Stage) {
      case moe_stage::whole:
        return launch::moe_ffn(a, mw);
      case moe_stage::router:
        return launch::detail::moe_route(a, mw, nullptr);
      case moe_stage::gate_up:
        return launch::detail::moe_decode_gate_up(a, mw, nullptr);
      case moe_stage::down:
        return launch::detail::moe_decode_down(a, mw, nullptr);
    }
    return status::success();
  });
  bench::report_bytes(state, bytes);
  state.counters["distinct_experts"] = distinct;
  if (Stage == moe_stage::whole && n_tokens > launch::moe_decode_max_tokens) {
    const double flop = 2.0 * double(n_tokens) * 3 * n_embd * (double(k) * expert_ff + shared_ff);
    state.counters["TFLOPS"] = benchmark::Counter(flop * 1e-12, benchmark::Counter::kIsIterationInvariantRate);
  }
  state.SetLabel(bench::device_name() + " 35B-A3B MoE layer, Q4_K experts");
#endif
}

BENCHMARK_TEMPLATE(bm_moe, moe_stage::whole)
    ->Arg(1)
    ->Arg(8)
    ->Arg(64)
    ->Arg(512)
    ->Arg(4096)
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);
BENCHMARK_TEMPLATE(bm_moe, moe_stage::router)->Arg(1)->Arg(8)->UseManualTime()->Unit(benchmark::kMicrosecond);
BENCHMARK_TEMPLATE(bm_moe, moe_stage::gate_up)->Arg(1)->Arg(8)->UseManualTime()->Unit(benchmark::kMicrosecond);
BENCHMARK_TEMPLATE(bm_moe, moe_stage::down)->Arg(1)->Arg(8)->UseManualTime()->Unit(benchmark::kMicrosecond);

}  // namespace
