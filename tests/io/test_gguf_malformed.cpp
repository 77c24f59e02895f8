// gguf_file on malformed input: every class of damage gives its own error naming the file, the key
// or tensor, and expected vs found; no input crashes, hangs or allocates without bound.
#include <doctest/doctest.h>

#include <cstring>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "gguf_builder.hpp"
#include "gguf_test_util.hpp"
#include "q35/io/gguf.hpp"

namespace io = q35::io;
using q35::test::gguf_builder;
using q35::test::small_gguf;

namespace {

// The error message of parsing `bytes` (named "bad.gguf"), or "(parsed)".
std::string parse_error(std::string_view bytes) {
  return q35::test::gguf_error_of([&] { (void)io::gguf_file::from_memory(bytes, "bad.gguf"); }, "(parsed)");
}

// Error of small_gguf() after `edit` patched it.
template <class Edit>
std::string error_after(Edit&& edit) {
  gguf_builder b = small_gguf();
  edit(b);
  return parse_error(b.bytes);
}

constexpr uint64_t two_pow_60 = uint64_t(1) << 60;

}  // namespace

TEST_CASE("gguf malformed: the unmodified small file parses, with every value type readable") {
  const gguf_builder b = small_gguf();
  const auto f = io::gguf_file::from_memory(b.bytes, "small.gguf");
  CHECK(f.version() == 3);
  CHECK(f.data_offset() == 416);
  CHECK(f.get_string("general.architecture") == "qwen35");
  CHECK(f.get_uint("general.alignment") == 32);
  CHECK(f.get_string_array("test.strings") == std::vector<std::string_view>{"a", "bc", "def"});
  CHECK(f.array_type("test.nested") == io::gguf_type::array);
  CHECK(f.array_size("test.nested") == 2);
  CHECK(f.get_float("test.aaa") == 2.5);
  CHECK(f.get_bool("test.bbb"));
  CHECK(f.get_int("test.neg") == -7);
  CHECK(std::string(f.find("test.nested")->key) == "test.nested");
  CHECK(std::string(f.find("test.nested")->key).size() == 11);
  REQUIRE(f.tensors().size() == 2);
  const io::tensor_info& a = f.tensors()[0];
  CHECK(a.name == "a");
  CHECK(a.n_bytes == 256);
  float a5;
  std::memcpy(&a5, a.data + 5 * 4, 4);
  CHECK(a5 == 5.0f);
  const io::tensor_info& t_b = f.tensors()[1];
  CHECK(t_b.ggml() == io::ggml_type::q8_0);
  CHECK(t_b.n_bytes == 34);
  CHECK(t_b.data[33] == 33);

  CHECK(parse_error(b.bytes) == "(parsed)");
  CHECK(error_after([](gguf_builder& g) { g.patch<uint32_t>(g.at("version"), 2); }) == "(parsed)");  // v2 = v3 layout
}

TEST_CASE("gguf malformed: accessor errors on odd value types") {
  const auto f = io::gguf_file::from_memory(small_gguf().bytes, "small.gguf");
  auto err = [](auto&& fn) { return q35::test::gguf_error_of(fn); };
  CHECK(err([&] { (void)f.get_uint("test.neg"); }) ==
        "small.gguf: key 'test.neg': expected an unsigned value but found -7");
  CHECK(err([&] { (void)f.get_int_array("test.nested"); }) ==
        "small.gguf: key 'test.nested': expected an array of integers but found array of array");
  CHECK(err([&] { (void)f.get_string_array("test.nested"); }) ==
        "small.gguf: key 'test.nested': expected array of string but found array of array");
  CHECK(err([&] { (void)f.array_size("test.aaa"); }) == "small.gguf: key 'test.aaa': expected array but found float64");

  gguf_builder b = small_gguf();  // test.neg as uint64 2^63: out of int64 range
  b.patch<uint32_t>(b.at("value type of key 'test.neg'"), 10);
  b.bytes.insert(b.at("value of key 'test.neg'") + 4, 4, '\0');  // widen the 4-byte value to 8 bytes
  b.patch<uint64_t>(b.at("value of key 'test.neg'"), uint64_t(1) << 63);
  b.bytes.erase(b.at("padding"), 4);  // keep the tensor data at offset 416
  const auto g = io::gguf_file::from_memory(b.bytes, "small.gguf");
  CHECK(g.get_uint("test.neg") == uint64_t(1) << 63);
  CHECK(err([&] { (void)g.get_int("test.neg"); }) ==
        "small.gguf: key 'test.neg': value 9223372036854775808 is out of range (max 2^63-1)");
}

