// launch::add_logit_bias: logits plus a sparse bias per row (OpenAI's and llama.cpp's logit_bias),
// before launch::sample. llama.cpp applies the bias before its penalties; so does sampling the biased
// rows, since the sampler's penalties act on the logits it is given.
//
//   launch::logit_bias_args a{logits, biased, n_rows, n_vocab, lists, width};
//   Q35_TRY(launch::add_logit_bias(a, stream));   // then sample from `biased`
#pragma once

#include <cmath>
#include <cstdint>
#include <span>
#include <string>

#include "q35/arch/memory.hpp"
#include "q35/core/status.hpp"
#include "q35/kernels/logit_bias.hpp"
#include "q35/launch/launch.hpp"

namespace q35::launch {

using kernels::logit_bias_entry;
inline constexpr int logit_bias_max_entries = kernels::logit_bias_max_entries;

struct logit_bias_args {
  const float* logits = nullptr;  // [n_rows, n_vocab] device
  float* out = nullptr;           // [n_rows, n_vocab] device: equal to logits (in place) or not overlapping it
  int64_t n_rows = 0;
  int n_vocab = 0;
  // [n_rows, width] device: row r's entries, id -1 for an empty slot; an id listed several times has its
  // biases added in list order, each addition rounded (a bias of -INFINITY bans the id).
  const logit_bias_entry* lists = nullptr;
  int width = 0;                    // 0 .. logit_bias_max_entries (0: out = logits)
  int* maybe_error_flag = nullptr;  // device int set to 1 on an id outside [-1, n_vocab)
};

namespace detail {
inline status bad_logit_bias(const std::string& what) {
  return error(status_code::invalid_argument, "launch::add_logit_bias: " + what);
}
}  // namespace detail

// Checks a host list before it is uploaded: every id in [0, n_vocab) (or -1), no NaN bias. The message
// names the first bad entry.
inline status check_logit_bias(std::span<const logit_bias_entry> list, int n_vocab) {
  if (list.size() > size_t(logit_bias_max_entries))
    return detail::bad_logit_bias(std::to_string(list.size()) + " entries exceed the " +
                                  std::to_string(logit_bias_max_entries) + " a row may have");
  for (size_t i = 0; i < list.size(); ++i) {
    if (list[i].id < -1 || list[i].id >= n_vocab)
      return detail::bad_logit_bias("entry " + std::to_string(i) + ": id " + std::to_string(list[i].id) +
                                    " is outside the vocabulary of " + std::to_string(n_vocab) + " tokens");
    if (std::isnan(list[i].bias))
      return detail::bad_logit_bias("entry " + std::to_string(i) + " (id " + std::to_string(list[i].id) +
                                    "): the bias is NaN");
  }
  return status::success();
}

// out = logits, then the biases added: a device-to-device copy (unless in place) and one launch,
// asynchronous on cuda; nothing for 0 rows.
template <int = 0>
inline status add_logit_bias(const logit_bias_args& a, stream_t stream = nullptr) {
  using detail::bad_logit_bias;
  if (a.n_rows < 0 || a.n_rows > 0x7fffffff) return bad_logit_bias("n_rows = " + std::to_string(a.n_rows));
  if (a.n_vocab < 1) return bad_logit_bias("n_vocab = " + std::to_string(a.n_vocab) + " is not positive");
  if (a.width < 0 || a.width > logit_bias_max_entries)
    return bad_logit_bias("width = " + std::to_string(a.width) + " is outside 0.." +
                          std::to_string(logit_bias_max_entries));
  if (a.n_rows == 0) return status::success();
  if (!a.logits || !a.out) return bad_logit_bias("logits or out is null");
  if (a.width > 0 && !a.lists) return bad_logit_bias("lists is null");
  if (a.out != a.logits)
    Q35_TRY(copy(a.out, a.logits, size_t(a.n_rows) * size_t(a.n_vocab) * sizeof(float), copy_kind::device_to_device,
                 stream));
  if (a.width == 0) return status::success();
  return launch<kernels::logit_bias_kernel>({a.out, a.lists, a.n_rows, a.n_vocab, a.width, a.maybe_error_flag}, stream);
}

}  // namespace q35::launch
