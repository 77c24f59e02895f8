// Model description for --info: tensor catalogue sizes for the real checkpoints (spec 3.3), the
// per-sequence state of spec 4, and describe_model / format_model_info on the fixtures.
#include <doctest/doctest.h>

#include <string>

#include "gguf_rewriter.hpp"
#include "gguf_test_util.hpp"
#include "q35/io/model_info.hpp"

namespace io = q35::io;
namespace m = q35::models;
using q35::test::data_path;

namespace {
constexpr uint64_t kib = 1024, mib = 1024 * 1024;

uint64_t n_params(const io::model_hparams& h) {
  uint64_t n = 0;
  for (const auto& t : io::expected_tensors(h)) n += t.ne[0] * t.ne[1] * t.ne[2] * t.ne[3];
  return n;
}
}  // namespace

TEST_CASE("model info: the 9B catalogue has 427 tensors and 8.95 B parameters") {
  const io::model_hparams h = io::hparams_of<m::qwen35_9b>();
  // spec 3.3 [DERIVED]: 3 + 24 * 14 + 8 * 11 = 427 tensors (output.weight included: 9B is untied).
  CHECK(io::expected_tensors(h).size() == 427);
  // llama.cpp reports "qwen35 9B = 8.95 B params" (anchors: JamePeng/llama-cpp-python#78).
  const uint64_t p = n_params(h);
  CHECK(p >= 8'945'000'000ull);
  CHECK(p < 8'955'000'000ull);
  // Shapes from the spec's 9B / 35B-A3B tensor table.
  const auto ts = io::expected_tensors(io::hparams_of<m::qwen35_35b_a3b>());
  auto shape_of = [&](const std::string& name) {
    for (const auto& t : ts)
      if (t.name == name) return t.ne;
    return io::tensor_shape{};
  };
  CHECK(shape_of("blk.3.attn_q.weight") == io::tensor_shape{2048, 8192, 1, 1});
  CHECK(shape_of("blk.3.attn_k.weight") == io::tensor_shape{2048, 512, 1, 1});
  CHECK(shape_of("blk.3.attn_output.weight") == io::tensor_shape{4096, 2048, 1, 1});
  CHECK(shape_of("blk.0.attn_qkv.weight") == io::tensor_shape{2048, 8192, 1, 1});
  CHECK(shape_of("blk.0.attn_gate.weight") == io::tensor_shape{2048, 4096, 1, 1});
  CHECK(shape_of("blk.0.ssm_conv1d.weight") == io::tensor_shape{4, 8192, 1, 1});
  CHECK(shape_of("blk.0.ssm_out.weight") == io::tensor_shape{4096, 2048, 1, 1});
  CHECK(shape_of("blk.0.ffn_gate_inp.weight") == io::tensor_shape{2048, 256, 1, 1});
  CHECK(shape_of("blk.0.ffn_gate_exps.weight") == io::tensor_shape{2048, 512, 256, 1});
  CHECK(shape_of("blk.0.ffn_down_exps.weight") == io::tensor_shape{512, 2048, 256, 1});
  CHECK(shape_of("blk.0.ffn_gate_inp_shexp.weight") == io::tensor_shape{2048, 1, 1, 1});
  CHECK(shape_of("blk.0.ffn_down_shexp.weight") == io::tensor_shape{512, 2048, 1, 1});
  CHECK(shape_of("blk.39.ffn_up_exps.weight") == io::tensor_shape{2048, 512, 256, 1});
  CHECK(shape_of("blk.40.attn_norm.weight") == io::tensor_shape{});  // 40 layers
}

TEST_CASE("model info: per-sequence state matches spec 4") {
  const io::model_hparams h9 = io::hparams_of<m::qwen35_9b>();
  // KV cache, F16: 4 KiB per token per full-attention layer, 8 layers -> 32 KiB per token.
  CHECK(io::state_bytes(h9, 1).kv_cache_bytes == 32 * kib);
  CHECK(io::state_bytes(h9, 4096).kv_cache_bytes == 4096 * 32 * kib);
  CHECK(io::state_bytes(h9, 1, 4).kv_cache_bytes == 64 * kib);  // F32 KV cache
  // SSM state: 24 GDN layers x 128 x 4096 floats = 48 MiB; conv: 24 x 3 x 8192 floats (96 KiB per layer).
  CHECK(io::state_bytes(h9, 1).ssm_state_bytes == 48 * mib);
  CHECK(io::state_bytes(h9, 1).conv_state_bytes == 24 * 96 * kib);
  // Two sequences double everything.
  const auto two = io::state_bytes(h9, 4096, 2, 2);
  CHECK(two.total() == 2 * io::state_bytes(h9, 4096).total());
  // 35B-A3B: 10 KV layers x 2 x 512 values -> 20 KiB per token (F16).
  CHECK(io::state_bytes(io::hparams_of<m::qwen35_35b_a3b>(), 1).kv_cache_bytes == 20 * kib);
  CHECK_THROWS_AS((void)io::state_bytes(h9, uint64_t(1) << 62), std::overflow_error);
}

TEST_CASE("model info: describe_model on the interleaved fixture") {
  const auto f = io::gguf_file::open(data_path("tiny_interleaved_q4km.gguf"));
  const io::model_info i = io::describe_model(f, 1000);
  CHECK(i.traits_name == m::tiny_interleaved::name);
  CHECK(i.gguf_version == 3);
  CHECK(i.n_tensors == 66);
  CHECK(i.n_mtp_tensors == 0);
  // Counts by type as gguf-py reports them: 33 q4_K, 27 F32, 6 q6_K.
  REQUIRE(i.by_type.size() == 3);
  CHECK(i.by_type.at("q4_K").n_tensors == 33);
  CHECK(i.by_type.at("f32").n_tensors == 27);
  CHECK(i.by_type.at("q6_K").n_tensors == 6);
  uint64_t sum = 0;
  for (const auto& t : f.tensors()) sum += t.n_bytes;
  CHECK(i.weight_bytes == sum);
  // q6_K blocks (256 values, 210 bytes): output [256, 512], blk.2.attn_qkv [256, 1024], blk.2.ffn_down [512, 256],
  // blk.3.attn_v [256, 256], blk.3.ffn_down_exps [256, 256, 16], blk.3.ffn_down_shexp [256, 256].
  CHECK(i.by_type.at("q6_K").bytes == (512 + 1024 + 2 * 256 + 256 + 256 * 16 + 256) * 210);
  // 1 full-attention layer: 1000 tokens x 1 kv head x (256 + 256) x 2 bytes; 3 GDN layers of
  // conv 3 x 1024 floats and SSM 128 x 512 floats.
  CHECK(i.state.kv_cache_bytes == 1000 * 512 * 2);
  CHECK(i.state.conv_state_bytes == 3 * 3 * 1024 * 4);
  CHECK(i.state.ssm_state_bytes == 3 * 128 * 512 * 4);
  CHECK(i.total_bytes() == sum + 1000 * 512 * 2 + 3 * 3 * 1024 * 4 + 3 * 128 * 512 * 4);
  CHECK(io::describe_model(f).n_ctx == 4096);  // 0: the file's context_length

  const std::string text = io::format_model_info(i);
  CHECK(text.find("arch: qwen35moe\n") != std::string::npos);
  CHECK(text.find("model: tiny-interleaved (test fixture)\n") != std::string::npos);
  CHECK(text.find("schedule: Gd Gm Gd Am") != std::string::npos);
  CHECK(text.find("moe: 16 experts of 256, top-4, shared expert 256\n") != std::string::npos);
  CHECK(text.find("  q6_K: 6 tensors, ") != std::string::npos);
  CHECK(text.find("kv_cache: 1000.00 KiB (1024000 bytes)\n") != std::string::npos);
}

TEST_CASE("model info: MTP tensors are reported as ignored and not counted as weights") {
  const auto f0 = io::gguf_file::open(data_path("tiny_dense_q4km.gguf"));
  const io::model_info plain = io::describe_model(f0, 16);
  q35::test::gguf_rewriter r(f0);
  r.set_u32("qwen35.block_count", 5);
  r.set_u32("qwen35.nextn_predict_layers", 1);
  r.add_zero_tensor("blk.4.nextn.eh_proj.weight", 0, {512, 256});
  const auto f = io::gguf_file::from_memory(r.bytes(), "mtp.gguf");
  const io::model_info i = io::describe_model(f, 16);
  CHECK(i.n_tensors == 57);
  CHECK(i.n_mtp_tensors == 1);
  CHECK(i.mtp_bytes == 512 * 256 * 4);
  CHECK(i.weight_bytes == plain.weight_bytes);
  CHECK(io::format_model_info(i).find("plus 1 MTP layer(s) ignored") != std::string::npos);
}