TEST_CASE("gguf malformed: truncated at every field boundary, each with its error") {
  const gguf_builder b = small_gguf();
  // What the reader reports when the file ends where each mark begins (b.marks order).
  const std::vector<std::string> expected = {
      "truncated file: magic needs 4 bytes at offset 0 but only 0 remain (file size 0)",
      "truncated file: version needs 4 bytes at offset 4",
      "truncated file: tensor count needs 8 bytes at offset 8",
      "truncated file: metadata count needs 8 bytes at offset 16",
      // The metadata count is checked against the bytes left before anything is reserved.
      "truncated or corrupt file: metadata count = 7 needs at least 7 x 13 bytes at offset 24 but only 0 remain",
      "truncated or corrupt file: metadata count = 7 needs at least 7 x 13 bytes at offset 24 but only 28 remain",
      "truncated or corrupt file: metadata count = 7 needs at least 7 x 13 bytes at offset 24 but only 32 remain",
      "truncated or corrupt file: metadata count = 7 needs at least 7 x 13 bytes at offset 24 but only 46 remain",
      "truncated or corrupt file: metadata count = 7 needs at least 7 x 13 bytes at offset 24 but only 71 remain",
      "truncated or corrupt file: metadata count = 7 needs at least 7 x 13 bytes at offset 24 but only 75 remain",
      "truncated or corrupt file: metadata count = 7 needs at least 7 x 13 bytes at offset 24 but only 79 remain",
      "truncated file: value type of key 'test.strings' needs 4 bytes at offset 123",
      "truncated file: array element type of key 'test.strings' needs 4 bytes at offset 127",
      "truncated file: array count of key 'test.strings' needs 8 bytes at offset 131",
      "truncated or corrupt file: array count of key 'test.strings' = 3 needs at least 3 x 8 bytes at offset 139 "
      "but only 0 remain",
      "truncated or corrupt file: array count of key 'test.strings' = 3 needs at least 3 x 8 bytes at offset 139 "
      "but only 9 remain",
      "truncated or corrupt file: array count of key 'test.strings' = 3 needs at least 3 x 8 bytes at offset 139 "
      "but only 19 remain",
      "truncated file: key of metadata entry 3 needs 8 bytes at offset 169",
      "truncated file: value type of key 'test.nested' needs 4 bytes at offset 188",
      "truncated file: array element type of key 'test.nested' needs 4 bytes at offset 192",
      "truncated file: array count of key 'test.nested' needs 8 bytes at offset 196",
      "truncated or corrupt file: array count of key 'test.nested' = 2 needs at least 2 x 12 bytes at offset 204 "
      "but only 0 remain",
      "truncated or corrupt file: array count of key 'test.nested' = 2 needs at least 2 x 12 bytes at offset 204 "
      "but only 4 remain",
      "truncated or corrupt file: array count of key 'test.nested' = 2 needs at least 2 x 12 bytes at offset 204 "
      "but only 20 remain",
      "truncated file: key of metadata entry 4 needs 8 bytes at offset 240",
      "truncated file: value type of key 'test.aaa' needs 4 bytes at offset 256",
      "truncated file: value of key 'test.aaa' needs 8 bytes at offset 260",
      "truncated file: key of metadata entry 5 needs 8 bytes at offset 268",
      "truncated file: value type of key 'test.bbb' needs 4 bytes at offset 284",
      "truncated file: value of key 'test.bbb' needs 1 bytes at offset 288",
      "truncated file: key of metadata entry 6 needs 8 bytes at offset 289",
      "truncated file: value type of key 'test.neg' needs 4 bytes at offset 305",
      "truncated file: value of key 'test.neg' needs 4 bytes at offset 309",
      // The tensor count is checked against the bytes left after the metadata.
      "truncated or corrupt file: tensor count = 2 needs at least 2 x 24 bytes at offset 313 but only 0 remain",
      "truncated or corrupt file: tensor count = 2 needs at least 2 x 24 bytes at offset 313 but only 9 remain",
      "truncated or corrupt file: tensor count = 2 needs at least 2 x 24 bytes at offset 313 but only 13 remain",
      "truncated or corrupt file: tensor count = 2 needs at least 2 x 24 bytes at offset 313 but only 29 remain",
      "truncated or corrupt file: tensor count = 2 needs at least 2 x 24 bytes at offset 313 but only 33 remain",
      "truncated or corrupt file: tensor count = 2 needs at least 2 x 24 bytes at offset 313 but only 41 remain",
      "truncated file: dimension count of tensor 'b' needs 4 bytes at offset 363",
      "truncated file: shape of tensor 'b' needs 8 bytes at offset 367",
      "truncated file: type of tensor 'b' needs 4 bytes at offset 375",
      "truncated file: data offset of tensor 'b' needs 8 bytes at offset 379",
      "data section would start at offset 416, past the end of the file (size 387)",
      "tensor 'a': data of 256 bytes at data offset 0 runs past the end of the file (data section has 0 bytes)",
      "tensor 'b': data of 34 bytes at data offset 256 runs past the end of the file (data section has 256 bytes)",
  };
  REQUIRE(b.marks.size() == expected.size());
  for (size_t i = 0; i < b.marks.size(); ++i) {
    const size_t offset = b.marks[i].first;
    const std::string& what = b.marks[i].second;
    CAPTURE(what);
    CAPTURE(offset);
    const std::string msg = parse_error(std::string_view(b.bytes).substr(0, offset));
    INFO(msg);
    CHECK(msg.rfind("bad.gguf: " + expected[i], 0) == 0);
  }
}

