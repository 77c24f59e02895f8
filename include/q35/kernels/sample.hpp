// sample_kernel: logits -> one token id per row (greedy, or repetition penalty, top-k, top-p,
// min-p, temperature and a Philox draw), in one launch.
//
// Thread-to-data mapping: one block per row; thread t owns entries t, t + Threads, ... of the row
// in every pass over it, and items [t E, t E + E) (E = Capacity / Threads) of the sorted candidate
// list. Passes: argmax; then the fast path (a window histogram, a compaction, then work on <=
// Capacity sorted candidates) or, when no filter bounds the kept set or the window is too large,
// the general path (radix passes of top-k and top-p, a weighted pass for the draw). Shared memory:
// the candidate list (8 B x Capacity) overlaid with the radix histograms (24 KB), plus, with a
// penalty, the table of the window's distinct ids and counts (ops/sampling_penalty.hpp: 1.25 bits per
// vocabulary entry and 4 bytes per window id; the passes skip those ids and visit them afterwards).
#pragma once

#include <cstdint>

#include "q35/arch/atomic.hpp"
#include "q35/arch/thread.hpp"
#include "q35/block/reduce.hpp"
#include "q35/core/config.hpp"
#include "q35/core/dim3.hpp"
#include "q35/ops/sampling.hpp"
#include "q35/ops/sampling_candidates.hpp"
#include "q35/ops/sampling_draw.hpp"
#include "q35/ops/sampling_select.hpp"
#include "q35/warp/reduce.hpp"

namespace q35::kernels {

// FastPath = false: always the general path (tests compare both paths' draws).
template <int Threads, int Capacity, bool FastPath = true>
struct sample_kernel {
  static constexpr int threads = Threads;

  struct params {
    const float* logits;          // [n_rows, n_vocab], row-major; not modified
    int32_t* out_ids;             // [n_rows]
    const int32_t* maybe_recent;  // [n_rows, window] previous ids (-1: empty), or null: no penalty; when
                                  // set, 0 < window <= ops::sample_max_window and cfg.penalty.any()
    uint64_t* maybe_rng_counter;  // [1]: (calls << 32) | arrivals; null only when greedy
    int64_t n_rows;
    int n_vocab;
    int window;  // repeat_last_n
    ops::sample_config cfg;
  };
  struct shared_storage {
    typename block::reduce<warp::arg_value, Threads>::storage argmax;
    union {
      ops::sample_candidate_storage<Threads, Capacity> candidates;  // fast path
      ops::sample_search_storage search;                            // general path, after it gave up
    } path;
    ops::sample_draw_storage<Threads> draw;
    uint64_t call;  // the launch's index in the random stream
  };

  static dim3 grid(const params& p) { return dim3(unsigned(p.n_rows)); }
  static size_t dynamic_shared_bytes(const params& p) {
    return p.maybe_recent ? ops::sample_penalty::bytes<Threads>(p.n_vocab, p.window, p.cfg.penalty) : 0;
  }

  Q35_DEVICE void operator()(const params& p, shared_storage& s) const {
    const int64_t r = int64_t(arch::block_idx().x);
    if (arch::thread_rank() == 0 && p.maybe_rng_counter) {
      // Every block takes the call index from the high word and counts itself in the low word; the
      // last to arrive moves the counter to the next call: (call + 1) << 32. All blocks see the
      // same call: the high word changes only after every block has arrived.
      const uint64_t old = arch::atomic_add(p.maybe_rng_counter, uint64_t(1));
      s.call = old >> 32;
      if (int64_t(old & 0xffffffffu) == p.n_rows - 1)
        arch::atomic_add(p.maybe_rng_counter, (uint64_t(1) << 32) - uint64_t(p.n_rows));
    }
    const ops::sample_penalty* penalty = nullptr;
    if (p.maybe_recent)
      penalty = ops::build_penalty_table<Threads>(arch::shared_tail<ops::sample_penalty>(s),
                                                  p.maybe_recent + r * p.window, p.window, p.n_vocab, p.cfg.penalty);
    const ops::sample_row row{p.logits + r * p.n_vocab, penalty, p.n_vocab};
    ops::sample_selection sel = ops::selection_of(ops::row_argmax<Threads>(row, s.argmax), p.cfg);
    if (!sel.sampled(p.cfg)) {
      if (arch::thread_rank() == 0) p.out_ids[r] = sel.argmax;
      return;
    }
    // (s.call, written by thread 0, is visible: the argmax reduction passed a barrier since)
    const uint64_t bits = ops::sample_random_bits(p.cfg.seed_lo, p.cfg.seed_hi, s.call, uint64_t(r));
    int id = -1;
    const ops::candidate_selection fast =
        FastPath ? ops::select_candidates<Threads, Capacity>(row, p.cfg, sel.m, s.path.candidates)
                 : ops::candidate_selection{false, 0};
    if (fast.ok) {
      id = ops::draw_candidates<Threads, Capacity>(p.cfg, sel.m, fast.n, bits, s.path.candidates);
    } else {
      arch::sync_block();  // every thread has read the fast path's decision before the overlay is reused
      ops::select_kept<Threads>(row, p.cfg, sel, s.path.search);
      id = ops::draw_kept<Threads>(row, sel, bits, s.draw);
    }
    if (id >= 0) p.out_ids[r] = id;
  }
};

}  // namespace q35::kernels
