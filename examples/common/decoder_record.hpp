// The batch record of a decoder step (decoder.cpp, decoder_init.cpp): private to the decoder's units.
#pragma once

#include <cstdint>

namespace q35::gen::detail {

// The batch record of a step (int32 entries), at fixed offsets so that a recorded graph's addresses
// hold from step to step (R = rows of a step at most, P = pages of the pool, S = n_seq_max):
//   [0, R)                    position of each row
//   [R, 2R)                   token id of each row
//   [2R, 2R + P)              page indices of the step's sequences, one run per sequence
//   [2R + P + g H, + H)       group g's header (H = 4 S + 4): seq_offsets [S + 1] (rows within the
//                             group), slots [S], page_row_offsets [S + 1] (into the page indices above,
//                             not rebased: every group's page_indices is the same pointer), seq_lens [S]
// A group's positions pointer is positions + row0; its x and h are offset by row0 rows the same way.
struct record_layout {
  int64_t R, P, S;
  int64_t positions() const { return 0; }
  int64_t ids() const { return R; }
  int64_t pages() const { return 2 * R; }
  int64_t header(int64_t g) const { return 2 * R + P + g * (4 * S + 4); }
  static int64_t seq_offsets(int64_t h) { return h; }
  int64_t slots(int64_t h) const { return h + S + 1; }
  int64_t page_rows(int64_t h) const { return h + 2 * S + 1; }
  int64_t seq_lens(int64_t h) const { return h + 3 * S + 2; }
  int64_t size() const { return header(S); }  // S groups at most (each holds one input or more)
};

}  // namespace q35::gen::detail
