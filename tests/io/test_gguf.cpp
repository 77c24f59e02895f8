// gguf_file on the committed fixtures: header, metadata values and tensor infos as the fixture
// README and gguf-py report them, open() vs from_memory(), and the typed accessors' errors.
#include <doctest/doctest.h>

#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>

#include "gguf_test_util.hpp"
#include "q35/io/gguf.hpp"

namespace io = q35::io;
using q35::test::data_path;

namespace {

template <class F>
std::string error_of(F&& f) {
  return q35::test::gguf_error_of(f);
}

}  // namespace

TEST_CASE("gguf: tiny_dense_q4km header, metadata and tensors") {
  const auto f = io::gguf_file::open(data_path("tiny_dense_q4km.gguf"));
  CHECK(f.version() == 3);
  CHECK(f.alignment() == 32);
  CHECK(f.metadata().size() == 29);
  CHECK(f.tensors().size() == 56);
  CHECK(f.get_string("general.architecture") == "qwen35");
  CHECK(f.get_uint("qwen35.block_count") == 4);
  CHECK(f.get_uint("qwen35.embedding_length") == 256);
  CHECK(f.get_uint("qwen35.attention.key_length") == 256);
  CHECK(f.get_uint("qwen35.ssm.time_step_rank") == 4);
  CHECK(f.get_uint("general.file_type") == 15);  // Q4_K_M
  CHECK(f.get_float("qwen35.rope.freq_base") == 1.0e7);
  CHECK(f.get_float("qwen35.attention.layer_norm_rms_epsilon") == doctest::Approx(1e-6).epsilon(1e-6));
  CHECK(f.get_int_array("qwen35.rope.dimension_sections") == std::vector<int64_t>{11, 11, 10, 0});
  CHECK(f.array_type("qwen35.rope.dimension_sections") == io::gguf_type::int32);

  // Tokenizer (fixture README): 512 tokens, specials at 507..511, eos 509.
  const auto tokens = f.get_string_array("tokenizer.ggml.tokens");
  REQUIRE(tokens.size() == 512);
  CHECK(tokens[507] == "<|endoftext|>");
  CHECK(tokens[508] == "<|im_start|>");
  CHECK(tokens[509] == "<|im_end|>");
  CHECK(tokens[510] == "<think>");
  CHECK(tokens[511] == "</think>");
  CHECK(f.get_uint("tokenizer.ggml.eos_token_id") == 509);
  CHECK(f.get_string("tokenizer.ggml.model") == "gpt2");
  CHECK(f.get_string("tokenizer.ggml.pre") == "qwen35");
  CHECK(f.get_int_array("tokenizer.ggml.token_type").size() == 512);
  CHECK(f.array_size("tokenizer.ggml.merges") == f.get_string_array("tokenizer.ggml.merges").size());

  // Tensor infos, with offsets and byte sizes as gguf-py reports them (data offset 15328 in the file).
  const io::tensor_info* out = f.find_tensor("output.weight");
  REQUIRE(out);
  CHECK(out->ggml() == io::ggml_type::q6_k);
  CHECK(out->type_name() == "q6_K");
  CHECK(out->n_dims == 2);
  CHECK(out->ne == std::array<uint64_t, 4>{256, 512, 1, 1});
  CHECK(out->n_bytes == 512 * 210);  // one Q6_K block per row
  CHECK(f.data_offset() + out->offset == 15328);
  const io::tensor_info* qkv = f.find_tensor("blk.0.attn_qkv.weight");
  REQUIRE(qkv);
  CHECK(qkv->ggml() == io::ggml_type::q4_k);
  CHECK(qkv->n_bytes == 1024 * 144);
  const io::tensor_info* conv = f.find_tensor("blk.0.ssm_conv1d.weight");
  REQUIRE(conv);
  CHECK(conv->ggml() == io::ggml_type::f32);
  CHECK(conv->ne == std::array<uint64_t, 4>{4, 1024, 1, 1});
  CHECK(f.find_tensor("blk.0.ssm_a") != nullptr);
  CHECK(f.find_tensor("blk.4.attn_norm.weight") == nullptr);

  // Counts by type (gguf-py): 28 q4_K, 23 F32, 5 q6_K.
  std::map<std::string, int> by_type;
  for (const auto& t : f.tensors()) {
    CHECK(t.offset % f.alignment() == 0);
    ++by_type[std::string(t.type_name())];
  }
  CHECK(by_type == std::map<std::string, int>{{"f32", 23}, {"q4_K", 28}, {"q6_K", 5}});
}

TEST_CASE("gguf: the data pointers address the tensor bytes in the file") {
  const std::string bytes = q35::test::read_bytes(data_path("tiny_moe_q4km.gguf"));
  const auto f = io::gguf_file::open(data_path("tiny_moe_q4km.gguf"));
  const auto m = io::gguf_file::from_memory(bytes, "mem");
  REQUIRE(f.tensors().size() == 76);
  REQUIRE(m.tensors().size() == 76);
  for (size_t i = 0; i < f.tensors().size(); ++i) {
    const auto& a = f.tensors()[i];
    const auto& b = m.tensors()[i];
    CHECK(a.name == b.name);
    CHECK(a.n_bytes == b.n_bytes);
    const uint64_t at = f.data_offset() + a.offset;
    REQUIRE(at + a.n_bytes <= bytes.size());
    CHECK(std::memcmp(a.data, bytes.data() + at, a.n_bytes) == 0);
    CHECK(std::memcmp(b.data, bytes.data() + at, b.n_bytes) == 0);
  }
  // Q8_0 and Q5_K appear in this file (gguf-py: 34 q4_K, 31 F32, 5 q6_K, 5 q8_0, 1 q5_K).
  std::map<std::string, int> by_type;
  for (const auto& t : f.tensors()) ++by_type[std::string(t.type_name())];
  CHECK(by_type == std::map<std::string, int>{{"f32", 31}, {"q4_K", 34}, {"q5_K", 1}, {"q6_K", 5}, {"q8_0", 5}});
  const io::tensor_info* exps = f.find_tensor("blk.0.ffn_gate_exps.weight");
  REQUIRE(exps);
  CHECK(exps->n_dims == 3);
  CHECK(exps->ne == std::array<uint64_t, 4>{256, 256, 8, 1});
  CHECK(exps->n_elements() == 256 * 256 * 8);
}

