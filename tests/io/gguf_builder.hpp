// A tiny GGUF writer for the reader's tests: builds files field by field and remembers where each
// field starts (a "mark"), so tests can truncate at or patch any field of a known-good file.
#pragma once

#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace q35::test {

struct gguf_builder {
  std::string bytes;
  // (offset, what the reader reads there): e.g. {24, "key of metadata entry 0"}.
  std::vector<std::pair<size_t, std::string>> marks;

  void mark(std::string what) { marks.emplace_back(bytes.size(), std::move(what)); }
  // Offset of the mark `what`; an unknown mark is a bug in the test and throws (failing the case).
  size_t at(std::string_view what) const {
    for (const auto& [off, w] : marks)
      if (w == what) return off;
    throw std::out_of_range("gguf_builder: no mark '" + std::string(what) + "'");
  }

  template <class T>
  void put(T v) {
    bytes.append(reinterpret_cast<const char*>(&v), sizeof(T));
  }
  void put_string(std::string_view s) {
    put<uint64_t>(s.size());
    bytes.append(s);
  }
  template <class T>
  void patch(size_t offset, T v) {
    if (offset > bytes.size() || bytes.size() - offset < sizeof(T))
      throw std::out_of_range("gguf_builder: patch of " + std::to_string(sizeof(T)) + " bytes at offset " +
                              std::to_string(offset) + " of a " + std::to_string(bytes.size()) + "-byte file");
    std::memcpy(bytes.data() + offset, &v, sizeof(T));
  }
  void pad_to(size_t alignment) {
    while (bytes.size() % alignment) bytes.push_back('\0');
  }

  void header(uint32_t version, uint64_t n_tensors, uint64_t n_kv) {
    mark("magic");
    bytes += "GGUF";
    mark("version");
    put<uint32_t>(version);
    mark("tensor count");
    put<uint64_t>(n_tensors);
    mark("metadata count");
    put<uint64_t>(n_kv);
  }
  // key + type; the caller writes the value after it.
  void kv_head(size_t index, std::string_view key, uint32_t type) {
    mark("key of metadata entry " + std::to_string(index));
    put_string(key);
    mark("value type of key '" + std::string(key) + "'");
    put<uint32_t>(type);
    if (type != 9) mark("value of key '" + std::string(key) + "'");
  }
  void array_head(size_t index, std::string_view key, uint32_t elem_type, uint64_t count) {
    kv_head(index, key, 9);
    mark("array element type of key '" + std::string(key) + "'");
    put<uint32_t>(elem_type);
    mark("array count of key '" + std::string(key) + "'");
    put<uint64_t>(count);
  }
  void tensor_info(size_t index, std::string_view name, std::initializer_list<uint64_t> ne, uint32_t type,
                   uint64_t offset) {
    mark("name of tensor info " + std::to_string(index));
    put_string(name);
    const std::string n(name);
    mark("dimension count of tensor '" + n + "'");
    put<uint32_t>(uint32_t(ne.size()));
    mark("shape of tensor '" + n + "'");
    for (uint64_t d : ne) put<uint64_t>(d);
    mark("type of tensor '" + n + "'");
    put<uint32_t>(type);
    mark("data offset of tensor '" + n + "'");
    put<uint64_t>(offset);
  }
};

// A small valid GGUF v3 file with every kind of field: scalars of several types, a string array, a
// nested array, an explicit general.alignment, and two tensors (f32 [32, 2] at 0, q8_0 [32] at 256).
inline gguf_builder small_gguf() {
  gguf_builder b;
  b.header(3, 2, 7);
  b.kv_head(0, "general.architecture", 8);
  b.put_string("qwen35");
  b.kv_head(1, "general.alignment", 4);
  b.put<uint32_t>(32);
  b.array_head(2, "test.strings", 8, 3);
  for (const char* s : {"a", "bc", "def"}) {
    b.mark("string array element of key 'test.strings'");
    b.put_string(s);
  }
  b.array_head(3, "test.nested", 9, 2);  // [[1, 2], [3]] as int32
  b.mark("element type of nested array in key 'test.nested'");
  b.put<uint32_t>(5);
  b.mark("count of nested array in key 'test.nested'");
  b.put<uint64_t>(2);
  b.put<int32_t>(1);
  b.put<int32_t>(2);
  b.mark("second nested array in key 'test.nested'");
  b.put<uint32_t>(5);
  b.put<uint64_t>(1);
  b.put<int32_t>(3);
  b.kv_head(4, "test.aaa", 12);
  b.put<double>(2.5);
  b.kv_head(5, "test.bbb", 7);
  b.put<uint8_t>(1);
  b.kv_head(6, "test.neg", 5);
  b.put<int32_t>(-7);
  b.tensor_info(0, "a", {32, 2}, 0, 0);
  b.tensor_info(1, "b", {32}, 8, 256);
  b.mark("padding");
  b.pad_to(32);
  b.mark("tensor data");
  for (int i = 0; i < 64; ++i) b.put<float>(float(i));
  b.mark("tensor data of b");
  for (int i = 0; i < 34; ++i) b.put<uint8_t>(uint8_t(i));
  return b;
}

}  // namespace q35::test
