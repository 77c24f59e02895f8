// gguf_file: a parsed, memory-mapped GGUF v2/v3 file with typed metadata accessors and tensor
// infos whose data pointers point into the mapping. Move-only; every failure is a gguf_error.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "q35/io/gguf_format.hpp"
#include "q35/io/gguf_parse.hpp"
#include "q35/io/mapped_file.hpp"

namespace q35::io {

// Most elements an array accessor copies into memory unless the caller passes its own limit: the
// copies take up to 16 bytes per element (a string_view per 8-byte string, an int64_t per 1-byte
// integer), so a crafted file must not turn its size into a multiple of it in memory. 2^24 covers
// the largest vocabulary read_hparams accepts.
inline constexpr uint64_t max_array_elements = uint64_t(1) << 24;

class gguf_file {
 public:
  gguf_file(gguf_file&&) noexcept = default;
  gguf_file& operator=(gguf_file&&) noexcept = default;
  gguf_file(const gguf_file&) = delete;
  gguf_file& operator=(const gguf_file&) = delete;

  // Maps and parses `path`; throws gguf_error (also for I/O failures).
  static gguf_file open(const std::string& path) {
    gguf_file f;
    f.path_ = path;
    try {
      f.map_ = mapped_file::open(path);
    } catch (const std::runtime_error& e) {
      throw gguf_error(e.what());
    }
    f.parse(f.map_.data(), f.map_.size());
    return f;
  }

  // Parses a copy of `bytes`; `name` stands for the path in error messages (fuzzers, tests).
  static gguf_file from_memory(std::string_view bytes, const std::string& name) {
    gguf_file f;
    f.path_ = name;
    f.owned_.assign(bytes.begin(), bytes.end());
    f.parse(reinterpret_cast<const uint8_t*>(f.owned_.data()), f.owned_.size());
    return f;
  }

  const std::string& path() const { return path_; }
  uint32_t version() const { return g_.version; }
  uint64_t alignment() const { return g_.alignment; }
  uint64_t data_offset() const { return g_.data_offset; }  // start of the tensor data in the file
  uint64_t file_bytes() const { return size_; }

  // ---- metadata ----
  const std::vector<gguf_kv>& metadata() const { return g_.kvs; }
  bool has(std::string_view key) const { return g_.kv_index.count(key) != 0; }
  const gguf_kv* find(std::string_view key) const {
    const auto it = g_.kv_index.find(key);
    return it == g_.kv_index.end() ? nullptr : &g_.kvs[it->second];
  }
  // The entry for `key`; throws naming the key when it is missing.
  const gguf_kv& at(std::string_view key) const {
    if (const gguf_kv* kv = find(key)) return *kv;
    fail("missing key '" + std::string(key) + "'");
  }

  std::string get_string(std::string_view key) const {
    const gguf_kv& kv = expect(key, gguf_type::string);
    return std::string(string_at(kv.value));
  }

  // Any integer type; throws when the value is negative.
  uint64_t get_uint(std::string_view key) const {
    const gguf_kv& kv = at(key);
    if (!gguf_is_integer(kv.type)) wrong_type(kv, "an integer");
    if (kv.type == gguf_type::uint64) return load<uint64_t>(kv.value);
    const int64_t v = read_int(kv.type, kv.value, kv.key);
    if (v < 0) fail("key '" + std::string(key) + "': expected an unsigned value but found " + std::to_string(v));
    return uint64_t(v);
  }

  // Any integer type; throws when a uint64 value exceeds INT64_MAX.
  int64_t get_int(std::string_view key) const {
    const gguf_kv& kv = at(key);
    if (!gguf_is_integer(kv.type)) wrong_type(kv, "an integer");
    return read_int(kv.type, kv.value, kv.key);
  }

  double get_float(std::string_view key) const {
    const gguf_kv& kv = at(key);
    if (kv.type == gguf_type::float32) return double(load<float>(kv.value));
    if (kv.type == gguf_type::float64) return load<double>(kv.value);
    wrong_type(kv, "float32 or float64");
  }

  bool get_bool(std::string_view key) const { return *expect(key, gguf_type::bool_).value != 0; }

  // Element type and count of an array value.
  gguf_type array_type(std::string_view key) const { return expect(key, gguf_type::array).elem_type; }
  uint64_t array_size(std::string_view key) const { return expect(key, gguf_type::array).count; }

  // Views into the mapping, valid while this gguf_file lives; more than `max_count` elements throw.
  std::vector<std::string_view> get_string_array(std::string_view key, uint64_t max_count = max_array_elements) const {
    const gguf_kv& kv = expect_array(key, gguf_type::string);
    check_array_count(kv, max_count);
    std::vector<std::string_view> out;
    out.reserve(size_t(kv.count));
    const uint8_t* p = kv.value;
    for (uint64_t i = 0; i < kv.count; ++i) {
      out.push_back(string_at(p));
      p += 8 + out.back().size();
    }
    return out;
  }

