// UTF-8 helpers for the tokenizer: strict sequence validation (RFC 3629: no overlongs, no surrogates,
// nothing above U+10FFFF), replacement of invalid bytes, and detection of an incomplete trailing sequence.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace q35::io {

// Length of the sequence a lead byte announces (1-4), or 0 for a byte that cannot start one
// (a continuation byte 0x80-0xBF, the overlong leads 0xC0/0xC1, and 0xF5-0xFF).
constexpr int utf8_sequence_length(unsigned char lead) {
  if (lead < 0x80) return 1;
  if (lead < 0xC2) return 0;
  if (lead < 0xE0) return 2;
  if (lead < 0xF0) return 3;
  if (lead < 0xF5) return 4;
  return 0;
}

// Allowed range of the byte after `lead` (the first continuation byte); the others are 0x80-0xBF.
// E0 needs A0-BF (no overlongs), ED needs 80-9F (no surrogates), F0 needs 90-BF, F4 needs 80-8F.
constexpr bool utf8_second_byte_ok(unsigned char lead, unsigned char b) {
  switch (lead) {
    case 0xE0:
      return b >= 0xA0 && b <= 0xBF;
    case 0xED:
      return b >= 0x80 && b <= 0x9F;
    case 0xF0:
      return b >= 0x90 && b <= 0xBF;
    case 0xF4:
      return b >= 0x80 && b <= 0x8F;
    default:
      return b >= 0x80 && b <= 0xBF;
  }
}

// How many bytes of a well-formed sequence start at s[pos]: 1-4, or 0 if s[pos] starts none
// (including a sequence cut short by the end of s).
constexpr size_t utf8_valid_length_at(std::string_view s, size_t pos) {
  const auto lead = static_cast<unsigned char>(s[pos]);
  const int len = utf8_sequence_length(lead);
  if (len == 0 || pos + size_t(len) > s.size()) return 0;
  for (int i = 1; i < len; ++i) {
    const auto b = static_cast<unsigned char>(s[pos + size_t(i)]);
    if (i == 1 ? !utf8_second_byte_ok(lead, b) : (b & 0xC0) != 0x80) return 0;
  }
  return size_t(len);
}

constexpr bool is_valid_utf8(std::string_view s) {
  for (size_t pos = 0; pos < s.size();) {
    const size_t n = utf8_valid_length_at(s, pos);
    if (n == 0) return false;
    pos += n;
  }
  return true;
}

// Appends the UTF-8 encoding of code point cp (cp <= 0x10FFFF, not a surrogate).
inline void append_utf8(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out += char(cp);
  } else if (cp < 0x800) {
    out += char(0xC0 | (cp >> 6));
    out += char(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += char(0xE0 | (cp >> 12));
    out += char(0x80 | ((cp >> 6) & 0x3F));
    out += char(0x80 | (cp & 0x3F));
  } else {
    out += char(0xF0 | (cp >> 18));
    out += char(0x80 | ((cp >> 12) & 0x3F));
    out += char(0x80 | ((cp >> 6) & 0x3F));
    out += char(0x80 | (cp & 0x3F));
  }
}

// s with every byte that does not belong to a well-formed sequence replaced by U+FFFD, one
// replacement per byte (what llama.cpp does before pre-tokenizing; it differs only in accepting
// overlong and surrogate encodings, which we replace).
inline std::string sanitize_utf8(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t pos = 0; pos < s.size();) {
    const size_t n = utf8_valid_length_at(s, pos);
    if (n == 0) {
      append_utf8(out, U'\uFFFD');
      ++pos;
    } else {
      out.append(s.substr(pos, n));
      pos += n;
    }
  }
  return out;
}

// Number of bytes at the end of s that are a proper prefix of a well-formed sequence, i.e. that a
// later byte could complete (0-3). A streaming decoder holds these back.
constexpr size_t utf8_incomplete_tail(std::string_view s) {
  const size_t n = s.size();
  for (size_t back = 1; back <= 3 && back <= n; ++back) {
    const auto b = static_cast<unsigned char>(s[n - back]);
    if ((b & 0xC0) == 0x80) continue;  // continuation byte: keep looking for the lead
    const int len = utf8_sequence_length(b);
    if (len <= int(back)) return 0;  // ASCII, invalid lead, or a sequence that is already complete
    if (back >= 2 && !utf8_second_byte_ok(b, static_cast<unsigned char>(s[n - back + 1]))) return 0;
    return back;
  }
  return 0;
}

}  // namespace q35::io
