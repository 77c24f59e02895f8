// logit_bias_kernel: out[r][id] = in[r][id] + bias for each (id, bias) of row r's list, the additions
// of an id listed several times made in list order, each rounded to float (llama.cpp's logit-bias
// sampler, which runs before its penalties). Other entries of `out` are not touched: the launch copies
// the rows first when out != in.
//
// Thread-to-data mapping: one block per row; the row's list goes to shared memory; thread t handles
// list entries t, t + threads, ...: the first occurrence of an id reads its logit, adds every bias of
// that id from there on and writes the result, so each id is read and written by one thread (in place
// is safe). Empty slots (id -1) are skipped; any other id outside [0, n_vocab) sets *maybe_error_flag.
#pragma once

#include <cstdint>

#include "q35/arch/atomic.hpp"
#include "q35/arch/rounded_math.hpp"
#include "q35/arch/thread.hpp"
#include "q35/core/dim3.hpp"

namespace q35::kernels {

// One entry of a row's list: the bias added to logit `id` (-1: an empty slot).
struct logit_bias_entry {
  int32_t id = -1;
  float bias = 0.0f;
};

// Longest list per row (the kernel holds it in shared memory: 8 KB).
inline constexpr int logit_bias_max_entries = 1024;

struct logit_bias_kernel {
  static constexpr int threads = 256;
  struct params {
    float* out;                     // [n_rows, n_vocab]; holds the input logits (copied or in place)
    const logit_bias_entry* lists;  // [n_rows, width]
    int64_t n_rows;
    int n_vocab;
    int width;              // 1 .. logit_bias_max_entries
    int* maybe_error_flag;  // set to 1 on an id outside [-1, n_vocab)
  };
  struct shared_storage {
    int32_t ids[logit_bias_max_entries];
    float bias[logit_bias_max_entries];
  };
  static dim3 grid(const params& p) { return dim3(unsigned(p.n_rows)); }

  Q35_DEVICE void operator()(const params& p, shared_storage& s) const {
    const int64_t r = int64_t(arch::block_idx().x);
    const logit_bias_entry* list = p.lists + r * p.width;
    for (int i = arch::thread_rank(); i < p.width; i += threads) {
      const logit_bias_entry e = list[i];
      const bool valid = e.id >= 0 && e.id < p.n_vocab;
      if (!valid && e.id != -1 && p.maybe_error_flag) arch::raise_flag(p.maybe_error_flag);
      s.ids[i] = valid ? e.id : -1;
      s.bias[i] = e.bias;
    }
    arch::sync_block();
    float* row = p.out + r * p.n_vocab;
    for (int i = arch::thread_rank(); i < p.width; i += threads) {
      const int32_t id = s.ids[i];
      if (id < 0) continue;
      bool first = true;
      for (int j = 0; j < i && first; ++j) first = s.ids[j] != id;
      if (!first) continue;
      float v = row[id];
      for (int j = i; j < p.width; ++j)
        if (s.ids[j] == id) v = arch::add_rn(v, s.bias[j]);
      row[id] = v;
    }
  }
};

}  // namespace q35::kernels
