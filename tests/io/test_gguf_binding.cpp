// Binding GGUF files to Qwen3.5 traits: every fixture binds to its traits with the spec's shapes and
// Q4_K_M types; tied embeddings, MTP tails, merged expert tensors and interleaved schedules load;
// missing / unexpected / mis-shaped / unsupported tensors and hyper-parameter mismatches are errors
// that name them.
#include <doctest/doctest.h>

#include <string>

#include "gguf_rewriter.hpp"
#include "gguf_test_util.hpp"
#include "q35/io/model_info.hpp"
#include "q35/io/model_weights.hpp"

namespace io = q35::io;
namespace m = q35::models;
using q35::test::data_path;
using q35::test::gguf_rewriter;

namespace {

template <class F>
std::string error_of(F&& f) {
  return q35::test::gguf_error_of(f);
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

io::gguf_file load(const std::string& name) { return io::gguf_file::open(data_path(name)); }

io::gguf_file reparse(const gguf_rewriter& r) { return io::gguf_file::from_memory(r.bytes(), "edited.gguf"); }

constexpr uint32_t f32_id = 0, q3_k_id = 11, q4_k_id = 12;

}  // namespace

TEST_CASE("binding: each committed fixture binds to its traits") {
  struct fixture {
    const char* file;
    std::string_view traits;
  };
  for (const fixture& x :
       {fixture{"tiny_dense_q4km.gguf", m::tiny_dense::name}, fixture{"tiny_moe_q4km.gguf", m::tiny_moe::name},
        fixture{"tiny_interleaved_q4km.gguf", m::tiny_interleaved::name}}) {
    CAPTURE(x.file);
    const auto f = load(x.file);
    const io::bound_model b = io::bind_model(f);
    CHECK(b.traits_name == x.traits);
    CHECK(b.weights.layers.size() == 4);
    CHECK_FALSE(b.weights.tied_embeddings);
    CHECK(b.weights.output == f.find_tensor("output.weight"));
  }
  CHECK(io::bind_model_as<m::tiny_dense>(load("tiny_dense_q4km.gguf")).traits_name == m::tiny_dense::name);
  CHECK(io::bind_model_as<m::tiny_moe>(load("tiny_moe_q4km.gguf")).traits_name == m::tiny_moe::name);
  CHECK(io::bind_model_as<m::tiny_interleaved>(load("tiny_interleaved_q4km.gguf")).traits_name ==
        m::tiny_interleaved::name);
}

// The F32 fixtures live only in ../shared/fixtures: without them these cases are reported as skipped.
static void check_shared_f32_binding(const char* name, std::string_view traits_name) {
  const std::string p = q35::test::shared_fixture(name);
  REQUIRE(!p.empty());
  const auto f = io::gguf_file::open(p);
  const io::bound_model b = io::bind_model(f);
  CHECK(b.traits_name == traits_name);
  for (const io::tensor_info& t : f.tensors()) CHECK(t.ggml() == io::ggml_type::f32);
}

TEST_CASE("binding: the F32 fixture ../shared/fixtures/tiny_dense.gguf binds" *
          q35::test::needs_shared_fixture("tiny_dense.gguf")) {
  check_shared_f32_binding("tiny_dense.gguf", m::tiny_dense::name);
}

TEST_CASE("binding: the F32 fixture ../shared/fixtures/tiny_moe.gguf binds" *
          q35::test::needs_shared_fixture("tiny_moe.gguf")) {
  check_shared_f32_binding("tiny_moe.gguf", m::tiny_moe::name);
}

TEST_CASE("binding: hyper-parameters read from the dense fixture (fixture README, spec 3.2)") {
  const auto f = load("tiny_dense_q4km.gguf");
  const io::model_hparams h = io::read_hparams(f);
  CHECK(h.arch == "qwen35");
  CHECK(h.n_layers == 4);
  CHECK(h.n_nextn_layers == 0);
  CHECK(h.n_embd == 256);
  CHECK(h.n_vocab == 512);
  CHECK(h.n_heads == 2);
  CHECK(h.n_kv_heads == 1);
  CHECK(h.head_dim == 256);
  CHECK(h.rope_dim == 64);
  CHECK(h.rope_theta == 1e7);
  CHECK(h.rope_sections == std::array<int32_t, 4>{11, 11, 10, 0});
  CHECK(h.ssm_n_k_heads == 2);
  CHECK(h.ssm_n_v_heads == 4);
  CHECK(h.ssm_k_head_dim == 128);
  CHECK(h.ssm_v_head_dim() == 128);
  CHECK(h.ssm_conv_dim() == 1024);
  CHECK(h.ssm_conv_kernel == 4);
  CHECK(h.ff_dim == 512);
  CHECK(h.layer_kinds == std::vector<m::layer_type>{m::layer_type::gated_deltanet, m::layer_type::gated_deltanet,
                                                    m::layer_type::gated_deltanet, m::layer_type::full_attention});
  CHECK(h.count(m::ffn_type::dense) == 4);
}

TEST_CASE("binding: weights have the spec's shapes and Q4_K_M types (spec 3.3)") {
  const auto f = load("tiny_dense_q4km.gguf");
  const io::bound_model b = io::bind_model(f);
  const io::model_weights& w = b.weights;
  auto ne = [](const io::tensor_info* t) { return t->ne; };
  using s = io::tensor_shape;
  CHECK(ne(w.token_embd) == s{256, 512, 1, 1});
  CHECK(w.output->ggml() == io::ggml_type::q6_k);  // llama-quantize Q4_K_M: output q6_K
  CHECK(w.output_norm->ggml() == io::ggml_type::f32);
  const io::layer_weights& g = w.layers[0];  // Gated DeltaNet
  REQUIRE(g.kind == m::layer_type::gated_deltanet);
  CHECK(ne(g.gdn.qkv) == s{256, 1024, 1, 1});  // conv_dim = 2 * 2 * 128 + 4 * 128
  CHECK(ne(g.gdn.gate) == s{256, 512, 1, 1});
  CHECK(ne(g.gdn.conv1d) == s{4, 1024, 1, 1});
  CHECK(ne(g.gdn.a) == s{4, 1, 1, 1});
  CHECK(ne(g.gdn.dt_bias) == s{4, 1, 1, 1});
  CHECK(ne(g.gdn.beta) == s{256, 4, 1, 1});
  CHECK(ne(g.gdn.norm) == s{128, 1, 1, 1});
  CHECK(ne(g.gdn.out) == s{512, 256, 1, 1});
  // Never quantised: conv1d, norms, ssm_a, dt bias (spec 3.3).
  for (const io::tensor_info* t :
       {g.gdn.conv1d, g.gdn.a, g.gdn.dt_bias, g.gdn.norm, g.attn_norm, g.post_attention_norm})
    CHECK(t->ggml() == io::ggml_type::f32);
  CHECK(g.attn.q == nullptr);
  const io::layer_weights& a = w.layers[3];  // full attention
  REQUIRE(a.kind == m::layer_type::full_attention);
  CHECK(ne(a.attn.q) == s{256, 1024, 1, 1});  // 2 * n_heads * head_dim: [q | gate] per head
  CHECK(ne(a.attn.k) == s{256, 256, 1, 1});
  CHECK(ne(a.attn.v) == s{256, 256, 1, 1});
  CHECK(ne(a.attn.output) == s{512, 256, 1, 1});
  CHECK(ne(a.attn.q_norm) == s{256, 1, 1, 1});
  CHECK(a.gdn.qkv == nullptr);
  CHECK(ne(a.ffn.gate) == s{256, 512, 1, 1});
  CHECK(ne(a.ffn.down) == s{512, 256, 1, 1});
  // Q4_K_M "more-bits" rule (spec 3.3) for n = 4 layers: i < n/8 || i >= 7n/8 || (i - n/8) % 3 == 2 with integer
  // n/8 = 0 and 7n/8 = 3 selects layers 2 and 3 for q6_K ffn_down; attn_v and GDN attn_qkv share one counter.
  CHECK(w.layers[0].ffn.down->ggml() == io::ggml_type::q4_k);
  CHECK(w.layers[1].ffn.down->ggml() == io::ggml_type::q4_k);
  CHECK(w.layers[2].ffn.down->ggml() == io::ggml_type::q6_k);
  CHECK(w.layers[3].ffn.down->ggml() == io::ggml_type::q6_k);
  CHECK(w.layers[0].gdn.qkv->ggml() == io::ggml_type::q4_k);
  CHECK(w.layers[1].gdn.qkv->ggml() == io::ggml_type::q4_k);
  CHECK(w.layers[2].gdn.qkv->ggml() == io::ggml_type::q6_k);
  CHECK(w.layers[3].attn.v->ggml() == io::ggml_type::q6_k);
  CHECK(w.layers[3].attn.k->ggml() == io::ggml_type::q4_k);
}

TEST_CASE("binding: the interleaved fixture gets a per-layer FFN kind from its tensors") {
  const auto f = load("tiny_interleaved_q4km.gguf");
  const io::bound_model b = io::bind_model(f);
  const auto& L = b.weights.layers;
  CHECK(L[0].ffn_kind == m::ffn_type::dense);
  CHECK(L[1].ffn_kind == m::ffn_type::moe);
  CHECK(L[2].ffn_kind == m::ffn_type::dense);
  CHECK(L[3].ffn_kind == m::ffn_type::moe);
  CHECK(L[0].ffn.up->ne == io::tensor_shape{256, 512, 1, 1});
  CHECK(L[0].moe.router == nullptr);
  const io::moe_weights& e = L[1].moe;
  CHECK(e.router->ne == io::tensor_shape{256, 16, 1, 1});
  CHECK(e.maybe_gate_exps->ne == io::tensor_shape{256, 256, 16, 1});
  CHECK(e.maybe_up_exps->ne == io::tensor_shape{256, 256, 16, 1});
  CHECK(e.maybe_gate_up_exps == nullptr);
  CHECK(e.down_exps->ne == io::tensor_shape{256, 256, 16, 1});
  CHECK(e.maybe_shared_gate_inp->ne == io::tensor_shape{256, 1, 1, 1});
  CHECK(e.maybe_shared_down->ne == io::tensor_shape{256, 256, 1, 1});
  CHECK(e.router->ggml() == io::ggml_type::f32);  // ffn_gate_inp* stay F32
  CHECK(b.hparams.n_experts == 16);
  CHECK(b.hparams.n_experts_used == 4);
  CHECK(L[1].ffn.up == nullptr);
}

TEST_CASE("binding: tied embeddings (no output.weight) bind output to token_embd") {
  gguf_rewriter r(load("tiny_dense_q4km.gguf"));
  r.erase_tensor("output.weight");
  const auto f = reparse(r);
  const io::bound_model b = io::bind_model(f);
  CHECK(b.weights.tied_embeddings);
  CHECK(b.weights.output == b.weights.token_embd);
  CHECK(b.weights.output == f.find_tensor("token_embd.weight"));
}

TEST_CASE("binding: MTP tail layers are counted out and ignored") {
  gguf_rewriter r(load("tiny_moe_q4km.gguf"));
  r.set_u32("qwen35moe.block_count", 5);
  r.set_u32("qwen35moe.nextn_predict_layers", 1);
  // A full-attention block at blk.4 plus the nextn projection and norms (spec 3.4).
  r.add_zero_tensor("blk.4.attn_q.weight", q4_k_id, {256, 1024});
  r.add_zero_tensor("blk.4.nextn.eh_proj.weight", q4_k_id, {512, 256});
  r.add_zero_tensor("blk.4.nextn.enorm.weight", f32_id, {256});
  r.add_zero_tensor("blk.4.nextn.hnorm.weight", f32_id, {256});
  const auto f = reparse(r);
  const io::bound_model b = io::bind_model(f);
  CHECK(b.traits_name == m::tiny_moe::name);
  CHECK(b.hparams.n_layers == 4);
  CHECK(b.hparams.n_nextn_layers == 1);
  CHECK(b.weights.layers.size() == 4);
  // Without nextn_predict_layers, blk.4 is a fifth layer, with neither a router nor a dense FFN width.
  r.erase_kv("qwen35moe.nextn_predict_layers");
  CHECK(error_of([&] { (void)io::bind_model(reparse(r)); }) ==
        "edited.gguf: layer 4 has no router (blk.4.ffn_gate_inp.weight), so it is a dense FFN, but "
        "qwen35moe.feed_forward_length is missing or 0");
  // With a dense width it reads as a dense layer 4 whose tensors are missing, and the MTP ones unexpected.
  r.set_u32("qwen35moe.feed_forward_length", 512);
  const std::string err = error_of([&] { (void)io::bind_model(reparse(r)); });
  INFO(err);
  CHECK(contains(err, "edited.gguf: "));
  CHECK(contains(err, "missing tensor 'blk.4.attn_norm.weight' (expected shape [256])"));
  CHECK(contains(err, "unexpected tensor 'blk.4.nextn.eh_proj.weight' [512, 256] for qwen35moe"));
}

TEST_CASE("binding: merged ffn_gate_up_exps is accepted in place of gate and up") {
  gguf_rewriter r(load("tiny_moe_q4km.gguf"));
  for (int il = 0; il < 4; ++il) {
    const std::string b = "blk." + std::to_string(il) + ".";
    r.erase_tensor(b + "ffn_gate_exps.weight");
    r.erase_tensor(b + "ffn_up_exps.weight");
    r.add_zero_tensor(b + "ffn_gate_up_exps.weight", q4_k_id, {256, 512, 8});
  }
  const auto f = reparse(r);
  const io::bound_model b = io::bind_model(f);
  const io::moe_weights& e = b.weights.layers[2].moe;
  REQUIRE(e.maybe_gate_up_exps != nullptr);
  CHECK(e.maybe_gate_up_exps->ne == io::tensor_shape{256, 512, 8, 1});
  CHECK(e.maybe_gate_exps == nullptr);
  CHECK(e.maybe_up_exps == nullptr);
  // A merged tensor with the width of one half is mis-shaped.
  r.find("blk.2.ffn_gate_up_exps.weight")->ne = {256, 256, 16};
  CHECK(contains(error_of([&] { (void)io::bind_model(reparse(r)); }),
                 "tensor 'blk.2.ffn_gate_up_exps.weight' has shape [256, 256, 16], expected [256, 512, 8]"));
}

TEST_CASE("binding: missing, unexpected, mis-shaped and unsupported tensors are named") {
  const auto f0 = load("tiny_dense_q4km.gguf");
  {
    gguf_rewriter r(f0);
    r.find("blk.0.ssm_a")->name = "blk.0.ssm_b";
    CHECK(error_of([&] { (void)io::bind_model(reparse(r)); }) ==
          "edited.gguf: 2 tensor problems: missing tensor 'blk.0.ssm_a' (expected shape [4]); unexpected tensor "
          "'blk.0.ssm_b' [4] for qwen35");
  }
  {
    gguf_rewriter r(f0);
    r.erase_tensor("blk.3.attn_k_norm.weight");
    r.erase_tensor("output_norm.weight");
    CHECK(error_of([&] { (void)io::bind_model(reparse(r)); }) ==
          "edited.gguf: 2 tensor problems: missing tensor 'output_norm.weight' (expected shape [256]); missing tensor "
          "'blk.3.attn_k_norm.weight' (expected shape [256])");
  }
  {
    gguf_rewriter r(f0);
    auto* t = r.find("blk.1.ssm_norm.weight");
    t->ne = {64};
    t->data.resize(64 * 4);
    CHECK(error_of([&] { (void)io::bind_model(reparse(r)); }) ==
          "edited.gguf: 1 tensor problem: tensor 'blk.1.ssm_norm.weight' has shape [64], expected [128]");
  }
  {
    gguf_rewriter r(f0);
    auto* t = r.find("blk.2.ssm_alpha.weight");  // q4_K [256, 4] -> q3_K, 110 bytes per 256
    t->type = q3_k_id;
    t->data.resize(4 * 110);
    CHECK(error_of([&] { (void)io::bind_model(reparse(r)); }) ==
          "edited.gguf: 1 tensor problem: tensor 'blk.2.ssm_alpha.weight' has type q3_K, which q35 does not support "
          "(supported: f32, f16, bf16, q8_0, q4_0, q4_K, q5_K, q6_K)");
  }
  {
    gguf_rewriter r(f0);  // a dense file with a MoE router: not a qwen35 tensor
    r.add_zero_tensor("blk.0.ffn_gate_inp.weight", f32_id, {256, 8});
    r.add_zero_tensor("rope_freqs.weight", f32_id, {32});
    CHECK(error_of([&] { (void)io::bind_model(reparse(r)); }) ==
          "edited.gguf: 2 tensor problems: unexpected tensor 'blk.0.ffn_gate_inp.weight' [256, 8] for qwen35; "
          "unexpected tensor 'rope_freqs.weight' [32] for qwen35");
  }
  {
    gguf_rewriter r(load("tiny_interleaved_q4km.gguf"));  // a MoE layer without its down experts
    r.erase_tensor("blk.3.ffn_down_exps.weight");
    CHECK(error_of([&] { (void)io::bind_model(reparse(r)); }) ==
          "edited.gguf: 1 tensor problem: missing tensor 'blk.3.ffn_down_exps.weight' (expected shape [256, 256, 16])");
  }
}

TEST_CASE("binding: a traits mismatch names the key, the file's value and the expected value") {
  const auto f = load("tiny_dense_q4km.gguf");
  const std::string err = error_of([&] { (void)io::bind_model_as<m::qwen35_9b>(f); });
  CHECK(contains(err, data_path("tiny_dense_q4km.gguf") + ": does not match Qwen3.5-9B: "));
  CHECK(contains(err, "qwen35.block_count (minus nextn_predict_layers): file has 4, expected 32"));
  CHECK(contains(err, "qwen35.embedding_length: file has 256, expected 4096"));
  CHECK(contains(err, "tokenizer.ggml.tokens (count): file has 512, expected 248320"));
  CHECK(contains(err, "qwen35.attention.head_count_kv: file has 1, expected 4"));
  CHECK(contains(err, "qwen35.ssm.time_step_rank: file has 4, expected 32"));
  CHECK(contains(err, "qwen35.feed_forward_length: file has 512, expected 12288"));
  CHECK_FALSE(contains(err, "key_length"));  // 256 in both

  const std::string moe_err =
      error_of([&] { (void)io::bind_model_as<m::tiny_moe>(load("tiny_interleaved_q4km.gguf")); });
  CHECK(contains(moe_err, "does not match tiny-moe (test fixture): "));
  CHECK(contains(moe_err, "qwen35moe.expert_count: file has 16, expected 8"));
  CHECK(contains(moe_err, "layer 0 FFN (from its tensors): file has dense, expected moe"));
  CHECK(contains(moe_err, "layer 2 FFN (from its tensors): file has dense, expected moe"));
  CHECK_FALSE(contains(moe_err, "layer 1 FFN"));
}

TEST_CASE("binding: a file that matches no known traits lists what is supported") {
  gguf_rewriter r(load("tiny_dense_q4km.gguf"));
  r.set_u32("qwen35.context_length", 8192);
  const std::string err = error_of([&] { (void)io::bind_model(reparse(r)); });
  CHECK(contains(err,
                 "edited.gguf: hyper-parameters match no supported model (supported: Qwen3.5-0.8B (qwen35, 24 "
                 "layers, n_embd 1024), Qwen3.5-2B (qwen35, 24 layers, n_embd 2048)"));
  CHECK(contains(err, "Qwen3.5-35B-A3B (qwen35moe, 40 layers, n_embd 2048)"));
  CHECK(contains(err, "Qwen3.5-9B-MoE (design) (qwen35moe, 32 layers, n_embd 4096)"));
  CHECK(contains(err, "); closest is tiny-dense (test fixture): qwen35.context_length: file has 8192, expected 4096"));
}

TEST_CASE("binding: hyper-parameter errors name the key") {
  const auto f0 = load("tiny_dense_q4km.gguf");
  auto bind_err = [](const gguf_rewriter& r) { return error_of([&] { (void)io::bind_model(reparse(r)); }); };
  {
    gguf_rewriter r(f0);
    r.erase_kv("qwen35.ssm.state_size");
    CHECK(bind_err(r) == "edited.gguf: missing key 'qwen35.ssm.state_size'");
  }
  {
    gguf_rewriter r(f0);
    r.set_u32("qwen35.attention.head_count_kv", 3);
    CHECK(bind_err(r) == "edited.gguf: key 'qwen35.attention.head_count_kv': value 3 is out of range (expected 1..2)");
  }
  {
    gguf_rewriter r(f0);
    r.set_u32("qwen35.ssm.time_step_rank", 3);
    CHECK(bind_err(r) == "edited.gguf: key 'qwen35.ssm.inner_size': 512 is not a multiple of ssm.time_step_rank 3");
  }
  {
    gguf_rewriter r(f0);
    r.set_u32("qwen35.nextn_predict_layers", 4);
    CHECK(bind_err(r) == "edited.gguf: key 'qwen35.nextn_predict_layers': value 4 is out of range (expected 0..3)");
  }
  {
    // Without key_length / value_length, llama.cpp's default n_embd / n_head = 128 applies, and the
    // attention tensors (head_dim 256) no longer fit: spec 6 pitfall 6, key_length must be honoured.
    gguf_rewriter r(f0);
    r.erase_kv("qwen35.attention.key_length");
    r.erase_kv("qwen35.attention.value_length");
    r.erase_kv("qwen35.rope.dimension_count");
    const io::model_hparams h = io::read_hparams(reparse(r));
    CHECK(h.head_dim == 128);
    CHECK(h.rope_dim == 128);
    CHECK(contains(bind_err(r), "tensor 'blk.3.attn_q.weight' has shape [256, 1024], expected [256, 512]"));
    CHECK(contains(bind_err(r), "tensor 'blk.3.attn_q_norm.weight' has shape [256], expected [128]"));
  }
  {
    gguf_rewriter r(f0);  // head_count_kv defaults to head_count
    r.erase_kv("qwen35.attention.head_count_kv");
    CHECK(io::read_hparams(reparse(r)).n_kv_heads == 2);
    CHECK(contains(bind_err(r), "tensor 'blk.3.attn_k.weight' has shape [256, 256], expected [256, 512]"));
  }
  {
    gguf_rewriter r(f0);  // per-layer arrays are accepted when every layer has the same value
    r.set_u32_array("qwen35.attention.head_count", {2, 2, 2, 2});
    CHECK(io::bind_model(reparse(r)).hparams.n_heads == 2);
    r.set_u32_array("qwen35.attention.head_count", {2, 2, 4, 2});
    CHECK(bind_err(r) ==
          "edited.gguf: key 'qwen35.attention.head_count': per-layer values differ (2 vs 4); q35 needs one value for "
          "all layers");
  }
  {
    gguf_rewriter r(f0);
    r.erase_kv("qwen35.feed_forward_length");
    CHECK(bind_err(r) ==
          "edited.gguf: layer 0 has no router (blk.0.ffn_gate_inp.weight), so it is a dense FFN, but "
          "qwen35.feed_forward_length is missing or 0");
  }
  {
    gguf_rewriter r(f0);
    for (auto& k : r.kvs)
      if (k.key == "general.architecture") {
        k.raw.clear();
        gguf_rewriter::append(k.raw, uint64_t(5));
        k.raw += "llama";
      }
    CHECK(bind_err(r) ==
          "edited.gguf: key 'general.architecture': expected qwen35 or qwen35moe but found 'llama' (q35 runs only the "
          "Qwen3.5 family)");
  }
}

TEST_CASE("binding: bind_any_model takes a valid shape no known traits type has, and says so") {
  gguf_rewriter r(load("tiny_dense_q4km.gguf"));
  r.set_u32("qwen35.context_length", 8192);
  const auto f = reparse(r);
  const io::bound_model m = io::bind_any_model(f);
  CHECK(m.traits_name.empty());
  CHECK(m.hparams.context_length == 8192);
  CHECK(m.weights.layers.size() == 4);
  CHECK(io::describe_model(f, 16).traits_name == "none of the known models (shapes from the file)");
  CHECK(io::bind_any_model(load("tiny_dense_q4km.gguf")).traits_name == "tiny-dense (test fixture)");
}
