// A Qwen3.5-35B-A3B MoE FFN layer (n_embd 2048, 256 experts of width 512, top-8, a shared expert
// of width 512; experts in Q4_K, router in F32) through launch::moe_ffn at batch 1, 8, 64, 512 and
// 4096: time, and bytes over the experts actually read (the distinct experts the router picked,
// averaged over the rotated inputs, plus the shared expert, router and activations) as GB/s and % of
// the measured copy bandwidth; past 8 tokens (the grouped tensor-core GEMMs) also TFLOPS of the
// expert products (2 n_embd ff per matrix, k + 1 experts of 3 matrices per token). At batch 1 and 8
// each of the three decode launches is timed alone too; at 16, 32 and 64 "every_count" runs the decode
// kernels with gemm_every_count (the decoder's batch_invariant_gemm groups), to set against the grouped
// path at 64. bm_moe_indexed: the experts behind an expert
// index, in device or pinned host memory, staged in windows past 8 tokens.
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

enum class moe_stage { whole, router, gate_up, down, every_count };  // every_count: whole, gemm_every_count

constexpr int n_embd = 2048, n_experts = 256, k = 8, expert_ff = 512, shared_ff = 512;
constexpr int n_inputs = 16, n_weight_copies = 2;

#if Q35_BACKEND_CUDA
using F = quant::q4_k_format;
constexpr auto q4k = uint32_t(quant::type_id::q4_k), f32 = uint32_t(quant::type_id::f32);
// one expert's gate (= up = down) bytes
constexpr size_t mat_bytes = size_t(F::row_bytes(n_embd)) * expert_ff;

// Q4_K blocks with small scales (d, dmin: small binary16 values, 2^-11 ...) over bytes [at, at + n).
void small_scales(std::vector<uint8_t>& hw, size_t at, size_t n) {
  for (size_t b = at; b < at + n; b += F::block_bytes) hw[b + 1] = 0x10, hw[b + 3] = 0x10;
}

// The layer's weights (n_weight_copies copies), n_inputs inputs of n_tokens rows, a workspace per
// input, and each input routed once (the distinct experts it reads, averaged).
struct moe_layer {
  launch::ffn_shape s;
  int64_t n_tokens = 0;
  bool every_count = false;  // ffn_layer_args::gemm_every_count
  // one copy: router F32, then gate, up, down experts, then the shared gate_inp (F32), gate, up, down
  size_t router_bytes = size_t(n_experts) * n_embd * 4, shinp_bytes = size_t(n_embd) * 4;
  size_t sh_mat_bytes = size_t(F::row_bytes(n_embd)) * shared_ff;
  size_t copy_bytes = router_bytes + 3 * n_experts * mat_bytes + shinp_bytes + 3 * sh_mat_bytes;
  size_t ws_bytes = 0;
  device_buffer<uint8_t> w, ws;
  device_buffer<float> x, h;
  device_buffer<int> flag;
  double distinct = 0;