TEST_CASE("gguf: a moved-from file's views stay valid in the moved-to file") {
  auto f = io::gguf_file::from_memory(q35::test::read_bytes(data_path("tiny_interleaved_q4km.gguf")), "mem");
  const auto tokens_before = f.get_string_array("tokenizer.ggml.tokens");
  io::gguf_file g = std::move(f);
  CHECK(g.get_string_array("tokenizer.ggml.tokens") == tokens_before);
  CHECK(g.find_tensor("blk.1.ffn_gate_exps.weight") != nullptr);
  CHECK(g.find_tensor("blk.0.ffn_gate.weight") != nullptr);
  CHECK(g.get_uint("qwen35moe.expert_count") == 16);
}

TEST_CASE("gguf: accessor errors name the file, the key, and expected vs found") {
  const auto f = io::gguf_file::open(data_path("tiny_dense_q4km.gguf"));
  const std::string file = data_path("tiny_dense_q4km.gguf");
  CHECK(error_of([&] { (void)f.get_uint("qwen35.no_such_key"); }) == file + ": missing key 'qwen35.no_such_key'");
  CHECK(error_of([&] { (void)f.get_string("qwen35.block_count"); }) ==
        file + ": key 'qwen35.block_count': expected string but found uint32");
  CHECK(error_of([&] { (void)f.get_uint("general.architecture"); }) ==
        file + ": key 'general.architecture': expected an integer but found string");
  CHECK(error_of([&] { (void)f.get_float("qwen35.block_count"); }) ==
        file + ": key 'qwen35.block_count': expected float32 or float64 but found uint32");
  CHECK(error_of([&] { (void)f.get_bool("qwen35.block_count"); }) ==
        file + ": key 'qwen35.block_count': expected bool but found uint32");
  CHECK(error_of([&] { (void)f.get_string_array("tokenizer.ggml.token_type"); }) ==
        file + ": key 'tokenizer.ggml.token_type': expected array of string but found array of int32");
  CHECK(error_of([&] { (void)f.get_int_array("tokenizer.ggml.tokens"); }) ==
        file + ": key 'tokenizer.ggml.tokens': expected an array of integers but found array of string");
  CHECK(error_of([&] { (void)io::gguf_file::open(data_path("no_such_file.gguf")); }) ==
        data_path("no_such_file.gguf") + ": cannot open: No such file or directory");
  CHECK(error_of([&] { (void)io::gguf_file::open(data_path("README.md")); }).find("bad magic 0x") != std::string::npos);
}

// The large F32 fixtures live only in ../shared/fixtures: without them these cases are reported as skipped.
static void check_shared_f32_fixture(const char* name, size_t n_tensors) {
  const std::string p = q35::test::shared_fixture(name);
  REQUIRE(!p.empty());
  const auto f = io::gguf_file::open(p);
  CHECK(f.tensors().size() == n_tensors);
  for (const auto& t : f.tensors()) CHECK(t.ggml() == io::ggml_type::f32);
}

TEST_CASE("gguf: the F32 fixture ../shared/fixtures/tiny_dense.gguf parses" *
          q35::test::needs_shared_fixture("tiny_dense.gguf")) {
  check_shared_f32_fixture("tiny_dense.gguf", 56);
}

TEST_CASE("gguf: the F32 fixture ../shared/fixtures/tiny_moe.gguf parses" *
          q35::test::needs_shared_fixture("tiny_moe.gguf")) {
  check_shared_f32_fixture("tiny_moe.gguf", 76);
}

TEST_CASE("gguf: open() reports empty files, directories and damaged files like from_memory()") {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("q35_test_gguf_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string empty = (dir / "empty.gguf").string();
  std::ofstream(empty, std::ios::binary).flush();
  CHECK(error_of([&] { (void)io::gguf_file::open(empty); }) ==
        empty + ": truncated file: magic needs 4 bytes at offset 0 but only 0 remain (file size 0)");
  CHECK(error_of([&] { (void)io::gguf_file::open(dir.string()); }) == dir.string() + ": not a regular file");

  // The fixture with its last tensor cut short, through the mmap path.
  std::string bytes = q35::test::read_bytes(data_path("tiny_dense_q4km.gguf"));
  const std::string expected = error_of([&] {
    (void)io::gguf_file::from_memory(std::string_view(bytes).substr(0, bytes.size() - 100),
                                     (dir / "cut.gguf").string());
  });
  CHECK(expected.find("runs past the end of the file") != std::string::npos);
  bytes.resize(bytes.size() - 100);
  const std::string cut = (dir / "cut.gguf").string();
  std::ofstream(cut, std::ios::binary).write(bytes.data(), std::streamsize(bytes.size()));
  CHECK(error_of([&] { (void)io::gguf_file::open(cut); }) == expected);
  fs::remove_all(dir);
}