TEST_CASE("gguf malformed: every prefix of a valid file fails cleanly") {
  const gguf_builder b = small_gguf();
  for (size_t n = 0; n < b.bytes.size(); ++n) {
    CAPTURE(n);
    const std::string msg = parse_error(std::string_view(b.bytes).substr(0, n));
    CHECK((msg.find("truncated") != std::string::npos || msg.find("past the end") != std::string::npos));
  }
}

TEST_CASE("gguf malformed: bad magic and unsupported versions") {
  CHECK(error_after([](gguf_builder& g) { g.bytes[0] = 'g'; }) ==
        "bad.gguf: bad magic 0x46554767 (expected 0x46554747, \"GGUF\"): not a GGUF file");
  CHECK(error_after([](gguf_builder& g) { g.patch<uint32_t>(g.at("version"), 1); }) ==
        "bad.gguf: unsupported GGUF version 1 (expected 2 or 3): version 1 files are obsolete, re-convert the model");
  CHECK(error_after([](gguf_builder& g) { g.patch<uint32_t>(g.at("version"), 4); }) ==
        "bad.gguf: unsupported GGUF version 4 (expected 2 or 3)");
  CHECK(error_after([](gguf_builder& g) { g.patch<uint32_t>(g.at("version"), 0x03000000); }) ==
        "bad.gguf: unsupported GGUF version 50331648 (expected 2 or 3): a big-endian file?");
}