  // Arrays of any integer type; more than `max_count` elements throw.
  std::vector<int64_t> get_int_array(std::string_view key, uint64_t max_count = max_array_elements) const {
    const gguf_kv& kv = at(key);
    if (kv.type != gguf_type::array || !gguf_is_integer(kv.elem_type)) wrong_type(kv, "an array of integers");
    check_array_count(kv, max_count);
    std::vector<int64_t> out(size_t(kv.count));
    const uint32_t sz = gguf_type_size(kv.elem_type);
    for (uint64_t i = 0; i < kv.count; ++i) out[i] = read_int(kv.elem_type, kv.value + i * sz, kv.key);
    return out;
  }

  // Arrays of float32 or float64; more than `max_count` elements throw.
  std::vector<double> get_float_array(std::string_view key, uint64_t max_count = max_array_elements) const {
    const gguf_kv& kv = at(key);
    if (kv.type != gguf_type::array || (kv.elem_type != gguf_type::float32 && kv.elem_type != gguf_type::float64))
      wrong_type(kv, "an array of float32 or float64");
    check_array_count(kv, max_count);
    std::vector<double> out(size_t(kv.count));
    for (uint64_t i = 0; i < kv.count; ++i)
      out[i] =
          kv.elem_type == gguf_type::float32 ? double(load<float>(kv.value + 4 * i)) : load<double>(kv.value + 8 * i);
    return out;
  }

  // ---- tensors ----
  const std::vector<tensor_info>& tensors() const { return g_.tensors; }
  const tensor_info* find_tensor(std::string_view name) const {
    const auto it = g_.tensor_index.find(name);
    return it == g_.tensor_index.end() ? nullptr : &g_.tensors[it->second];
  }

  [[noreturn]] void fail(const std::string& msg) const { throw gguf_error(path_ + ": " + msg); }

 private:
  gguf_file() = default;

  void parse(const uint8_t* data, uint64_t size) {
    size_ = size;
    g_ = detail::parse_gguf(data, size, path_);
  }

  template <class T>
  static T load(const uint8_t* p) {
    T v;
    std::memcpy(&v, p, sizeof(T));
    return v;
  }
  static std::string_view string_at(const uint8_t* p) {  // lengths were checked at parse time
    return std::string_view(reinterpret_cast<const char*>(p + 8), size_t(load<uint64_t>(p)));
  }
  int64_t read_int(gguf_type t, const uint8_t* p, std::string_view key) const {
    switch (t) {
      case gguf_type::uint8:
        return load<uint8_t>(p);
      case gguf_type::int8:
        return load<int8_t>(p);
      case gguf_type::uint16:
        return load<uint16_t>(p);
      case gguf_type::int16:
        return load<int16_t>(p);
      case gguf_type::uint32:
        return load<uint32_t>(p);
      case gguf_type::int32:
        return load<int32_t>(p);
      case gguf_type::int64:
        return load<int64_t>(p);
      default: {
        const auto v = load<uint64_t>(p);
        if (v > uint64_t(INT64_MAX))
          fail("key '" + std::string(key) + "': value " + std::to_string(v) + " is out of range (max 2^63-1)");
        return int64_t(v);
      }
    }
  }
  void check_array_count(const gguf_kv& kv, uint64_t max_count) const {
    if (kv.count > max_count)
      fail("key '" + detail::byte_cursor::printable(kv.key) + "': array of " + std::to_string(kv.count) +
           " elements is more than the " + std::to_string(max_count) + " q35 copies into memory");
  }
  [[noreturn]] void wrong_type(const gguf_kv& kv, std::string_view expected) const {
    std::string found(gguf_type_name(kv.type));
    if (kv.type == gguf_type::array) found += " of " + std::string(gguf_type_name(kv.elem_type));
    fail("key '" + std::string(kv.key) + "': expected " + std::string(expected) + " but found " + found);
  }
  const gguf_kv& expect(std::string_view key, gguf_type t) const {
    const gguf_kv& kv = at(key);
    if (kv.type != t) wrong_type(kv, gguf_type_name(t));
    return kv;
  }
  const gguf_kv& expect_array(std::string_view key, gguf_type elem) const {
    const gguf_kv& kv = at(key);
    if (kv.type != gguf_type::array || kv.elem_type != elem)
      wrong_type(kv, "array of " + std::string(gguf_type_name(elem)));
    return kv;
  }

  std::string path_;
  mapped_file map_;
  std::vector<char> owned_;  // from_memory's copy; its buffer does not move when the file is moved
  uint64_t size_ = 0;
  detail::parsed_gguf g_;
};

}  // namespace q35::io
