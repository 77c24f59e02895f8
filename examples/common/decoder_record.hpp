// The batch record of a decoder step (decoder.cpp, decoder_init.cpp): private to the decoder's units.
#pragma once

#include <cstdint>

namespace q35::gen::detail {

// The batch record of a step (int32 entries), at fixed offsets so that a recorded graph's addresses
// hold from step to step (R = rows of a step at most, S = n_seq_max, E = page entries at most):
//   [0, R)                    position of each row
//   [R, 2R)                   token id of each row
//   [2R + g H, + H)           group g's header (H = 4 S + 4): seq_offsets [S + 1] (rows within the
//                             group), slots [S], page_rows [S + 1] (into the page indices below, not
//                             rebased: every group's page_indices is the same pointer), seq_lens [S]
//   [2R + S H, + E)           page indices of the step's sequences, one run per sequence
// A group's positions pointer is positions + row0; its x and h are offset by row0 rows the same way.
// Sequences started from one prefix checkpoint list its shared pages each, so a step's runs can hold
// more entries than the pool has pages: E is S times the pages one sequence can hold. The page indices
// come last so that a step uploads only the entries it uses.
struct record_layout {
  int64_t R, E, S;
  int64_t positions() const { return 0; }
  int64_t ids() const { return R; }
  int64_t header(int64_t g) const { return 2 * R + g * (4 * S + 4); }
  static int64_t seq_offsets(int64_t h) { return h; }
  int64_t slots(int64_t h) const { return h + S + 1; }
  int64_t page_rows(int64_t h) const { return h + 2 * S + 1; }
  int64_t seq_lens(int64_t h) const { return h + 3 * S + 2; }
  int64_t pages() const { return header(S); }  // after S groups at most (each holds one input or more)
  int64_t size() const { return pages() + E; }
};

}  // namespace q35::gen::detail
