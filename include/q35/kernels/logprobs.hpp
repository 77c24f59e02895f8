// logprobs_kernel: per row, the log-probability of a given id (the sampled one) and the n_top most
// likely ids with theirs, under the softmax of the row's logits as they are (OpenAI's logprobs and
// top_logprobs; vLLM's default raw log-probabilities, llama-server's n_probs): log p_i = l_i - m -
// log(sum_j exp(l_j - m)), m the row's largest logit.
//
// Thread-to-data mapping: one block per row; thread t walks its entries in increasing id order
// (ops::for_each_entry: 16-byte loads, 4 groups in flight) keeping an online (max, sum of exp) and its
// own MaxTop best (value, id) pairs sorted in registers (a later id replaces an entry only when strictly
// larger, so equal values keep the lower id first). Then the block combines the sums, and n_top rounds
// of a block argmax over the threads' heads pick the top list in the row's order (larger first, lower
// id on ties); the winning thread shifts its list. NaN and -inf logits have probability 0 and are never
// listed: a row with fewer than n_top finite logits lists fewer. A row whose largest logit is +inf or
// which has no finite logit reports NaN log-probabilities and an empty list.
#pragma once

#include <climits>
#include <cmath>
#include <cstdint>

#include "q35/arch/math.hpp"
#include "q35/arch/thread.hpp"
#include "q35/block/reduce.hpp"
#include "q35/core/config.hpp"
#include "q35/core/dim3.hpp"
#include "q35/ops/sampling.hpp"
#include "q35/warp/reduce.hpp"

namespace q35::kernels {

// Longest top list (OpenAI's top_logprobs allows 20).
inline constexpr int logprobs_max_top = 20;

// One row's answer.
struct token_logprobs {
  int32_t id = -1;      // the given id
  float logprob = NAN;  // its log-probability (NaN for an id outside the vocabulary)
  int32_t n_top = 0;    // entries of the top list (n_top asked, fewer when the row has fewer finite logits);
                        // the slots past it are not written
  int32_t top_ids[logprobs_max_top] = {};
  float top_logprobs[logprobs_max_top] = {};
};

static_assert(sizeof(token_logprobs) == 172, "docs and decoder.hpp quote 172 bytes per answer");

template <int Threads, int MaxTop = logprobs_max_top>
struct logprobs_kernel {
  static constexpr int threads = Threads;
  struct params {
    const float* logits;  // [n_rows, n_vocab]
    const int32_t* ids;   // [n_rows]: the id whose log-probability each row reports
    token_logprobs* out;  // [n_rows]
    int64_t n_rows;
    int n_vocab;
    int n_top;  // 0 .. MaxTop
  };
  struct shared_storage {
    typename block::reduce<float, Threads>::storage reduce;
    typename block::reduce<warp::arg_value, Threads>::storage argmax;
  };
  static constexpr int no_index = INT_MAX;  // an empty slot of a thread's list
  static dim3 grid(const params& p) { return dim3(unsigned(p.n_rows)); }

  Q35_DEVICE void operator()(const params& p, shared_storage& s) const {
    const int64_t r = int64_t(arch::block_idx().x);
    const float* logits = p.logits + r * p.n_vocab;
    float top_v[MaxTop];
    int top_i[MaxTop];
    Q35_UNROLL
    for (int j = 0; j < MaxTop; ++j) top_v[j] = -INFINITY, top_i[j] = no_index;
    float m = -INFINITY, z = 0.0f;
    ops::for_each_entry<Threads>(ops::sample_row{logits, nullptr, p.n_vocab}, [&](int i, float l) {
      if (!(l > -INFINITY)) return;  // NaN, -inf: probability 0
      // arch::fast_exp (an FMUL and an MUFU.EX2, with exp2f's denormal guard) rather than expf's
      // range reduction: 19 instead of 24 issued instructions per entry on the common path (sm_90
      // SASS); terms within 20 of the max keep a relative error of ~1e-6
      if (l > m) {
        z = z * arch::fast_exp(m - l) + 1.0f;  // exp(-inf) = 0 on the first finite entry
        m = l;
      } else {
        z += arch::fast_exp(l - m);
      }
      if (l > top_v[MaxTop - 1]) insert(top_v, top_i, l, i);
    });
    // the row's max and sum of exp(l - max)
    const float row_m = block::reduce<float, Threads>::max(m, s.reduce);
    arch::sync_block();
    const float own = m > -INFINITY ? z * arch::fast_exp(m - row_m) : 0.0f;
    const float row_z = block::reduce<float, Threads>::sum(own, s.reduce);
    const float log_z = logf(row_z);
    const bool finite = row_m > -INFINITY && row_m < INFINITY;  // else the softmax is undefined: NaN
    const auto logprob = [&](float l) { return finite ? (l - row_m) - log_z : NAN; };

    token_logprobs& o = p.out[r];
    const int n_top = finite ? p.n_top : 0;
    for (int k = 0; k < n_top; ++k) {  // the same on every thread
      arch::sync_block();              // the argmax storage is reused
      const warp::arg_value best =
          block::reduce<warp::arg_value, Threads>::all({top_v[0], top_i[0]}, s.argmax, warp::argmax_op{});
      if (!(best.value > -INFINITY)) {  // no finite entry left
        if (arch::thread_rank() == 0) o.n_top = k;
        break;  // the same on every thread
      }
      if (top_i[0] == best.index) pop(top_v, top_i);  // ids are distinct across threads
      if (arch::thread_rank() == 0) {
        o.top_ids[k] = best.index;
        o.top_logprobs[k] = logprob(best.value);
        o.n_top = k + 1;
      }
    }
    if (arch::thread_rank() == 0) {
      const int32_t id = p.ids[r];
      o.id = id;
      o.logprob = id >= 0 && id < p.n_vocab ? logprob(logits[id]) : NAN;
      if (n_top == 0) o.n_top = 0;
    }
  }

 private:
  // Places (v, i) in the descending list (v larger than its last value), dropping the last.
  static Q35_DEVICE void insert(float (&v)[MaxTop], int (&idx)[MaxTop], float l, int i) {
    Q35_UNROLL
    for (int j = MaxTop - 1; j > 0; --j) {
      const bool shift = l > v[j - 1];  // l goes above entry j - 1: it moves down to j
      const bool here = !shift && l > v[j];
      v[j] = shift ? v[j - 1] : here ? l : v[j];
      idx[j] = shift ? idx[j - 1] : here ? i : idx[j];
    }
    if (l > v[0]) v[0] = l, idx[0] = i;
  }
  // Drops the first entry.
  static Q35_DEVICE void pop(float (&v)[MaxTop], int (&idx)[MaxTop]) {
    Q35_UNROLL
    for (int j = 0; j + 1 < MaxTop; ++j) v[j] = v[j + 1], idx[j] = idx[j + 1];
    v[MaxTop - 1] = -INFINITY, idx[MaxTop - 1] = no_index;
  }
};

}  // namespace q35::kernels