TEST_CASE("gguf malformed: absurd counts are rejected before anything is reserved") {
  CHECK(error_after([](gguf_builder& g) { g.patch<uint64_t>(g.at("metadata count"), two_pow_60); })
            .rfind("bad.gguf: truncated or corrupt file: metadata count = 1152921504606846976 needs at least "
                   "1152921504606846976 x 13 bytes at offset 24",
                   0) == 0);
  CHECK(error_after([](gguf_builder& g) { g.patch<uint64_t>(g.at("tensor count"), two_pow_60); })
            .rfind("bad.gguf: truncated or corrupt file: tensor count = 1152921504606846976 needs at least "
                   "1152921504606846976 x 24 bytes at offset 313",
                   0) == 0);
  CHECK(error_after([](gguf_builder& g) { g.patch<uint64_t>(g.at("array count of key 'test.strings'"), two_pow_60); })
            .rfind("bad.gguf: truncated or corrupt file: array count of key 'test.strings' = 1152921504606846976 "
                   "needs at least 1152921504606846976 x 8 bytes",
                   0) == 0);
  CHECK(error_after([](gguf_builder& g) { g.patch<uint64_t>(g.at("array count of key 'test.nested'"), two_pow_60); })
            .rfind("bad.gguf: truncated or corrupt file: array count of key 'test.nested' = 1152921504606846976 "
                   "needs at least 1152921504606846976 x 12 bytes",
                   0) == 0);
  CHECK(error_after(
            [](gguf_builder& g) { g.patch<uint64_t>(g.at("count of nested array in key 'test.nested'"), two_pow_60); })
            .rfind("bad.gguf: truncated or corrupt file: count of nested array in key 'test.nested' = "
                   "1152921504606846976 needs at least 1152921504606846976 x 4 bytes",
                   0) == 0);
  // 2^62 four-byte elements: count * 4 would wrap to 0 without the check.
  CHECK(error_after([](gguf_builder& g) {
          g.patch<uint64_t>(g.at("count of nested array in key 'test.nested'"), uint64_t(1) << 62);
        }).find("count of nested array in key 'test.nested' = 4611686018427387904 needs at least") !=
        std::string::npos);
}

TEST_CASE("gguf malformed: strings that run past the end") {
  CHECK(error_after([](gguf_builder& g) { g.patch<uint64_t>(g.at("value of key 'general.architecture'"), 1000000); }) ==
        "bad.gguf: value of key 'general.architecture': string length 1000000 at offset 56 runs past the end of the "
        "file (642 bytes remain)");
  CHECK(error_after([](gguf_builder& g) { g.patch<uint64_t>(g.at("key of metadata entry 0"), ~uint64_t(0)); }) ==
        "bad.gguf: key of metadata entry 0: string length 18446744073709551615 at offset 24 runs past the end of "
        "the file (674 bytes remain)");
  CHECK(error_after([](gguf_builder& g) { g.patch<uint64_t>(g.at("name of tensor info 1"), 400); }) ==
        "bad.gguf: name of tensor info 1: string length 400 at offset 354 runs past the end of the file (344 bytes "
        "remain)");
  const size_t second = small_gguf().marks[15].first;  // the second element of test.strings
  CHECK(error_after([&](gguf_builder& g) { g.patch<uint64_t>(second, 5000); }) ==
        "bad.gguf: string array element of key 'test.strings': string length 5000 at offset 148 runs past the end of "
        "the file (550 bytes remain)");
}

TEST_CASE("gguf malformed: tensor data past the end of the file") {
  CHECK(error_after([](gguf_builder& g) { g.patch<uint64_t>(g.at("data offset of tensor 'b'"), 1024); }) ==
        "bad.gguf: tensor 'b': data of 34 bytes at data offset 1024 runs past the end of the file (data section has "
        "290 bytes)");
  // An offset near 2^64 must not wrap around when the data section start is added.
  CHECK(error_after([](gguf_builder& g) { g.patch<uint64_t>(g.at("data offset of tensor 'b'"), ~uint64_t(31)); }) ==
        "bad.gguf: tensor 'b': data of 34 bytes at data offset 18446744073709551584 runs past the end of the file "
        "(data section has 290 bytes)");
  // A shape whose byte size is larger than the file.
  CHECK(error_after([](gguf_builder& g) { g.patch<uint64_t>(g.at("shape of tensor 'a'") + 8, uint64_t(1) << 40); }) ==
        "bad.gguf: tensor 'a': data of 140737488355328 bytes at data offset 0 runs past the end of the file (data "
        "section has 290 bytes)");
  CHECK(error_after([](gguf_builder& g) { g.bytes.resize(g.bytes.size() - 1); }) ==
        "bad.gguf: tensor 'b': data of 34 bytes at data offset 256 runs past the end of the file (data section has "
        "289 bytes)");
}

