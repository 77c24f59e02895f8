// Incremental detokenization for generation: each token's bytes are released as soon as they end on
// a character boundary; an incomplete multi-byte UTF-8 sequence split across tokens is held back
// until a later token completes it.
#pragma once

#include <cstdint>
#include <string>

#include "q35/io/tokenizer.hpp"
#include "q35/io/utf8.hpp"

namespace q35::io {

class stream_decoder {
 public:
  // `tok` must outlive the decoder.
  explicit stream_decoder(const tokenizer& tok, bool render_special = true)
      : tok_(&tok), render_special_(render_special) {}

  // The text that became complete with `id` (possibly empty). Throws tokenizer_error on an invalid
  // id, leaving the held bytes as they were. Bytes that can never become a valid character are
  // passed through unchanged, so the concatenated output always equals tokenizer::decode().
  std::string push(int32_t id) {
    pending_.append(tok_->piece(id, render_special_));
    const size_t ready = pending_.size() - utf8_incomplete_tail(pending_);
    std::string out = pending_.substr(0, ready);
    pending_.erase(0, ready);
    return out;
  }

  // At the end of the stream: whatever is still held (an unfinished sequence), and a fresh state.
  std::string flush() {
    std::string out;
    out.swap(pending_);
    return out;
  }

  size_t held_bytes() const { return pending_.size(); }

 private:
  const tokenizer* tok_;
  bool render_special_;
  std::string pending_;  // at most 3 bytes: a proper prefix of one UTF-8 sequence
};

}  // namespace q35::io
