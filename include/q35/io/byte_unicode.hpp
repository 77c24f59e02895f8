// GPT-2's byte <-> unicode mapping used by byte-level BPE vocabularies: every byte is shown as a
// printable code point (printable Latin-1 bytes map to themselves, the other 68 to U+0100..U+0143),
// so token texts in the file are byte strings written in these code points.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

#include "q35/io/utf8.hpp"

namespace q35::io {

namespace detail {

constexpr bool byte_maps_to_itself(int b) {
  return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

// code point for each byte: itself when printable, else 256 + (index among the non-printable bytes)
constexpr std::array<char32_t, 256> make_byte_to_cp() {
  std::array<char32_t, 256> t{};
  char32_t next = 256;
  for (int b = 0; b < 256; ++b) t[size_t(b)] = byte_maps_to_itself(b) ? char32_t(b) : next++;
  return t;
}

inline constexpr std::array<char32_t, 256> byte_to_cp = make_byte_to_cp();
inline constexpr char32_t max_mapped_cp = 256 + 68 - 1;  // U+0143

// byte for each code point 0..U+0143, or -1 where no byte maps to it
constexpr std::array<int16_t, max_mapped_cp + 1> make_cp_to_byte() {
  std::array<int16_t, max_mapped_cp + 1> t{};
  for (auto& v : t) v = -1;
  for (int b = 0; b < 256; ++b) t[byte_to_cp[size_t(b)]] = int16_t(b);
  return t;
}

inline constexpr std::array<int16_t, max_mapped_cp + 1> cp_to_byte = make_cp_to_byte();

}  // namespace detail

// The mapped form of a byte string (what the vocabulary stores), e.g. " the" -> "Ġthe".
inline std::string bytes_to_mapped(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (unsigned char b : bytes) append_utf8(out, detail::byte_to_cp[b]);
  return out;
}

// The bytes a mapped token text stands for, e.g. "Ġthe" -> " the". A code point outside the mapping
// (not produced by GPT-2's converter) is kept as its own UTF-8 bytes.
inline std::string mapped_to_bytes(std::string_view mapped) {
  std::string out;
  out.reserve(mapped.size());
  for (size_t pos = 0; pos < mapped.size();) {
    const size_t n = utf8_valid_length_at(mapped, pos);
    if (n == 0) {  // not UTF-8 at all: keep the byte
      out += mapped[pos++];
      continue;
    }
    char32_t cp = static_cast<unsigned char>(mapped[pos]);
    if (n > 1) {
      cp &= (0x7Fu >> n);
      for (size_t i = 1; i < n; ++i) cp = (cp << 6) | (static_cast<unsigned char>(mapped[pos + i]) & 0x3Fu);
    }
    if (cp <= detail::max_mapped_cp && detail::cp_to_byte[cp] >= 0)
      out += char(detail::cp_to_byte[cp]);
    else
      out.append(mapped.substr(pos, n));
    pos += n;
  }
  return out;
}

}  // namespace q35::io