TEST_CASE("gguf malformed: misaligned offsets and bad alignments") {
  CHECK(error_after([](gguf_builder& g) { g.patch<uint64_t>(g.at("data offset of tensor 'b'"), 257); }) ==
        "bad.gguf: tensor 'b': data offset 257 is not a multiple of the alignment 32");
  CHECK(error_after([](gguf_builder& g) { g.patch<uint32_t>(g.at("value of key 'general.alignment'"), 48); }) ==
        "bad.gguf: key 'general.alignment': 48 is not a power of two");
  CHECK(error_after([](gguf_builder& g) { g.patch<uint32_t>(g.at("value of key 'general.alignment'"), 0); }) ==
        "bad.gguf: key 'general.alignment': 0 is not a power of two");
  CHECK(error_after([](gguf_builder& g) { g.patch<uint32_t>(g.at("value type of key 'general.alignment'"), 5); }) ==
        "bad.gguf: key 'general.alignment': expected uint32 but found int32");
  // Alignment 64: the data section moves to 448, past this file's padding, and offset 256 is still aligned.
  CHECK(error_after([](gguf_builder& g) { g.patch<uint32_t>(g.at("value of key 'general.alignment'"), 64); }) ==
        "bad.gguf: tensor 'b': data of 34 bytes at data offset 256 runs past the end of the file (data section has "
        "258 bytes)");
  // Overlapping tensors (b at 224 lies inside a's 256 bytes).
  CHECK(error_after([](gguf_builder& g) { g.patch<uint64_t>(g.at("data offset of tensor 'b'"), 224); }) ==
        "bad.gguf: tensors 'a' and 'b' overlap (data offsets 0 + 256 bytes > 224)");
}

TEST_CASE("gguf malformed: duplicate key and tensor names") {
  CHECK(error_after([](gguf_builder& g) { g.bytes.replace(g.at("key of metadata entry 5") + 8, 8, "test.aaa"); }) ==
        "bad.gguf: duplicate key 'test.aaa' (metadata entries 4 and 5)");
  CHECK(error_after([](gguf_builder& g) { g.bytes[g.at("name of tensor info 1") + 8] = 'a'; }) ==
        "bad.gguf: duplicate tensor name 'a' (tensor infos 0 and 1)");
}

TEST_CASE("gguf malformed: unknown type ids and impossible shapes") {
  CHECK(error_after([](gguf_builder& g) { g.patch<uint32_t>(g.at("type of tensor 'b'"), 99); }) ==
        "bad.gguf: tensor 'b': unknown ggml type id 99");
  CHECK(error_after([](gguf_builder& g) { g.patch<uint32_t>(g.at("type of tensor 'b'"), 4); }) ==  // removed Q4_2
        "bad.gguf: tensor 'b': unknown ggml type id 4");
  CHECK(error_after([](gguf_builder& g) { g.patch<uint32_t>(g.at("value type of key 'test.aaa'"), 13); }) ==
        "bad.gguf: key 'test.aaa': unknown value type 13 (expected 0..12)");
  CHECK(error_after([](gguf_builder& g) { g.patch<uint32_t>(g.at("array element type of key 'test.strings'"), 77); }) ==
        "bad.gguf: key 'test.strings': unknown value type 77 (expected 0..12)");
  CHECK(error_after([](gguf_builder& g) {
          g.patch<uint32_t>(g.at("element type of nested array in key 'test.nested'"), 0xffffffffu);
        }) == "bad.gguf: key 'test.nested': unknown value type 4294967295 (expected 0..12)");
  CHECK(error_after([](gguf_builder& g) { g.patch<uint32_t>(g.at("dimension count of tensor 'a'"), 5); }) ==
        "bad.gguf: tensor 'a': 5 dimensions (expected at most 4)");
  CHECK(error_after([](gguf_builder& g) { g.patch<uint64_t>(g.at("shape of tensor 'b'"), 48); }) ==
        "bad.gguf: tensor 'b' of type q8_0: ne[0] = 48 is not a multiple of the block size 32");
  CHECK(error_after([](gguf_builder& g) { g.patch<uint64_t>(g.at("shape of tensor 'a'") + 8, uint64_t(1) << 62); }) ==
        "bad.gguf: tensor 'a': dimension 1 = 4611686018427387904 makes the element count overflow int64");
  CHECK(error_after([](gguf_builder& g) { g.patch<uint64_t>(g.at("shape of tensor 'a'"), ~uint64_t(0)); }) ==
        "bad.gguf: tensor 'a': dimension 0 = 18446744073709551615 makes the element count overflow int64");
}

