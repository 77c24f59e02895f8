// Gated DeltaNet core on the Qwen3.5-9B shapes (n_k 16, n_v 32, head dims 128, conv kernel 4):
// the decode step at batch 1, 8 and 64 (time, and % of copy bandwidth for the state read + write:
// 2 x 32 x 128 x 128 x 4 B of SSM state plus the conv window per sequence), and the prefill of 512,
// 2048 and 8192 tokens in the chunked and the token-by-token form (tokens/s; compare the two rows
// for the speed-up; the chunked rows also give TFLOPS of the chunked form's products). Skips without
// a GPU.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "bench_util.hpp"
#include "q35/launch/gdn.hpp"

namespace {

using namespace q35;

[[maybe_unused]] launch::gdn_shape shape_9b() { return {4096, 16, 32, 128, 128, 4, 1e-6f}; }

// Inputs of the core for n_tokens tokens, zero-filled (timing does not depend on the values).
struct [[maybe_unused]] core_inputs {
  device_buffer<float> qkv, z, b, alpha, conv, dt_bias, a, norm, y;
  device_buffer<int32_t> offsets, slots;
  device_buffer<uint8_t> ws;

  bool allocate(const launch::gdn_shape& s, int n_seqs, int tokens_per_seq) {
    const size_t n = size_t(n_seqs) * size_t(tokens_per_seq);
    std::vector<int32_t> off(static_cast<size_t>(n_seqs) + 1), sl(static_cast<size_t>(n_seqs));
    for (int i = 0; i <= n_seqs; ++i) off[size_t(i)] = i * tokens_per_seq;
    for (int i = 0; i < n_seqs; ++i) sl[size_t(i)] = i;
    const auto zeros = [](device_buffer<float>& d, size_t count) {
      return d.allocate(count).ok() && fill_bytes(d.data(), 0, d.bytes()).ok();
    };
    return zeros(qkv, n * size_t(s.conv_dim())) && zeros(z, n * size_t(s.value_dim())) &&
           zeros(b, n * size_t(s.n_v_heads)) && zeros(alpha, n * size_t(s.n_v_heads)) &&
           zeros(conv, size_t(s.conv_dim()) * size_t(s.conv_kernel)) && zeros(dt_bias, size_t(s.n_v_heads)) &&
           zeros(a, size_t(s.n_v_heads)) && zeros(norm, size_t(s.v_head_dim)) && zeros(y, n * size_t(s.value_dim())) &&
           offsets.allocate(off.size()).ok() && offsets.upload(off.data(), off.size()).ok() &&
           slots.allocate(sl.size()).ok() && slots.upload(sl.data(), sl.size()).ok() &&
           ws.allocate(launch::gdn_core_workspace_bytes(s, int64_t(n))).ok();
  }
  launch::gdn_core_args args(const launch::gdn_shape& s, kv::gdn_state_view st, int n_seqs, int tokens_per_seq) {
    launch::gdn_core_args c;
    c.shape = s, c.qkv = qkv.data(), c.z = z.data(), c.b = b.data(), c.alpha = alpha.data();
    c.conv1d = conv.data(), c.dt_bias = dt_bias.data(), c.a = a.data(), c.norm = norm.data();
    c.batch = {offsets.data(), slots.data(), n_seqs, int64_t(n_seqs) * tokens_per_seq,
               tokens_per_seq, nullptr,      nullptr};
    c.state = st, c.y = y.data(), c.workspace = ws.data(), c.workspace_bytes = ws.bytes();
    return c;
  }
};

// Decode step of args {batch} sequences, one token each, the recurrent core (one launch). The
// states rotate over enough layers of the pool to exceed 4x L2, so they come from HBM.
void bm_gdn_decode(benchmark::State& state) {
  if (bench::skip_without_gpu(state)) return;
#if Q35_BACKEND_CUDA
  const int batch = int(state.range(0));
  const launch::gdn_shape s = shape_9b();
  kv::gdn_state_shape ps{1, batch, s.n_k_heads, s.n_v_heads, s.k_head_dim, s.v_head_dim, s.conv_kernel};
  const size_t per_layer = size_t(batch) * size_t(ps.layer_slot_floats()) * sizeof(float);
  ps.n_layers = int(std::max<size_t>(2, (4 * bench::l2_bytes() + per_layer - 1) / per_layer));
  kv::recurrent_state_pool pool;
  core_inputs in;
  if (!pool.allocate(ps).ok() || !in.allocate(s, batch, 1)) {
    state.SkipWithError("allocation failed");
    return;
  }
  bench::time_launches(
      state, [&](int i) { return launch::gdn_decode_step(in.args(s, pool.layer(i % ps.n_layers), batch, 1)); });
  // per sequence: SSM state read + written, conv window read + written, the projections read, y written
  const double per_seq = 2.0 * double(ps.ssm_floats()) * 4 + 2.0 * double(ps.conv_floats()) * 4 +
                         4.0 * double(s.conv_dim() + 2 * s.value_dim() + 2 * s.n_v_heads);
  bench::report_bytes(state, per_seq * batch);
  state.SetLabel(bench::device_name() + " 9B GDN decode, recurrent core, 1 launch");
#endif
}
BENCHMARK(bm_gdn_decode)->Arg(1)->Arg(8)->Arg(64)->ArgName("batch")->UseManualTime()->Unit(benchmark::kMicrosecond);

// Prefill of args {n_tokens} tokens of one sequence by the chunked (4 launches) or the
// token-by-token recurrent core (1 launch); tokens/s.
template <launch::gdn_core_mode Mode>
void bm_gdn_prefill(benchmark::State& state) {
  if (bench::skip_without_gpu(state)) return;
#if Q35_BACKEND_CUDA
  const int n = int(state.range(0));
  const launch::gdn_shape s = shape_9b();
  kv::recurrent_state_pool pool;
  core_inputs in;
  if (!pool.allocate({1, 1, s.n_k_heads, s.n_v_heads, s.k_head_dim, s.v_head_dim, s.conv_kernel}).ok() ||
      !in.allocate(s, 1, n)) {
    state.SkipWithError("allocation failed");
    return;
  }
  launch::gdn_core_args a = in.args(s, pool.layer(0), 1, n);
  a.mode = Mode;
  bench::time_launches(state, [&](int) { return launch::gdn_core(a); });
  state.counters["tokens/s"] = benchmark::Counter(double(n), benchmark::Counter::kIsIterationInvariantRate);
  if constexpr (Mode == launch::gdn_core_mode::chunked) {
    // The chunked form's matrix products per chunk of C rows and v-head (2 flops per multiply-add):
    // K K^T and Q K^T (2 C^2 d_k), U S, q S and K'^T V_new (3 C d_k d_v), Aqk V_new (C^2 d_v) and the
    // triangular solve for W and U (C^2 (d_k + d_v) / 2 multiply-adds, counted as C^2 (d_k + d_v)).
    const double c = kernels::gdn_chunk_size, dk = s.k_head_dim, dv = s.v_head_dim;
    const double per_chunk = 2 * (2 * c * c * dk + 3 * c * dk * dv + c * c * dv + c * c * (dk + dv));
    state.counters["TFLOPS"] = benchmark::Counter(per_chunk * std::ceil(n / c) * s.n_v_heads * 1e-12,
                                                  benchmark::Counter::kIsIterationInvariantRate);
  }
  state.SetLabel(bench::device_name() + (Mode == launch::gdn_core_mode::chunked ? " chunked" : " token-by-token"));
#endif
}
BENCHMARK_TEMPLATE(bm_gdn_prefill, launch::gdn_core_mode::chunked)
    ->Arg(512)
    ->Arg(2048)
    ->Arg(8192)
    ->ArgName("tokens")
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);
BENCHMARK_TEMPLATE(bm_gdn_prefill, launch::gdn_core_mode::recurrent)
    ->Arg(512)
    ->Arg(2048)
    ->Arg(8192)
    ->ArgName("tokens")
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);

}  // namespace
