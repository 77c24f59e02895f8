// GGUF v2/v3 building blocks: the error type, metadata value types, the parsed records (metadata
// entry, tensor info) and a bounds-checked little-endian cursor over the file's bytes.
//
// File layout (all little-endian):
//   "GGUF" | u32 version | u64 n_tensors | u64 n_kv
//   n_kv x { string key | u32 value_type | value }        string = u64 length + bytes (no NUL)
//   n_tensors x { string name | u32 n_dims | u64 ne[n_dims] | u32 ggml_type | u64 offset }
//   padding to general.alignment (default 32) | tensor data (offsets relative to this point)
// An array value is { u32 elem_type | u64 count | count x elem }, elements may be strings or arrays.
#pragma once

#include <array>
#include <bit>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <string_view>

#include "q35/io/ggml_types.hpp"

namespace q35::io {

static_assert(std::endian::native == std::endian::little, "the GGUF reader assumes a little-endian host");

// Every reader failure; the message names the file, the key or tensor, and expected vs found.
struct gguf_error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

enum class gguf_type : uint32_t {
  uint8 = 0,
  int8 = 1,
  uint16 = 2,
  int16 = 3,
  uint32 = 4,
  int32 = 5,
  float32 = 6,
  bool_ = 7,
  string = 8,
  array = 9,
  uint64 = 10,
  int64 = 11,
  float64 = 12,
};
inline constexpr uint32_t gguf_type_count = 13;

constexpr std::string_view gguf_type_name(gguf_type t) {
  constexpr std::array<std::string_view, gguf_type_count> names{"uint8",  "int8",    "uint16", "int16",  "uint32",
                                                                "int32",  "float32", "bool",   "string", "array",
                                                                "uint64", "int64",   "float64"};
  return uint32_t(t) < gguf_type_count ? names[uint32_t(t)] : std::string_view("unknown");
}

// Bytes of one value of a fixed-size type; 0 for string and array (variable size).
constexpr uint32_t gguf_type_size(gguf_type t) {
  switch (t) {
    case gguf_type::uint8:
    case gguf_type::int8:
    case gguf_type::bool_:
      return 1;
    case gguf_type::uint16:
    case gguf_type::int16:
      return 2;
    case gguf_type::uint32:
    case gguf_type::int32:
    case gguf_type::float32:
      return 4;
    case gguf_type::uint64:
    case gguf_type::int64:
    case gguf_type::float64:
      return 8;
    default:
      return 0;
  }
}

constexpr bool gguf_is_integer(gguf_type t) {
  return gguf_type_size(t) != 0 && t != gguf_type::bool_ && t != gguf_type::float32 && t != gguf_type::float64;
}

// One metadata entry; `value` points into the file's bytes.
struct gguf_kv {
  std::string_view key;
  gguf_type type = gguf_type::uint8;
  gguf_type elem_type = gguf_type::uint8;  // arrays only
  uint64_t count = 0;                      // arrays only: number of elements
  const uint8_t* value = nullptr;          // first byte of the value (of the first element for arrays)
  uint64_t value_bytes = 0;                // bytes from `value` to the end of the entry
};

// One tensor: shape in ggml order (ne[0] is contiguous), unused dims are 1.
struct tensor_info {
  std::string name;
  uint32_t type = 0;  // ggml type id (ggml_types.hpp)
  uint32_t n_dims = 0;
  std::array<uint64_t, 4> ne{1, 1, 1, 1};
  uint64_t offset = 0;            // bytes from the start of the data section
  uint64_t n_bytes = 0;           // ne[0] / block_elems * block_bytes * ne[1] * ne[2] * ne[3]
  const uint8_t* data = nullptr;  // into the mapping; valid while the gguf_file lives

  ggml_type ggml() const { return ggml_type(type); }
  std::string_view type_name() const { return ggml_type_name(ggml()); }
  uint64_t n_elements() const { return ne[0] * ne[1] * ne[2] * ne[3]; }  // checked at parse time
};

namespace detail {

// Sequential bounds-checked reads; every failure throws gguf_error naming `file` and what was read.
class byte_cursor {
 public:
  byte_cursor(const uint8_t* data, uint64_t size, const std::string& file) : data_(data), size_(size), file_(file) {}

  uint64_t pos() const { return pos_; }
  uint64_t size() const { return size_; }
  uint64_t remaining() const { return size_ - pos_; }
  const uint8_t* here() const { return data_ + pos_; }
  const std::string& file() const { return file_; }

  [[noreturn]] void fail(const std::string& msg) const { throw gguf_error(file_ + ": " + msg); }

  // `what` names the field, `subject` the key or tensor it belongs to (may be empty).
  void need(uint64_t n, std::string_view what, std::string_view subject) const {
    if (n <= remaining()) return;
    fail("truncated file: " + describe(what, subject) + " needs " + std::to_string(n) + " bytes at offset " +
         std::to_string(pos_) + " but only " + std::to_string(remaining()) + " remain (file size " +
         std::to_string(size_) + ")");
  }

  template <class T>
  T read(std::string_view what, std::string_view subject = {}) {
    need(sizeof(T), what, subject);
    T v;
    std::memcpy(&v, data_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }

  void skip(uint64_t n, std::string_view what, std::string_view subject) {
    need(n, what, subject);
    pos_ += n;
  }

  // A GGUF string (u64 length + bytes), viewed in place.
  std::string_view read_string(std::string_view what, std::string_view subject = {}) {
    const uint64_t start = pos_;
    const auto n = read<uint64_t>(what, subject);
    if (n > remaining())
      fail(describe(what, subject) + ": string length " + std::to_string(n) + " at offset " + std::to_string(start) +
           " runs past the end of the file (" + std::to_string(remaining()) + " bytes remain)");
    std::string_view s(reinterpret_cast<const char*>(data_ + pos_), size_t(n));
    pos_ += n;
    return s;
  }

  static std::string describe(std::string_view what, std::string_view subject) {
    std::string s(what);
    if (!subject.empty()) s += " '" + printable(subject) + "'";
    return s;
  }

  // `s` with control and non-ASCII bytes escaped and long names shortened, for error messages.
  static std::string printable(std::string_view s) {
    static constexpr char hex[] = "0123456789abcdef";
    std::string out;
    for (size_t i = 0; i < s.size() && i < 200; ++i) {
      const auto c = static_cast<unsigned char>(s[i]);
      if (c >= 0x20 && c < 0x7f) {
        out += char(c);
      } else {
        out += "\\x";
        out += hex[c >> 4];
        out += hex[c & 15];
      }
    }
    if (s.size() > 200) out += "...";
    return out;
  }

 private:
  const uint8_t* data_;
  uint64_t size_;
  uint64_t pos_ = 0;
  const std::string& file_;
};

}  // namespace detail
}  // namespace q35::io
