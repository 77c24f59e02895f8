// The GGUF v2/v3 parser: validates every count, length, shape, offset and size against the file
// before use (overflow-checked), so any input either parses or throws a gguf_error naming the problem.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "q35/io/checked_math.hpp"
#include "q35/io/ggml_types.hpp"
#include "q35/io/gguf_format.hpp"

namespace q35::io::detail {

inline constexpr uint32_t gguf_magic = 0x46554747;  // "GGUF" read as a little-endian u32
inline constexpr uint64_t gguf_default_alignment = 32;
inline constexpr int gguf_max_array_depth = 8;                         // nested arrays deeper than this are rejected
inline constexpr uint64_t gguf_min_kv_bytes = 8 + 4 + 1;               // empty key, type, 1-byte value
inline constexpr uint64_t gguf_min_tensor_info_bytes = 8 + 4 + 4 + 8;  // empty name, n_dims = 0, type, offset
inline constexpr uint32_t gguf_max_dims = 4;

struct parsed_gguf {
  uint32_t version = 0;
  uint64_t alignment = gguf_default_alignment;
  uint64_t data_offset = 0;  // start of the data section in the file
  std::vector<gguf_kv> kvs;
  std::unordered_map<std::string_view, size_t> kv_index;
  std::vector<tensor_info> tensors;
  std::unordered_map<std::string_view, size_t> tensor_index;  // views into tensors[i].name
};

// Rejects a count whose smallest encoding (count * min_bytes) cannot fit in what remains, before
// anything is reserved or iterated: a truncated or corrupt count, e.g. 2^60 elements.
inline void check_count(const byte_cursor& c, uint64_t count, uint64_t min_bytes, std::string_view what,
                        std::string_view subject) {
  if (count <= c.remaining() / min_bytes) return;
  c.fail("truncated or corrupt file: " + byte_cursor::describe(what, subject) + " = " + std::to_string(count) +
         " needs at least " + std::to_string(count) + " x " + std::to_string(min_bytes) + " bytes at offset " +
         std::to_string(c.pos()) + " but only " + std::to_string(c.remaining()) + " remain (file size " +
         std::to_string(c.size()) + ")");
}

inline gguf_type read_value_type(byte_cursor& c, std::string_view what, std::string_view key) {
  const auto t = c.read<uint32_t>(what, key);
  if (t >= gguf_type_count)
    c.fail("key '" + byte_cursor::printable(key) + "': unknown value type " + std::to_string(t) + " (expected 0..12)");
  return gguf_type(t);
}

// Skips the `count` elements of type `t` of an array in `key`, descending into nested arrays.
inline void skip_array(byte_cursor& c, gguf_type t, uint64_t count, std::string_view key, int depth) {
  const char* count_what = depth == 1 ? "array count of key" : "count of nested array in key";
  if (const uint32_t sz = gguf_type_size(t)) {
    check_count(c, count, sz, count_what, key);
    c.skip(count * sz, "array data of key", key);  // count * sz <= remaining: no overflow
  } else if (t == gguf_type::string) {
    check_count(c, count, 8, count_what, key);
    for (uint64_t i = 0; i < count; ++i) c.read_string("string array element of key", key);
  } else {  // array of arrays
    if (depth >= gguf_max_array_depth)
      c.fail("key '" + byte_cursor::printable(key) + "': arrays nested deeper than " +
             std::to_string(gguf_max_array_depth));
    check_count(c, count, 4 + 8, count_what, key);
    for (uint64_t i = 0; i < count; ++i) {
      const gguf_type et = read_value_type(c, "element type of nested array in key", key);
      const auto n = c.read<uint64_t>("count of nested array in key", key);
      skip_array(c, et, n, key, depth + 1);
    }
  }
}

inline void parse_kvs(byte_cursor& c, uint64_t n_kv, parsed_gguf& g) {
  // Reserve at most a few pages up front: a count that fits the file is still only a claim, and
  // memory should grow with the entries actually read.
  g.kvs.reserve(size_t(std::min<uint64_t>(n_kv, 1024)));
  for (uint64_t i = 0; i < n_kv; ++i) {
    gguf_kv kv;
    kv.key = c.read_string("key of metadata entry " + std::to_string(i));
    kv.type = read_value_type(c, "value type of key", kv.key);
    if (kv.type == gguf_type::array) {
      kv.elem_type = read_value_type(c, "array element type of key", kv.key);
      kv.count = c.read<uint64_t>("array count of key", kv.key);
    }
    const uint64_t start = c.pos();
    kv.value = c.here();
    if (kv.type == gguf_type::array) {
      skip_array(c, kv.elem_type, kv.count, kv.key, 1);
    } else if (kv.type == gguf_type::string) {
      c.read_string("value of key", kv.key);
    } else {
      c.skip(gguf_type_size(kv.type), "value of key", kv.key);
    }
    kv.value_bytes = c.pos() - start;
    if (!g.kv_index.emplace(kv.key, g.kvs.size()).second)
      c.fail("duplicate key '" + byte_cursor::printable(kv.key) + "' (metadata entries " +
             std::to_string(g.kv_index[kv.key]) + " and " + std::to_string(i) + ")");
    g.kvs.push_back(kv);
  }
}

// general.alignment: a uint32 power of two when present.
inline void read_alignment(const byte_cursor& c, parsed_gguf& g) {
  const auto it = g.kv_index.find("general.alignment");
  if (it == g.kv_index.end()) return;
  const gguf_kv& kv = g.kvs[it->second];
  if (kv.type != gguf_type::uint32)
    c.fail("key 'general.alignment': expected uint32 but found " + std::string(gguf_type_name(kv.type)));
  uint32_t a;
  std::memcpy(&a, kv.value, 4);
  if (!is_power_of_two(a)) c.fail("key 'general.alignment': " + std::to_string(a) + " is not a power of two");
  g.alignment = a;
}

inline tensor_info parse_tensor_info(byte_cursor& c, uint64_t index) {
  tensor_info t;
  t.name = std::string(c.read_string("name of tensor info " + std::to_string(index)));
  const std::string shown = byte_cursor::printable(t.name);
  t.n_dims = c.read<uint32_t>("dimension count of tensor", t.name);
  if (t.n_dims > gguf_max_dims)
    c.fail("tensor '" + shown + "': " + std::to_string(t.n_dims) + " dimensions (expected at most 4)");
  uint64_t n_elements = 1;
  for (uint32_t d = 0; d < t.n_dims; ++d) {
    t.ne[d] = c.read<uint64_t>("shape of tensor", t.name);
    const auto prod = checked_mul(n_elements, t.ne[d]);
    if (t.ne[d] > uint64_t(INT64_MAX) || !prod || *prod > uint64_t(INT64_MAX))
      c.fail("tensor '" + shown + "': dimension " + std::to_string(d) + " = " + std::to_string(t.ne[d]) +
             " makes the element count overflow int64");
    n_elements = *prod;
  }
  t.type = c.read<uint32_t>("type of tensor", t.name);
  const ggml_type_traits* tr = find_ggml_type(t.type);
  if (!tr) c.fail("tensor '" + shown + "': unknown ggml type id " + std::to_string(t.type));
  t.offset = c.read<uint64_t>("data offset of tensor", t.name);
  const auto row = ggml_row_bytes(tr->type, t.ne[0]);
  if (!row)
    c.fail("tensor '" + shown + "' of type " + std::string(tr->name) + ": ne[0] = " + std::to_string(t.ne[0]) +
           " is not a multiple of the block size " + std::to_string(tr->block_elems));
  // rows = ne1 * ne2 * ne3 (unbounded by n_elements when ne0 = 0), and row bytes * rows must fit in uint64.
  const auto rows_12 = checked_mul(t.ne[1], t.ne[2]);
  const auto rows = rows_12 ? checked_mul(*rows_12, t.ne[3]) : std::nullopt;
  const auto bytes = rows ? checked_mul(*row, *rows) : std::nullopt;
  if (!bytes) c.fail("tensor '" + shown + "': byte size overflows uint64");
  t.n_bytes = *bytes;
  return t;
}

// Places the data section and checks each tensor's alignment, extent and overlap.
inline void place_tensors(const byte_cursor& c, const uint8_t* base, parsed_gguf& g) {
  const auto start = checked_align_up(c.pos(), g.alignment);
  if (!start || (!g.tensors.empty() && *start > c.size()))
    c.fail("data section would start at offset " + (start ? std::to_string(*start) : std::string("> 2^64")) +
           ", past the end of the file (size " + std::to_string(c.size()) + ")");
  g.data_offset = *start;
  for (tensor_info& t : g.tensors) {
    const std::string shown = byte_cursor::printable(t.name);
    if (t.offset % g.alignment != 0)
      c.fail("tensor '" + shown + "': data offset " + std::to_string(t.offset) +
             " is not a multiple of the alignment " + std::to_string(g.alignment));
    const auto begin = checked_add(g.data_offset, t.offset);
    const auto end = begin ? checked_add(*begin, t.n_bytes) : std::nullopt;
    if (!end || *end > c.size())
      c.fail("tensor '" + shown + "': data of " + std::to_string(t.n_bytes) + " bytes at data offset " +
             std::to_string(t.offset) + " runs past the end of the file (data section has " +
             std::to_string(c.size() - g.data_offset) + " bytes)");
    t.data = base + *begin;
  }
  std::vector<const tensor_info*> by_offset;
  by_offset.reserve(g.tensors.size());
  for (const auto& t : g.tensors) by_offset.push_back(&t);
  std::sort(by_offset.begin(), by_offset.end(), [](auto* a, auto* b) { return a->offset < b->offset; });
  for (size_t i = 1; i < by_offset.size(); ++i) {
    const tensor_info& a = *by_offset[i - 1];
    const tensor_info& b = *by_offset[i];
    if (b.offset < a.offset + a.n_bytes)  // both sums were checked above
      c.fail("tensors '" + byte_cursor::printable(a.name) + "' and '" + byte_cursor::printable(b.name) +
             "' overlap (data offsets " + std::to_string(a.offset) + " + " + std::to_string(a.n_bytes) + " bytes > " +
             std::to_string(b.offset) + ")");
  }
}

inline parsed_gguf parse_gguf(const uint8_t* data, uint64_t size, const std::string& file) {
  byte_cursor c(data, size, file);
  parsed_gguf g;
  const auto magic = c.read<uint32_t>("magic");
  if (magic != gguf_magic) {
    char buf[16];
    std::snprintf(buf, sizeof buf, "0x%08x", magic);
    c.fail(std::string("bad magic ") + buf + " (expected 0x46554747, \"GGUF\"): not a GGUF file");
  }
  g.version = c.read<uint32_t>("version");
  if (g.version != 2 && g.version != 3)
    c.fail("unsupported GGUF version " + std::to_string(g.version) + " (expected 2 or 3)" +
           (g.version == 1           ? ": version 1 files are obsolete, re-convert the model"
            : (g.version >> 16) != 0 ? ": a big-endian file?"
                                     : ""));
  const auto n_tensors = c.read<uint64_t>("tensor count");
  const auto n_kv = c.read<uint64_t>("metadata count");
  check_count(c, n_kv, gguf_min_kv_bytes, "metadata count", {});
  parse_kvs(c, n_kv, g);
  read_alignment(c, g);
  check_count(c, n_tensors, gguf_min_tensor_info_bytes, "tensor count", {});
  g.tensors.reserve(size_t(std::min<uint64_t>(n_tensors, 1024)));
  for (uint64_t i = 0; i < n_tensors; ++i) g.tensors.push_back(parse_tensor_info(c, i));
  // Index after the vector stops growing: the keys view the names stored in it.
  for (size_t i = 0; i < g.tensors.size(); ++i) {
    const tensor_info& t = g.tensors[i];
    if (const auto [it, fresh] = g.tensor_index.emplace(t.name, i); !fresh) {
      (void)fresh;
      c.fail("duplicate tensor name '" + byte_cursor::printable(t.name) + "' (tensor infos " +
             std::to_string(it->second) + " and " + std::to_string(i) + ")");
    }
  }
  place_tensors(c, data, g);
  return g;
}

}  // namespace q35::io::detail
