// The pre-tokenizer: splits text into the words that BPE merges within, with the `qwen35` regex
// (spec §3.5) run by PCRE2 in UTF + Unicode-property mode (JIT-compiled when PCRE2 has a JIT).
// Link libpcre2-8 (pkg-config libpcre2-8).
#pragma once

#ifndef PCRE2_CODE_UNIT_WIDTH
#define PCRE2_CODE_UNIT_WIDTH 8
#endif
#include <pcre2.h>

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "q35/io/tokenizer_error.hpp"
#include "q35/io/utf8.hpp"

namespace q35::io {

// llama.cpp's regex for `tokenizer.ggml.pre = qwen35` (HF's, with the case-insensitive group
// expanded). Unlike qwen2 it keeps combining marks \p{M} inside letter runs; digits split one by one.
inline constexpr std::string_view qwen35_pretokenizer_pattern =
    R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

class regex_splitter {
 public:
  explicit regex_splitter(std::string_view pattern = qwen35_pretokenizer_pattern) {
    int err = 0;
    PCRE2_SIZE err_offset = 0;
    pcre2_code_8* code = pcre2_compile_8(reinterpret_cast<PCRE2_SPTR8>(pattern.data()), pattern.size(),
                                         PCRE2_UTF | PCRE2_UCP, &err, &err_offset, nullptr);
    if (code == nullptr)
      throw tokenizer_error("cannot compile the pre-tokenizer regex at offset " + std::to_string(err_offset) + ": " +
                            error_text(err));
    code_.reset(code, pcre2_code_free_8);
    // JIT is an optimisation only: without it (PCRE2 built without JIT) the interpreter runs.
    jit_ = pcre2_jit_compile_8(code, PCRE2_JIT_COMPLETE) == 0;
  }

  bool uses_jit() const { return jit_; }

  // The words of `text` (UTF-8; throws tokenizer_error if it is not): every match in order, plus any
  // text between matches as a word of its own, so the words always concatenate back to `text`.
  std::vector<std::string_view> split(std::string_view text) const {
    if (!is_valid_utf8(text)) throw tokenizer_error("pre-tokenizer input is not valid UTF-8");
    std::vector<std::string_view> words;
    std::unique_ptr<pcre2_match_data_8, void (*)(pcre2_match_data_8*)> md(
        pcre2_match_data_create_from_pattern_8(code_.get(), nullptr), pcre2_match_data_free_8);
    if (!md) throw tokenizer_error("out of memory creating PCRE2 match data");
    const auto* subject = reinterpret_cast<PCRE2_SPTR8>(text.data());
    size_t pos = 0;
    while (pos < text.size()) {
      // Validated once above: PCRE2_NO_UTF_CHECK keeps the loop linear (the check would rescan).
      int rc = pcre2_match_8(code_.get(), subject, text.size(), pos, PCRE2_NO_UTF_CHECK, md.get(), nullptr);
      if (rc == PCRE2_ERROR_JIT_STACKLIMIT)  // a pathological word: the interpreter uses the heap
        rc =
            pcre2_match_8(code_.get(), subject, text.size(), pos, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, md.get(), nullptr);
      if (rc == PCRE2_ERROR_NOMATCH) break;
      if (rc < 0) throw tokenizer_error("pre-tokenizer regex failed: " + error_text(rc));
      const PCRE2_SIZE* ov = pcre2_get_ovector_pointer_8(md.get());
      const size_t begin = ov[0], end = ov[1];
      if (begin > pos) words.push_back(text.substr(pos, begin - pos));
      if (end == begin) {  // empty match (the qwen35 pattern has none): step over one character
        const size_t n = utf8_valid_length_at(text, begin);
        words.push_back(text.substr(begin, n));
        pos = begin + n;
        continue;
      }
      words.push_back(text.substr(begin, end - begin));
      pos = end;
    }
    if (pos < text.size()) words.push_back(text.substr(pos));
    return words;
  }

 private:
  static std::string error_text(int code) {
    PCRE2_UCHAR8 buf[256];
    const int n = pcre2_get_error_message_8(code, buf, sizeof buf);
    return n < 0 ? "PCRE2 error " + std::to_string(code) : std::string(reinterpret_cast<const char*>(buf), size_t(n));
  }

  std::shared_ptr<pcre2_code_8> code_;  // immutable after compilation: copies share it, matching is thread-safe
  bool jit_ = false;
};

}  // namespace q35::io