TEST_CASE("gguf malformed: arrays nested too deeply") {
  // A key holding [[[[...[1]...]]]] nested `depth` levels deep (outermost array counts as level 1).
  auto nested = [](int depth) {
    gguf_builder g;
    g.header(3, 0, 1);
    g.kv_head(0, "deep", 9);
    for (int i = 1; i < depth; ++i) {
      g.put<uint32_t>(9);
      g.put<uint64_t>(1);
    }
    g.put<uint32_t>(4);
    g.put<uint64_t>(1);
    g.put<uint32_t>(1);
    return g.bytes;
  };
  CHECK(parse_error(nested(8)) == "(parsed)");
  CHECK(parse_error(nested(9)) == "bad.gguf: key 'deep': arrays nested deeper than 8");
  CHECK(parse_error(nested(100000)) == "bad.gguf: key 'deep': arrays nested deeper than 8");
}

TEST_CASE("gguf malformed: names with control bytes are escaped in messages") {
  gguf_builder b = small_gguf();
  b.bytes[b.at("name of tensor info 1") + 8] = '\n';
  b.patch<uint32_t>(b.at("type of tensor 'b'"), 99);  // marks keep the names they were written with
  CHECK(parse_error(b.bytes) == "bad.gguf: tensor '\\x0a': unknown ggml type id 99");
}

TEST_CASE("gguf malformed: random byte edits of a fixture's header never crash, and a parse stays in bounds") {
  const std::string good = q35::test::read_bytes(q35::test::data_path("tiny_dense_q4km.gguf"));
  const auto f = io::gguf_file::from_memory(good, "good.gguf");
  const size_t header = f.data_offset();
  std::mt19937_64 rng(12345);
  for (int trial = 0; trial < 200; ++trial) {
    std::string bytes = good;
    const int edits = 1 + int(rng() % 4);
    for (int e = 0; e < edits; ++e) bytes[rng() % header] = char(rng());
    CAPTURE(trial);
    try {
      const auto g = io::gguf_file::from_memory(bytes, "bad.gguf");
      // Whatever the edit changed, every tensor's bytes lie inside the file.
      for (const io::tensor_info& t : g.tensors()) {
        CHECK(t.offset % g.alignment() == 0);
        CHECK(g.data_offset() + t.offset + t.n_bytes <= g.file_bytes());
        CHECK(t.data - (g.data_offset() + t.offset) ==
              g.tensors().front().data - (g.data_offset() + g.tensors().front().offset));
      }
    } catch (const io::gguf_error& e) {
      CHECK(std::string(e.what()).rfind("bad.gguf: ", 0) == 0);
    }
  }
}

