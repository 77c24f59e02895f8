// launch::logprobs: the log-probability of each row's given id (the sampled one) and its top_n most
// likely ids with theirs, from the logits as they are (before any bias, penalty or temperature: OpenAI's
// logprobs and top_logprobs, vLLM's default). One launch, asynchronous on cuda.
//
//   launch::logprobs_args a{logits, n_rows, n_vocab, sampled_ids, top_n, out};
//   Q35_TRY(launch::logprobs(a, stream));
#pragma once

#include <cstdint>
#include <string>

#include "q35/core/status.hpp"
#include "q35/kernels/logprobs.hpp"
#include "q35/launch/launch.hpp"
#include "q35/ops/sampling.hpp"

namespace q35::launch {

using kernels::token_logprobs;
inline constexpr int logprobs_max_top = kernels::logprobs_max_top;

struct logprobs_args {
  const float* logits = nullptr;  // [n_rows, n_vocab] device
  int64_t n_rows = 0;
  int n_vocab = 0;                // 1 .. ops::sample_max_vocab
  const int32_t* ids = nullptr;   // [n_rows] device: the id each row reports (e.g. sample()'s out_ids)
  int top_n = 0;                  // 0 .. logprobs_max_top
  token_logprobs* out = nullptr;  // [n_rows] device
};

template <int = 0>
inline status logprobs(const logprobs_args& a, stream_t stream = nullptr) {
  const auto bad = [](const std::string& m) { return error(status_code::invalid_argument, "launch::logprobs: " + m); };
  if (a.n_rows < 0 || a.n_rows > 0x7fffffff) return bad("n_rows = " + std::to_string(a.n_rows));
  if (a.n_vocab < 1 || a.n_vocab > ops::sample_max_vocab)
    return bad("n_vocab = " + std::to_string(a.n_vocab) + " is outside 1.." + std::to_string(ops::sample_max_vocab));
  if (a.top_n < 0 || a.top_n > logprobs_max_top)
    return bad("top_n = " + std::to_string(a.top_n) + " is outside 0.." + std::to_string(logprobs_max_top));
  if (a.n_rows == 0) return status::success();
  if (!a.logits || !a.ids || !a.out) return bad("logits, ids or out is null");
  using kernel = kernels::logprobs_kernel<512>;
  return launch<kernel>({a.logits, a.ids, a.out, a.n_rows, a.n_vocab, a.top_n}, stream);
}

}  // namespace q35::launch
