// Helpers for the tokenizer tests: hand-made byte-level vocabularies and a multilingual corpus.
#pragma once

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "q35/io/byte_unicode.hpp"
#include "q35/io/tokenizer.hpp"
#include "q35/io/utf8.hpp"

namespace q35::test {

// A byte-level vocabulary: ids 0-255 are the single bytes (in byte order), then one token per merge
// result (in merge order, written as raw bytes "left right" and mapped here), then `specials`.
struct toy_vocab {
  std::vector<std::pair<std::string, std::string>> merges;  // raw bytes, rank = index
  std::vector<std::pair<std::string, io::token_type>> specials;

  io::tokenizer build(io::special_ids ids = {}) const {
    std::vector<std::string> tokens;
    std::vector<io::token_type> types;
    for (int b = 0; b < 256; ++b) {
      tokens.push_back(io::bytes_to_mapped(std::string(1, char(b))));
      types.push_back(io::token_type::normal);
    }
    std::vector<std::string> merge_texts;
    for (const auto& [l, r] : merges) {
      const std::string m = io::bytes_to_mapped(l + r);
      if (std::find(tokens.begin(), tokens.end(), m) == tokens.end()) {
        tokens.push_back(m);
        types.push_back(io::token_type::normal);
      }
      merge_texts.push_back(io::bytes_to_mapped(l) + " " + io::bytes_to_mapped(r));
    }
    for (const auto& [text, type] : specials) {
      tokens.push_back(text);
      types.push_back(type);
    }
    return io::tokenizer(std::move(tokens), std::move(types), merge_texts, ids);
  }
};

// Whether any of the byte offsets `cuts` of `text` falls inside a well-formed UTF-8 sequence (bytes
// that belong to no well-formed sequence count as one-byte units).
inline bool cuts_inside_a_character(const std::string& text, const std::vector<size_t>& cuts) {
  std::vector<bool> interior(text.size() + 1, false);
  for (size_t pos = 0; pos < text.size();) {
    const size_t n = std::max<size_t>(1, io::utf8_valid_length_at(text, pos));
    for (size_t i = 1; i < n; ++i) interior[pos + i] = true;
    pos += n;
  }
  return std::any_of(cuts.begin(), cuts.end(), [&](size_t c) { return interior[c]; });
}

// Texts that exercise the pre-tokenizer and UTF-8 handling: accents (precomposed and combining),
// CJK, Arabic, Hebrew, Devanagari, Thai, emoji with ZWJ sequences, skin tones and flags, long
// numbers, whitespace runs, newlines, contractions, code.
inline const std::vector<std::string>& multilingual_corpus() {
  static const std::vector<std::string> corpus = {
      "The quick brown fox jumps over the lazy dog.",
      "Crème brûlée, naïve façade, São Paulo, Ærøskøbing, Łódź, İstanbul, straße",
      "cafe\xcc\x81 vs caf\xc3\xa9 (combining acute vs precomposed), a\xcc\x8a\xcc\x81 stacked marks",
      "北京欢迎你。東京都は日本の首都です。서울특별시",
      "مرحبا بالعالم، كيف حالك؟ שלום עולם",
      "हिन्दी में लिखा गया पाठ और ภาษาไทยไม่มีช่องว่าง",
      "Emoji: 👩‍💻 👨‍👩‍👧‍👦 🏳️‍🌈 👍🏽 🇯🇵🇫🇷 ❤️ 😀😃😄",
      "Numbers: 0 7 42 3.14159 1234567890123456789012345678901234567890 -17 1e-9 ١٢٣ ௫",
      "   leading spaces, trailing spaces   ",
      "tabs\t\tand\tmixed \t whitespace runs          end",
      "line one\nline two\r\nline three\n\n\nfour\r\r\n",
      "don't I'LL we've they're she'd it's 'quoted' WON'T y'all",
      "int main() { return 12345; } // code: a->b, x += 0x1F;",
      "Mixed: English, Deutsch (Größe), русский текст, ελληνικά, 中文, 日本語, 한국어!",
      "\xe2\x80\x8b zero width space, \xc2\xa0non-breaking space, \xe3\x80\x80ideographic space",
      "",
      " ",
      "\n",
      "a",
  };
  return corpus;
}

}  // namespace q35::test