// Single edits whose outcome the edited field decides: each trial picks a metadata entry of the
// fixture and one kind of edit, and asserts the exact result.
TEST_CASE("gguf malformed: a random edit of one metadata field has the outcome that field determines") {
  const std::string good = q35::test::read_bytes(q35::test::data_path("tiny_dense_q4km.gguf"));
  const auto f = io::gguf_file::from_memory(good, "good.gguf");
  const uint8_t* base = f.tensors().front().data - f.data_offset() - f.tensors().front().offset;
  const auto offset_of = [&](const void* p) { return size_t(static_cast<const uint8_t*>(p) - base); };
  // The parsed metadata entry as bytes: key, type, element type, count and the value's bytes.
  const auto entry = [](const io::gguf_kv& kv) {
    return std::string(kv.key) + '|' + std::to_string(int(kv.type)) + '|' + std::to_string(int(kv.elem_type)) + '|' +
           std::to_string(kv.count) + '|' + std::string(reinterpret_cast<const char*>(kv.value), kv.value_bytes);
  };
  std::mt19937_64 rng(777);
  int n_parsed = 0, n_rejected = 0;
  for (int trial = 0; trial < 200; ++trial) {
    const size_t i = rng() % f.metadata().size();
    const io::gguf_kv& kv = f.metadata()[i];
    if (kv.key == "general.alignment") continue;     // its value and presence move the data section
    const size_t key_at = offset_of(kv.key.data());  // first byte of the key; its u64 length is before it
    const size_t type_at = key_at + kv.key.size();
    std::string bytes = good;
    const int kind = trial % 4;
    CAPTURE(trial);
    CAPTURE(kind);
    CAPTURE(kv.key);
    if (kind == 0 && kv.type != io::gguf_type::array) {
      // A byte of a scalar value or of a string's characters: parses; only that value changes.
      const size_t first = offset_of(kv.value) + (kv.type == io::gguf_type::string ? 8 : 0);
      const size_t n = offset_of(kv.value) + kv.value_bytes - first;
      if (n == 0) continue;
      const size_t at = first + rng() % n;
      bytes[at] = char(uint8_t(bytes[at]) ^ uint8_t(1 + rng() % 255));
      const auto g = io::gguf_file::from_memory(bytes, "bad.gguf");
      REQUIRE(g.metadata().size() == f.metadata().size());
      for (size_t k = 0; k < f.metadata().size(); ++k) {
        const io::gguf_kv& e = g.metadata()[k];
        if (k != i) {
          CHECK(entry(e) == entry(f.metadata()[k]));
        } else {
          CHECK(e.key == kv.key);
          CHECK(std::string_view(reinterpret_cast<const char*>(e.value), e.value_bytes) ==
                std::string_view(bytes).substr(offset_of(kv.value), kv.value_bytes));
          CHECK(entry(e) != entry(kv));
        }
      }
      REQUIRE(g.tensors().size() == f.tensors().size());
      for (size_t k = 0; k < f.tensors().size(); ++k) CHECK(g.tensors()[k].n_bytes == f.tensors()[k].n_bytes);
      ++n_parsed;
    } else if (kind == 1) {
      // The value type becomes an id past the last type: rejected naming the key and the id.
      const uint32_t t = io::gguf_type_count + uint32_t(rng() % 100000);
      std::memcpy(bytes.data() + type_at, &t, 4);
      CHECK(parse_error(bytes) == "bad.gguf: key '" + std::string(kv.key) + "': unknown value type " +
                                      std::to_string(t) + " (expected 0..12)");
      ++n_rejected;
    } else if (kind == 2) {
      // The key's length runs past the end of the file: rejected naming the entry, offset and what remains.
      const uint64_t len = good.size() - key_at + 1 + rng() % (uint64_t(1) << 40);
      std::memcpy(bytes.data() + key_at - 8, &len, 8);
      CHECK(parse_error(bytes) == "bad.gguf: key of metadata entry " + std::to_string(i) + ": string length " +
                                      std::to_string(len) + " at offset " + std::to_string(key_at - 8) +
                                      " runs past the end of the file (" + std::to_string(good.size() - key_at) +
                                      " bytes remain)");
      ++n_rejected;
    } else if (kind == 3 && !kv.key.empty()) {
      // A character of the key: the entry is found under the new key (or, if that names another
      // entry, the file is rejected as holding a duplicate key).
      const size_t at = key_at + rng() % kv.key.size();
      bytes[at] = char(uint8_t(bytes[at]) ^ uint8_t(1 + rng() % 255));
      const std::string new_key = bytes.substr(key_at, kv.key.size());
      if (const io::gguf_kv* other = f.find(new_key)) {
        const size_t j = size_t(other - f.metadata().data());
        CHECK(parse_error(bytes).find("duplicate key") != std::string::npos);
        CHECK(j != i);
        ++n_rejected;
      } else {
        const auto g = io::gguf_file::from_memory(bytes, "bad.gguf");
        CHECK(!g.has(kv.key));
        REQUIRE(g.find(new_key));
        CHECK(std::string_view(reinterpret_cast<const char*>(g.find(new_key)->value), g.find(new_key)->value_bytes) ==
              std::string_view(reinterpret_cast<const char*>(kv.value), kv.value_bytes));
        ++n_parsed;
      }
    }
  }
  // The trials covered both outcomes (the seed is fixed: these counts are exact properties of the test).
  CHECK(n_parsed > 20);
  CHECK(n_rejected > 20);
}

