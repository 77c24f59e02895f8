// Fused router (GEMV + softmax + top-k + renormalisation + shared-expert gate), one launch per
// step, at the Qwen3.5 MoE shapes: time, bytes of W_r, w_shexp and x (the floor), and time over the
// floor at the measured copy bandwidth. Router weights rotate over > 2x L2 so they come from HBM.
#include <cstdint>
#include <vector>

#include "bench_util.hpp"
#include "q35/launch/router.hpp"

namespace {

using namespace q35;

template <int E, int K>
struct router_shape {
  static constexpr int n_experts = E;
  static constexpr int n_experts_used = K;
};

// One timed iteration = reps launches (a single launch is a few µs, near the event resolution).
constexpr int reps = 16;

template <int NEmbd, int E, int K, class Policy = kernels::router_policy_auto>
void bm_router(benchmark::State& state) {
  if (bench::skip_without_gpu(state)) return;
#if Q35_BACKEND_CUDA
  using traits = router_shape<E, K>;
  const int64_t n_tokens = state.range(0);
  const size_t w_elems = size_t(E) * NEmbd + NEmbd;  // W_r, then w_shexp
  const size_t w_bytes = w_elems * sizeof(float);
  const int n_copies = int(std::max<size_t>(2, 2 * bench::l2_bytes() / w_bytes + 1));
  device_buffer<float> w, x, weights, gate;
  device_buffer<int32_t> ids;
  launch::router_workspace ws;
  if (!w.allocate(w_elems * size_t(n_copies)).ok() || !x.allocate(size_t(n_tokens) * NEmbd).ok() ||
      !ids.allocate(size_t(n_tokens) * K).ok() || !weights.allocate(size_t(n_tokens) * K).ok() ||
      !gate.allocate(size_t(n_tokens)).ok() || !ws.allocate(n_tokens, E).ok()) {
    state.SkipWithError("allocation failed");
    return;
  }
  // Small distinct values (the router's cost does not depend on them).
  std::vector<float> h(w.size());
  for (size_t i = 0; i < h.size(); ++i) h[i] = float(int(i * 2654435761u % 2001) - 1000) * 1e-5f;
  (void)w.upload(h.data(), h.size());
  std::vector<float> hx(x.size());
  for (size_t i = 0; i < hx.size(); ++i) hx[i] = float(int(i * 40503u % 2001) - 1000) * 1e-3f;
  (void)x.upload(hx.data(), hx.size());

  launch::router_args<float> a;
  a.n_tokens = n_tokens, a.n_embd = NEmbd, a.n_experts = E, a.n_experts_used = K;
  a.x = x.data(), a.ids = ids.data(), a.weights = weights.data(), a.maybe_shexp_gate = gate.data();
  a.workspace = ws.view();
  int rot = 0;
  auto step = [&] {
    a.w_router = w.data() + size_t(rot) * w_elems;
    a.maybe_w_shexp = a.w_router + size_t(E) * NEmbd;
    rot = (rot + 1) % n_copies;
    return launch::router<traits, float, Policy>(a);
  };
  bench::time_launches(
      state, [&](int) { return step(); }, reps);
  // floor: W_r + w_shexp + x read once per step
  const double bytes = double(w_bytes) + double(n_tokens) * NEmbd * sizeof(float);
  bench::report_bytes(state, bytes);
  const double copy_gbps = bench::measured_copy_gbps();
  if (copy_gbps > 0) {
    const double floor_us = bytes / (copy_gbps * 1e9) * 1e6;
    state.counters["floor_us"] = floor_us;
    // time / floor = (1 / floor) * time per iteration
    state.counters["x_floor"] = benchmark::Counter(
        1e-6 * floor_us, benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
  }
  state.SetLabel(bench::device_name() + " E=" + std::to_string(E) + " k=" + std::to_string(K) +
                 " n_embd=" + std::to_string(NEmbd));
#endif
}

// Qwen3.5-35B-A3B (n_embd 2048, 256 experts, top-8) and the 64-expert top-4 layout, at batch 1-512.
BENCHMARK_TEMPLATE(bm_router, 2048, 256, 8)
    ->Arg(1)
    ->Arg(8)
    ->Arg(64)
    ->Arg(512)
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);
BENCHMARK_TEMPLATE(bm_router, 4096, 64, 4)
    ->Arg(1)
    ->Arg(8)
    ->Arg(64)
    ->Arg(512)
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);

// Each policy on both sides of router_decode_max_tokens (8), to place the switch on a GPU.
BENCHMARK_TEMPLATE(bm_router, 2048, 256, 8, kernels::router_policy_decode)
    ->Arg(8)
    ->Arg(16)
    ->Arg(64)
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);
BENCHMARK_TEMPLATE(bm_router, 2048, 256, 8, kernels::router_policy_batch)
    ->Arg(1)
    ->Arg(8)
    ->Arg(16)
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);

}  // namespace