  // Allocates and fills; false (the state skipped with the reason) on failure.
  bool init(benchmark::State& state, int64_t tokens) {
    n_tokens = tokens;
    s.n_embd = n_embd, s.n_experts = n_experts, s.n_experts_used = k, s.expert_ff_dim = expert_ff;
    s.shared_ff_dim = shared_ff;
    ws_bytes = launch::moe_workspace_bytes(s, n_tokens, every_count);
    if (!w.allocate(copy_bytes * n_weight_copies).ok() || !x.allocate(size_t(n_inputs * n_tokens) * n_embd).ok() ||
        !h.allocate(size_t(n_tokens) * n_embd).ok() || !flag.allocate(1).ok() ||
        !ws.allocate(ws_bytes * n_inputs).ok()) {
      state.SkipWithError("allocation failed");
      return false;
    }
    // Bytes with small finite values: F32 router and gates, Q4_K blocks with small scales.
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
    small_scales(hw, router_bytes, 3 * n_experts * mat_bytes);
    small_scales(hw, shinp_at + shinp_bytes, 3 * sh_mat_bytes);
    for (int c = 0; c < n_weight_copies; ++c)
      (void)copy(w.data() + c * copy_bytes, hw.data(), copy_bytes, copy_kind::host_to_device);
    std::vector<float> hx(x.size());
    for (size_t i = 0; i < hx.size(); ++i) hx[i] = float(int(i * 40503u % 2001) - 1000) * 1e-3f;
    (void)x.upload(hx.data(), hx.size());
    (void)fill_bytes(h.data(), 0, h.bytes());
    (void)fill_bytes(flag.data(), 0, flag.bytes());
    // Route every input once: the stage benchmarks reuse the ids; count the distinct experts read.
    for (int i = 0; i < n_inputs; ++i) {
      if (const status st = launch::moe_ffn(args_of(i), weights_of(0)); !st.ok()) {
        state.SkipWithError(st.to_string().c_str());
        return false;
      }
      std::vector<int32_t> ids(size_t(n_tokens) * k);
      const auto l = launch::detail::moe_plan(s, n_tokens, every_count);
      (void)copy(ids.data(), ws.data() + size_t(i) * ws_bytes + l.ids, ids.size() * 4, copy_kind::device_to_host);
      (void)synchronize();
      distinct += double(std::set<int32_t>(ids.begin(), ids.end()).size()) / n_inputs;
    }
    return true;
  }
  launch::moe_weights weights_of(int c) const {
    const uint8_t* base = w.data() + size_t(c) * copy_bytes;
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
  }
  launch::ffn_layer_args args_of(int i) {
    launch::ffn_layer_args a;
    a.shape = s, a.x = x.data() + size_t(i) * n_tokens * n_embd, a.h = h.data(), a.n_tokens = n_tokens;
    a.workspace = ws.data() + size_t(i) * ws_bytes, a.workspace_bytes = ws_bytes, a.error_flag = flag.data();
    a.gemm_every_count = every_count;
    return a;
  }
};
#endif