TEST_CASE("gguf malformed: a fixture truncated inside each metadata value or the data names the key or tensor") {
  const std::string good = q35::test::read_bytes(q35::test::data_path("tiny_dense_q4km.gguf"));
  const auto f = io::gguf_file::from_memory(good, "good.gguf");
  const auto* base = f.tensors().front().data - f.data_offset() - f.tensors().front().offset;
  for (const io::gguf_kv& kv : f.metadata()) {
    const size_t at = size_t(kv.value - base) + (kv.value_bytes > 1 ? 1 : 0);
    const std::string msg = parse_error(std::string_view(good).substr(0, at));
    CAPTURE(msg);
    if (at - 24 < f.metadata().size() * 13) {  // too short for the metadata count: rejected up front
      CHECK(msg.find("metadata count = " + std::to_string(f.metadata().size()) + " needs at least") !=
            std::string::npos);
    } else {
      std::string quoted = "'";
      quoted.append(kv.key).push_back('\'');
      CHECK(msg.find(quoted) != std::string::npos);
    }
  }
  // Cut inside the data section: the tensor whose bytes are cut is named.
  const io::tensor_info* last = &f.tensors().front();
  for (const auto& t : f.tensors())
    if (t.offset > last->offset) last = &t;
  const std::string msg = parse_error(std::string_view(good).substr(0, good.size() - 1));
  CHECK(msg.find("tensor '" + last->name + "': data of " + std::to_string(last->n_bytes) + " bytes") !=
        std::string::npos);
}

TEST_CASE("gguf malformed: a huge array parses but is not copied into memory beyond the limit") {
  // 2^24 + 1 one-byte integers: 16 MiB in the file, 128 MiB as int64_t.
  const uint64_t n = io::max_array_elements + 1;
  gguf_builder b;
  b.header(3, 0, 2);
  b.array_head(0, "big", uint32_t(io::gguf_type::uint8), n);
  b.bytes.append(size_t(n), '\x01');
  b.array_head(1, "words", uint32_t(io::gguf_type::string), 5);
  for (int i = 0; i < 5; ++i) b.put_string("w");
  const auto f = io::gguf_file::from_memory(b.bytes, "big.gguf");
  CHECK(f.array_size("big") == n);
  CHECK(q35::test::gguf_error_of([&] { (void)f.get_int_array("big"); }) ==
        "big.gguf: key 'big': array of 16777217 elements is more than the 16777216 q35 copies into memory");
  // A caller's own, smaller limit (read_hparams: one value per layer, at most 4096 layers).
  CHECK(q35::test::gguf_error_of([&] { (void)f.get_string_array("words", 4); }) ==
        "big.gguf: key 'words': array of 5 elements is more than the 4 q35 copies into memory");
  CHECK(f.get_string_array("words", 5).size() == 5);
}

TEST_CASE("gguf malformed: a tensor with ne[0] = 0 and a row count that overflows is rejected") {
  // n_elements = 0 whatever the other dimensions, so only the checked row count catches 2^32 * 2^32 rows.
  gguf_builder b;
  b.header(3, 1, 1);
  b.kv_head(0, "general.architecture", uint32_t(io::gguf_type::string));
  b.put_string("qwen35");
  b.tensor_info(0, "z", {0, uint64_t(1) << 32, uint64_t(1) << 32}, 0, 0);
  b.pad_to(32);
  CHECK(parse_error(b.bytes) == "bad.gguf: tensor 'z': byte size overflows uint64");
}
