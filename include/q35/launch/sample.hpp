// launch::sample: logits on the device -> one sampled token id per row, in one launch and without
// a host synchronisation (only the ids need to come back). See docs/sampling.md for the filters'
// exact order and semantics.
//
//   launch::sample_args a{logits, n_rows, n_vocab, params, recent_or_null, rng_counter, out_ids};
//   Q35_TRY(launch::sample(a, stream));
#pragma once

#include <cmath>
#include <cstdint>
#include <string>

#include "q35/arch/memory.hpp"
#include "q35/core/status.hpp"
#include "q35/kernels/sample.hpp"
#include "q35/launch/launch.hpp"
#include "q35/ops/sampling.hpp"

namespace q35::launch {

// llama.cpp's sampler settings and defaults (its common_params_sampling).
struct sampling_params {
  float temperature = 0.8f;     // <= 0: greedy (argmax; lowest id on ties; NaN only when all are NaN)
  int top_k = 40;               // 0: off
  float top_p = 0.95f;          // 1: off; in (0, 1]
  float min_p = 0.05f;          // 0: off; in [0, 1]
  float repeat_penalty = 1.0f;  // 1: off; > 0: logit > 0 ? logit / p : logit * p, once per distinct id in the window
  // After it, logit -= count * frequency_penalty + presence_penalty for each distinct id of the window
  // (count: its occurrences there): llama.cpp's penalty_freq and penalty_present. 0: off; finite.
  float frequency_penalty = 0.0f;
  float presence_penalty = 0.0f;
  int repeat_last_n = 64;  // ids of the window per row (the width of maybe_recent); at most
                           // ops::sample_max_window when a penalty is on
  uint64_t seed = 0;
};

// Whether the parameters penalise the ids of a window, i.e. whether sample() reads maybe_recent.
inline bool penalizes(const sampling_params& p) {
  return p.repeat_last_n > 0 && (p.repeat_penalty != 1.0f || p.frequency_penalty != 0.0f || p.presence_penalty != 0.0f);
}

struct sample_args {
  const float* logits = nullptr;  // [n_rows, n_vocab] device, row-major; not modified
  int n_rows = 0;
  int n_vocab = 0;  // 1 .. 262144 (Qwen3.5: 248,320)
  sampling_params params;
  const int32_t* maybe_recent = nullptr;  // [n_rows, repeat_last_n] device ring of previous ids (-1: empty), or null
  // [1] device: the random stream's position, (calls << 32); every launch adds 1 << 32, so a
  // replayed CUDA graph draws new numbers. Start it at 0 (or any multiple of 2^32). Null only when greedy.
  uint64_t* rng_counter = nullptr;
  int32_t* out_ids = nullptr;  // [n_rows] device
  void* workspace = nullptr;   // >= sample_workspace_bytes(n_rows, n_vocab) (currently none is needed)
  size_t workspace_bytes = 0;
};

// Device scratch a launch needs: none (one block per row keeps everything in shared memory). Kept
// in the API so that a multi-block variant for large batches can add some without changing callers.
inline size_t sample_workspace_bytes(int n_rows, int n_vocab) {
  (void)n_rows;
  (void)n_vocab;
  return 0;
}

namespace detail {
inline status bad_sample_arg(const std::string& what) {
  return error(status_code::invalid_argument, "launch::sample: " + what);
}
inline std::string float_str(float v) {
  if (v != v) return "nan";
  return std::to_string(v);
}
}  // namespace detail

// Checks every value; the message names the bad one.
inline status validate(const sample_args& a) {
  using detail::bad_sample_arg;
  using detail::float_str;
  const sampling_params& p = a.params;
  const auto str = [](auto v) { return std::to_string(v); };
  if (a.n_rows < 0) return bad_sample_arg("n_rows = " + str(a.n_rows) + " is negative");
  if (a.n_vocab < 1 || a.n_vocab > ops::sample_max_vocab)
    return bad_sample_arg("n_vocab = " + str(a.n_vocab) + " is outside 1.." + str(ops::sample_max_vocab));
  if (std::isnan(p.temperature) || std::isinf(p.temperature))
    return bad_sample_arg("temperature = " + float_str(p.temperature) + " is not a finite number");
  if (p.top_k < 0) return bad_sample_arg("top_k = " + str(p.top_k) + " is negative (0 turns top-k off)");
  if (!(p.top_p > 0.0f && p.top_p <= 1.0f))
    return bad_sample_arg("top_p = " + float_str(p.top_p) + " is outside (0, 1] (1 turns top-p off)");
  if (!(p.min_p >= 0.0f && p.min_p <= 1.0f))
    return bad_sample_arg("min_p = " + float_str(p.min_p) + " is outside [0, 1] (0 turns min-p off)");
  if (!(p.repeat_penalty > 0.0f) || std::isinf(p.repeat_penalty))
    return bad_sample_arg("repeat_penalty = " + float_str(p.repeat_penalty) +
                          " is not a positive finite number (1 turns it off)");
  if (!std::isfinite(p.frequency_penalty))
    return bad_sample_arg("frequency_penalty = " + float_str(p.frequency_penalty) +
                          " is not a finite number (0 turns it off)");
  if (!std::isfinite(p.presence_penalty))
    return bad_sample_arg("presence_penalty = " + float_str(p.presence_penalty) +
                          " is not a finite number (0 turns it off)");
  if (p.repeat_last_n < 0) return bad_sample_arg("repeat_last_n = " + str(p.repeat_last_n) + " is negative");
  if (a.maybe_recent && penalizes(p) && p.repeat_last_n > ops::sample_max_window)
    return bad_sample_arg("repeat_last_n = " + str(p.repeat_last_n) + " exceeds " + str(ops::sample_max_window) +
                          ", the longest window the penalties read");
  if (a.workspace_bytes < sample_workspace_bytes(a.n_rows, a.n_vocab))
    return bad_sample_arg("workspace_bytes = " + str(a.workspace_bytes) + " is below the " +
                          str(sample_workspace_bytes(a.n_rows, a.n_vocab)) + " needed");
  if (a.n_rows == 0) return status::success();
  if (!a.logits) return bad_sample_arg("logits is null");
  if (!a.out_ids) return bad_sample_arg("out_ids is null");
  if (p.temperature > 0.0f && !a.rng_counter)
    return bad_sample_arg("rng_counter is null (needed when temperature > 0)");
  return status::success();
}

// The device-side settings of a launch (logarithm and seed words computed once, here).
inline ops::sample_config sample_config_of(const sampling_params& p, int n_vocab) {
  ops::sample_config c;
  c.greedy = !(p.temperature > 0.0f);
  c.top_k = p.top_k > 0 && p.top_k < n_vocab ? p.top_k : n_vocab;
  c.top_p = p.top_p;
  c.use_min_p = p.min_p > 0.0f;
  c.log_min_p = c.use_min_p ? float(std::log(double(p.min_p))) : 0.0f;
  c.temperature = p.temperature;
  c.inv_temperature = c.greedy ? 1.0f : 1.0f / p.temperature;
  c.penalty.repeat = p.repeat_penalty;
  c.penalty.inv_repeat = 1.0f / p.repeat_penalty;
  c.penalty.frequency = p.frequency_penalty;
  c.penalty.presence = p.presence_penalty;
  c.seed_lo = uint32_t(p.seed);
  c.seed_hi = uint32_t(p.seed >> 32);
  return c;
}

// Block shape per vocabulary size: threads per row and the fast path's candidate capacity (8 bytes
// of shared memory each). One warp serves small vocabularies (tests, toy models); larger rows (a
// Qwen3.5 row has 248,320 entries) take 1024 threads, the most memory parallelism one block has.
// (A 128- or 256-thread block was tried: ptxas then settles on 64 registers and spills 30-60 bytes.)
struct sample_shape_small {
  static constexpr int max_vocab = 1024, threads = 32, capacity = 1024;
};
struct sample_shape_large {
  static constexpr int max_vocab = ops::sample_max_vocab, threads = 1024, capacity = 4096;
};

// Calls f(shape{}) with the shape launch::sample uses for n_vocab.
template <class F>
decltype(auto) with_sample_shape(int n_vocab, F&& f) {
  if (n_vocab <= sample_shape_small::max_vocab) return f(sample_shape_small{});
  return f(sample_shape_large{});
}

namespace detail {
template <class Shape, bool FastPath = true>
status run_sample(const sample_args& a, stream_t stream) {
  using kernel = kernels::sample_kernel<Shape::threads, Shape::capacity, FastPath>;
  const sampling_params& sp = a.params;
  const bool penalize = a.maybe_recent && penalizes(sp);
  const typename kernel::params p{
      a.logits,  a.out_ids,        penalize ? a.maybe_recent : nullptr, a.rng_counter, int64_t(a.n_rows),
      a.n_vocab, sp.repeat_last_n, sample_config_of(sp, a.n_vocab)};
  return launch<kernel>(p, stream);
}
}  // namespace detail

// Samples one id per row into a.out_ids: one launch, asynchronous on cuda; none for 0 rows.
template <int = 0>
inline status sample(const sample_args& a, stream_t stream = nullptr) {
  Q35_TRY(validate(a));
  if (a.n_rows == 0) return status::success();
  return with_sample_shape(a.n_vocab, [&](auto shape) { return detail::run_sample<decltype(shape)>(a, stream); });
}

}  // namespace q35::launch