template <moe_stage Stage>
void bm_moe(benchmark::State& state) {
  if (bench::skip_without_gpu(state)) return;
#if Q35_BACKEND_CUDA
  moe_layer L;
  L.every_count = Stage == moe_stage::every_count;
  if (!L.init(state, state.range(0))) return;
  const int64_t n_tokens = L.n_tokens;
  const double distinct = L.distinct;
  const size_t router_bytes = L.router_bytes, shinp_bytes = L.shinp_bytes, sh_mat_bytes = L.sh_mat_bytes;
  const double act_bytes = double(n_tokens) * n_embd * 4;
  double bytes = 0;
  switch (Stage) {
    case moe_stage::whole:
    case moe_stage::every_count:
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
    const launch::ffn_layer_args a = L.args_of(i % n_inputs);
    const launch::moe_weights mw = L.weights_of(i % n_weight_copies);
    switch (Stage) {
      case moe_stage::whole:
      case moe_stage::every_count:
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

// The same layer with its routed experts behind an expert index (moe_weights::maybe_index, as the
// decoder's expert cache sets it), every expert in device memory (args: 0) or in pinned host memory
// read over the bus (1), at `tokens` rows (the grouped path past 8: the selected experts staged a
// window of `window` experts at a time, launch/moe_grouped.hpp; experts in device memory staged too
// (in_place 0) or read where they are, as the decoder's slots are (1)). What the staging windows and
// the copies within device memory cost against one pass (window 256) and in place, and the bus rate
// of a prompt chunk's expert reads (expert_GB/s: the distinct experts' bytes over the call's time).
void bm_moe_indexed(benchmark::State& state) {
  if (bench::skip_without_gpu(state)) return;
#if Q35_BACKEND_CUDA
  moe_layer L;
  if (!L.init(state, state.range(0))) return;
  const int window = int(state.range(1));
  const bool host = state.range(2) != 0, in_place = state.range(3) != 0;
  // merged experts as a GGUF ffn_gate_up_exps holds them: [E][gate | up], then [E][down]
  const size_t gu_bytes = size_t(n_experts) * 2 * mat_bytes, all_bytes = gu_bytes + size_t(n_experts) * mat_bytes;
  std::vector<uint8_t> hw(all_bytes);
  for (size_t i = 0; i < hw.size(); ++i) hw[i] = uint8_t(i * 2246822519u >> 13);
  small_scales(hw, 0, all_bytes);
  device_buffer<uint8_t> on_device, staging;
  pinned_buffer<uint8_t> on_host;
  std::vector<int32_t> identity(static_cast<size_t>(n_experts));
  for (int e = 0; e < n_experts; ++e) identity[size_t(e)] = e;
  device_buffer<int32_t> index;
  const size_t staging_bytes = launch::moe_staging_bytes(window, int64_t(2 * mat_bytes), int64_t(mat_bytes));
  if (!(host ? on_host.allocate(all_bytes) : on_device.allocate(all_bytes)).ok() ||
      !index.allocate(identity.size()).ok() || !staging.allocate(staging_bytes).ok()) {
    state.SkipWithError("allocation failed");
    return;
  }
  uint8_t* experts = host ? on_host.data() : on_device.data();
  if (host)
    std::memcpy(experts, hw.data(), all_bytes);
  else
    (void)copy(experts, hw.data(), all_bytes, copy_kind::host_to_device);
  (void)index.upload(identity.data(), identity.size());
  launch::moe_weights mw = L.weights_of(0);
  mw.gate_exps = {experts, q4k, n_embd, expert_ff, n_experts, int64_t(2 * mat_bytes)};
  mw.up_exps = {experts + mat_bytes, q4k, n_embd, expert_ff, n_experts, int64_t(2 * mat_bytes)};
  mw.down_exps = {experts + gu_bytes, q4k, expert_ff, n_embd, n_experts, int64_t(mat_bytes)};
  mw.maybe_index = {index.data(), index.data(), n_experts, staging.data(), staging_bytes};
  if (in_place)  // every index names device memory
    mw.maybe_index.in_place_gu_end = mw.maybe_index.in_place_dn_end = n_experts;
  bench::time_launches(state, [&](int i) -> status { return launch::moe_ffn(L.args_of(i % n_inputs), mw); });
  const double expert_bytes = L.distinct * 3 * mat_bytes;
  state.counters["expert_GB/s"] =
      benchmark::Counter(expert_bytes * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["distinct_experts"] = L.distinct;
  state.counters["staging_MiB"] = double(staging_bytes) / (1 << 20);
  state.SetLabel(bench::device_name() + " 35B-A3B MoE layer, indexed Q4_K experts in " +
                 (host       ? "pinned host memory"
                  : in_place ? "device memory, read in place"
                             : "device memory, staged"));
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
BENCHMARK_TEMPLATE(bm_moe, moe_stage::every_count)
    ->Arg(16)
    ->Arg(32)
    ->Arg(64)
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);
BENCHMARK_TEMPLATE(bm_moe, moe_stage::router)->Arg(1)->Arg(8)->UseManualTime()->Unit(benchmark::kMicrosecond);
BENCHMARK_TEMPLATE(bm_moe, moe_stage::gate_up)->Arg(1)->Arg(8)->UseManualTime()->Unit(benchmark::kMicrosecond);
BENCHMARK_TEMPLATE(bm_moe, moe_stage::down)->Arg(1)->Arg(8)->UseManualTime()->Unit(benchmark::kMicrosecond);
// {tokens, staging window, experts in host memory, experts in device memory read in place}
BENCHMARK(bm_moe_indexed)
    ->Args({1, 256, 0, 0})
    ->Args({1, 256, 1, 0})
    ->Args({512, 256, 0, 0})
    ->Args({512, 64, 0, 0})
    ->Args({512, 16, 0, 0})
    ->Args({512, 64, 0, 1})
    ->Args({512, 256, 1, 0})
    ->Args({512, 64, 1, 0})
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);

}  // namespace
