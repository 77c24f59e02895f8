// synth_model: the fill kernel against its host formula (every unit, exact, under every thread order and
// across the grid-stride boundary), the dequantized statistics the value ranges promise, the Q4_K_M
// type rule against the spec's tensor counts, the layout, and synthetic tiny models through the decoder.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <map>
#include <vector>

#include "decoder.hpp"
#include "host_read.hpp"
#include "q35/io/model_hparams.hpp"
#include "q35/models/qwen35.hpp"
#include "q35/models/qwen35_moe.hpp"
#include "q35/models/tiny.hpp"
#include "q35/quant/formats.hpp"
#include "synth_model.hpp"
#include "test_util.hpp"

namespace {

using namespace q35;
using kernel = gen::synth_fill_kernel;

// Runs the fill over n_units of a poisoned buffer and compares every byte with the host formula.
void check_fill(kernel::mode m, int64_t n_units) {
  const size_t unit_bytes = m == kernel::mode::f32 ? 4 : 2;
  test::for_each_order([&] {
    device_buffer<uint8_t> d = test::poisoned<uint8_t>(size_t(n_units) * unit_bytes + 64);
    kernel::params p{};
    p.data = d.data(), p.n_units = n_units, p.m = m, p.center = 0.25f, p.spread = 2.0f;
    p.d_bits = 0x1234, p.dmin_bits = 0x4321, p.seed = 77;
    Q35_REQUIRE_OK(launch::launch<kernel>(p));
    const std::vector<uint8_t> got = test::to_host(d);
    int64_t bad = 0;
    for (int64_t i = 0; i < n_units; ++i) {
      if (m == kernel::mode::f32) {
        float v;
        std::memcpy(&v, got.data() + 4 * i, 4);
        bad += v != kernel::f32_value(p, i) || !(v >= -1.75f && v < 2.25f);
      } else {
        uint16_t v;
        std::memcpy(&v, got.data() + 2 * i, 2);
        bad += v != kernel::quant_unit(p, i);
      }
    }
    CHECK(bad == 0);
    // nothing past the tensor is written
    for (size_t i = size_t(n_units) * unit_bytes; i < got.size(); ++i) REQUIRE(got[i] == 0xff);
  });
}

TEST_CASE("synth fill: every unit equals the host formula, scale fields patched, nothing beyond" *
          test::needs_device()) {
  SUBCASE("q4_K") { check_fill(kernel::mode::q4_k, 72 * 5); }
  SUBCASE("q6_K") { check_fill(kernel::mode::q6_k, 105 * 3); }
  SUBCASE("f32") { check_fill(kernel::mode::f32, 1000); }
}

TEST_CASE("synth fill: the grid-stride loop covers more units than one grid holds" * test::needs_device()) {
  const int64_t n = int64_t(kernel::threads) * kernel::max_blocks + 77;
  device_buffer<uint16_t> d = test::poisoned<uint16_t>(size_t(n));
  kernel::params p{};
  p.data = d.data(), p.n_units = n, p.m = kernel::mode::q6_k, p.d_bits = 0x3c00, p.seed = 5;
  Q35_REQUIRE_OK(launch::launch<kernel>(p));
  const std::vector<uint16_t> got = test::to_host(d);
  int64_t bad = 0;
  for (int64_t i = 0; i < n; ++i) bad += got[size_t(i)] != kernel::quant_unit(p, i);
  CHECK(bad == 0);
}

// Mean and standard deviation of a filled tensor's dequantized elements.
template <class Format>
void check_statistics(io::ggml_type type) {
  const int64_t cols = 4096, rows = 32;
  const io::model_hparams h = io::hparams_of<models::qwen35_9b>();
  gen::synth_tensor t;
  t.name = "blk.1.ffn_gate.weight";
  t.type = type;
  t.ne = {uint64_t(cols), uint64_t(rows), 1, 1};
  t.n_bytes = uint64_t(cols / 256 * int64_t(sizeof(typename Format::block)) * rows);
  device_buffer<uint8_t> d;
  Q35_REQUIRE_OK(d.allocate(t.n_bytes));
  Q35_REQUIRE_OK(gen::fill_tensor(d.data(), t, h, 11, nullptr));
  const std::vector<uint8_t> bytes = test::to_host(d);
  const auto* blocks = reinterpret_cast<const typename Format::block*>(bytes.data());
  double sum = 0, sum2 = 0;
  const int64_t n = cols * rows;
  for (int64_t u = 0; u < n / 16; ++u) {
    float w[16];
    quant::dequant_row_unit<Format>(blocks, u, w);
    for (float v : w) sum += v, sum2 += double(v) * v;
  }
  const double mean = sum / double(n), sd = std::sqrt(sum2 / double(n) - mean * mean);
  const double sigma = 1.0 / std::sqrt(double(cols));
  // 131072 elements whose sub-blocks of 16-32 share scales (~4-8k independent groups): the sample
  // standard deviation is within ~3 % and the mean within ~0.05 sigma at 3 standard errors; the
  // bounds leave room for the f16 rounding of d (2^-11) and the formula's approximations (10 %).
  CHECK(std::abs(mean) < 0.1 * sigma);
  CHECK(sd > 0.85 * sigma);
  CHECK(sd < 1.15 * sigma);
}

TEST_CASE("synth fill: quantized tensors dequantize to mean ~0, standard deviation ~1/sqrt(cols)" *
          test::needs_device()) {
  SUBCASE("q4_K") { check_statistics<quant::q4_k_format>(io::ggml_type::q4_k); }
  SUBCASE("q6_K") { check_statistics<quant::q6_k_format>(io::ggml_type::q6_k); }
}

TEST_CASE("Q4_K_M types: the spec's 9B counts (427 tensors: 177 f32, 33 q6_K, 217 q4_K)") {
  const io::model_hparams h = io::hparams_of<models::qwen35_9b>();
  const std::vector<gen::synth_tensor> l = gen::synth_layout(h, false);
  std::map<io::ggml_type, int> count;
  for (const gen::synth_tensor& t : l) ++count[t.type];
  CHECK(l.size() == 427);
  CHECK(count[io::ggml_type::f32] == 177);
  CHECK(count[io::ggml_type::q6_k] == 33);
  CHECK(count[io::ggml_type::q4_k] == 217);
  // more-bits layers of 32: {0,1,2,3,6,9,...,27,28,29,30,31}
  auto type_of = [&](const std::string& name) {
    for (const gen::synth_tensor& t : l)
      if (t.name == name) return t.type;
    FAIL("no tensor " << name);
    return io::ggml_type::f32;
  };
  CHECK(type_of("blk.6.attn_qkv.weight") == io::ggml_type::q6_k);
  CHECK(type_of("blk.7.attn_v.weight") == io::ggml_type::q4_k);
  CHECK(type_of("blk.27.attn_v.weight") == io::ggml_type::q6_k);
  CHECK(type_of("blk.5.ffn_down.weight") == io::ggml_type::q4_k);
  CHECK(type_of("blk.31.ffn_down.weight") == io::ggml_type::q6_k);
  CHECK(type_of("blk.4.ssm_beta.weight") == io::ggml_type::q4_k);
  CHECK(type_of("token_embd.weight") == io::ggml_type::q4_k);
  CHECK(type_of("output.weight") == io::ggml_type::q6_k);
  CHECK(type_of("blk.0.ssm_a") == io::ggml_type::f32);
  // tensors lie 256-byte aligned, in order, without overlap
  for (size_t i = 0; i < l.size(); ++i) {
    CHECK(l[i].offset % 256 == 0);
    if (i) CHECK(l[i].offset >= l[i - 1].offset + l[i - 1].n_bytes);
  }
  // the weights of a Q4_K_M 9B file: ~5.6 GB (unsloth's file is 5.68 GB; third-party files deviate a little)
  const double gb = double(l.back().offset + l.back().n_bytes) * 1e-9;
  MESSAGE("synthetic 9B Q4_K_M: " << gb << " GB");
  CHECK(gb > 5.3);
  CHECK(gb < 5.9);
}

TEST_CASE("Q4_K_M types: MoE tensors and tied embeddings") {
  const io::model_hparams h = io::hparams_of<models::qwen35_35b_a3b>();
  const std::vector<gen::synth_tensor> l = gen::synth_layout(h, false);
  std::map<std::string, io::ggml_type> t;
  for (const gen::synth_tensor& x : l) t[x.name] = x.type;
  CHECK(t.at("blk.0.ffn_gate_inp.weight") == io::ggml_type::f32);
  CHECK(t.at("blk.0.ffn_gate_inp_shexp.weight") == io::ggml_type::f32);
  CHECK(t.at("blk.0.ffn_down_exps.weight") == io::ggml_type::q6_k);   // 0 < 40/8
  CHECK(t.at("blk.5.ffn_down_exps.weight") == io::ggml_type::q4_k);   // (5 - 5) % 3 == 0
  CHECK(t.at("blk.7.ffn_down_shexp.weight") == io::ggml_type::q6_k);  // (7 - 5) % 3 == 2
  CHECK(t.at("blk.7.ffn_gate_exps.weight") == io::ggml_type::q4_k);
  const std::vector<gen::synth_tensor> tied = gen::synth_layout(io::hparams_of<models::qwen35_9b>(), true);
  bool has_output = false;
  for (const gen::synth_tensor& x : tied) {
    has_output = has_output || x.name == "output.weight";
    if (x.name == "token_embd.weight") CHECK(x.type == io::ggml_type::q6_k);
  }
  CHECK_FALSE(has_output);
}

// A synthetic tiny model through the decoder: a prompt, greedy steps, finite logits with a real spread.
template <class M>
void run_tiny() {
  gen::synth_model s;
  Q35_REQUIRE_OK(s.build(io::hparams_of<M>(), M::tied_embeddings, 3));
  gen::decoder d;
  gen::decoder_config cfg;
  cfg.n_ctx = 64;
  Q35_REQUIRE_OK(d.init(s.model(), cfg));
  const std::vector<int32_t> prompt = {1, 500, 17, 260, 3, 99, 511, 42};
  Q35_REQUIRE_OK(d.eval(prompt));
  launch::sampling_params greedy;
  greedy.temperature = 0;
  for (int i = 0; i < 3; ++i) {
    int32_t id = -1;
    Q35_REQUIRE_OK(d.sample(greedy, {}, id));
    REQUIRE(id >= 0);
    REQUIRE(id < M::n_vocab);
    Q35_REQUIRE_OK(d.eval({&id, 1}));
  }
  std::vector<float> logits;
  Q35_REQUIRE_OK(d.last_logits(logits));
  double sum = 0, sum2 = 0;
  for (float v : logits) {
    REQUIRE(std::isfinite(v));
    sum += v, sum2 += double(v) * v;
  }
  const double mean = sum / double(logits.size()), sd = std::sqrt(sum2 / double(logits.size()) - mean * mean);
  // the LM head has standard deviation 1/sqrt(n_embd) per element on a unit-RMS row: logits of ~unit spread
  MESSAGE(M::name << ": logits standard deviation " << sd);
  CHECK(sd > 0.2);
  CHECK(sd < 5.0);
}

TEST_CASE("synthetic tiny models decode with finite, spread logits" * test::needs_device()) {
  SUBCASE("dense") { run_tiny<models::tiny_dense>(); }
  SUBCASE("moe") { run_tiny<models::tiny_moe>(); }
}

}  // namespace

// The synthetic MoE model with its routed experts in host memory: the store's home holds exactly the
// bytes the all-resident build has on the device, and prompt and decode logits are bit-identical.
namespace {

struct run_out {
  std::vector<float> prompt_logits, last_logits;
  std::vector<int32_t> ids;
};

run_out run_synth(const gen::synth_model& s, int steps) {
  gen::decoder d;
  gen::decoder_config cfg;
  cfg.n_ctx = 64;
  cfg.expert_rebalance_steps = 2;  // promotions happen during the run
  REQUIRE(d.init(s.model(), cfg).ok());
  run_out r;
  const std::vector<int32_t> prompt = {1, 500, 17, 260, 3, 99, 511, 42, 7, 300};
  REQUIRE(d.eval(prompt).ok());
  REQUIRE(d.last_logits(r.prompt_logits).ok());
  launch::sampling_params greedy;
  greedy.temperature = 0;
  for (int i = 0; i < steps; ++i) {
    int32_t id = -1;
    REQUIRE(d.sample(greedy, {}, id).ok());
    r.ids.push_back(id);
    REQUIRE(d.eval({&id, 1}).ok());
  }
  REQUIRE(d.last_logits(r.last_logits).ok());
  return r;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

}  // namespace

TEST_CASE("synthetic MoE model with host-resident experts: same bytes, bit-identical logits" * test::needs_device()) {
  const io::model_hparams h = io::hparams_of<models::tiny_moe>();
  gen::synth_model all;
  Q35_REQUIRE_OK(all.build(h, models::tiny_moe::tied_embeddings, 5));
  REQUIRE(all.model().experts() == nullptr);
  const run_out want = run_synth(all, 6);
  for (int slots : {0, 1, 3}) {
    CAPTURE(slots);
    gen::synth_model host;
    Q35_REQUIRE_OK(host.build(h, models::tiny_moe::tied_embeddings, 5, nullptr, slots));
    const gen::expert_store* st = host.model().experts();
    REQUIRE(st != nullptr);
    CHECK(st->slots() == slots);
    CHECK(host.bytes() == gen::synth_device_bytes(host.tensors(), true));
    CHECK(host.bytes() < all.bytes());
    // home against the resident tensors, expert by expert
    std::map<std::string, const gen::synth_tensor*> by_name;
    for (const gen::synth_tensor& t : all.tensors()) by_name[t.name] = &t;
    std::vector<uint8_t> dev(all.bytes());
    Q35_REQUIRE_OK(copy(dev.data(), all.device_data(), dev.size(), copy_kind::device_to_host));
    for (const gen::expert_store::layer& L : st->layers()) {
      const std::string b = "blk." + std::to_string(L.index) + ".";
      const gen::synth_tensor* g = by_name.at(b + "ffn_gate_exps.weight");
      const gen::synth_tensor* u = by_name.at(b + "ffn_up_exps.weight");
      const gen::synth_tensor* dn = by_name.at(b + "ffn_down_exps.weight");
      for (int e = 0; e < st->n_experts(); ++e) {
        const uint8_t* home = L.home_gu + int64_t(e) * L.gu_stride;
        REQUIRE(std::memcmp(home, dev.data() + g->offset + uint64_t(e) * uint64_t(L.gate_bytes),
                            size_t(L.gate_bytes)) == 0);
        REQUIRE(std::memcmp(home + L.gate_bytes, dev.data() + u->offset + uint64_t(e) * uint64_t(L.gate_bytes),
                            size_t(L.gate_bytes)) == 0);
        REQUIRE(std::memcmp(L.home_dn + int64_t(e) * L.dn_stride,
                            dev.data() + dn->offset + uint64_t(e) * uint64_t(L.dn_stride), size_t(L.dn_stride)) == 0);
      }
    }
    const run_out got = run_synth(host, 6);
    CHECK(same_bits(got.prompt_logits, want.prompt_logits));
    CHECK(same_bits(got.last_logits, want.last_logits));
    CHECK(got.ids == want.ids);
  }
}

TEST_CASE("plan_synth_memory: the plan is what the synthetic model and its decoder allocate" * test::needs_device()) {
  const io::model_hparams h = io::hparams_of<models::tiny_moe>();
  gen::decoder_config cfg;
  cfg.n_ctx = 64;
  gen::memory_plan all;
  Q35_REQUIRE_OK(gen::plan_synth_memory(h, false, cfg, UINT64_MAX, std::nullopt, all));
  CHECK_FALSE(all.host_experts());
  CHECK(all.weights + all.resident_experts == gen::synth_device_bytes(gen::synth_layout(h, false), false));
  for (int64_t slots : {0, 2}) {
    CAPTURE(slots);
    gen::memory_plan p;
    Q35_REQUIRE_OK(gen::plan_synth_memory(h, false, cfg, UINT64_MAX, slots, p));
    gen::synth_model s;
    Q35_REQUIRE_OK(s.build(h, false, 9, nullptr, int(slots)));
    gen::decoder d;
    Q35_REQUIRE_OK(d.init(s.model(), cfg));
    CHECK(p.weights == s.bytes());
    CHECK(p.expert_device_bytes() == s.model().experts()->device_bytes());
    CHECK(p.host_bytes() == s.model().experts()->host_bytes());
    CHECK(p.decoder.total() == d.device_memory().total());
    // the budget the plan needs gives back the same slot count
    gen::memory_plan again;
    Q35_REQUIRE_OK(gen::plan_synth_memory(h, false, cfg, p.device_bytes(), std::nullopt, again));
    CHECK(again.slots == int(slots));
  }
}

// The shapes the benchmark builds without traits: their parameter counts must be what their names say
// (every tensor's elements; active = all but the routed experts, plus k / n_experts of those).
TEST_CASE("MoE shapes from hyper-parameters: 122B-A10B and 397B-A17B count their parameters") {
  // every tensor's elements; active = all but the routed experts, plus k / n_experts of those
  auto check_counts = [](const char* name, const io::model_hparams& h, double total_lo, double total_hi,
                         double active_lo, double active_hi) {
    double total = 0, active = 0;
    for (const io::expected_tensor& t : io::expected_tensors(h)) {
      const double n = double(t.ne[0]) * double(t.ne[1]) * double(t.ne[2]) * double(t.ne[3]);
      total += n;
      const bool routed = t.name.find("_exps.") != std::string::npos;
      active += routed ? n * double(h.n_experts_used) / double(h.n_experts) : n;
    }
    MESSAGE(std::string(name) << ": " << total * 1e-9 << " B parameters, " << active * 1e-9 << " B active");
    CHECK(total > total_lo);
    CHECK(total < total_hi);
    CHECK(active > active_lo);
    CHECK(active < active_hi);
  };
  // the 35B-A3B traits as a control: 35 B and 3 B
  check_counts("35B-A3B traits", io::hparams_of<models::qwen35_35b_a3b>(), 33e9, 37e9, 2.5e9, 4e9);
  check_counts("122B-A10B shape", gen::moe_hparams(gen::qwen35_122b_a10b_shape), 118e9, 126e9, 8.5e9, 11.5e9);
  check_counts("397B-A17B shape", gen::moe_hparams(gen::qwen35_397b_a17b_shape), 385e9, 410e9, 15e9, 19e9);
}

// The zero-copy probe reads every word it is given and none past: a word whose lanes XOR to the marker
// sets the sink exactly when it lies inside the n words (threads past the grid stride included).
TEST_CASE("host_read_kernel: reads every 16-byte word of its range, none beyond" * test::needs_device()) {
  using probe = gen::host_read_kernel;
  const int64_t n = probe::threads * probe::max_blocks + 300;  // some threads read two words
  pinned_buffer<uint32_t> host;
  Q35_REQUIRE_OK(host.allocate(size_t(4 * (n + 1))));
  for (int64_t at : {int64_t(0), int64_t(77), n - 1, n}) {  // n: just past the range
    CAPTURE(at);
    std::memset(host.data(), 0, size_t(16 * (n + 1)));
    host[size_t(4 * at)] = probe::marker ^ 5u, host[size_t(4 * at + 3)] = 5u;
    device_buffer<uint32_t> sink = test::poisoned<uint32_t>(1);
    Q35_REQUIRE_OK(launch::launch<probe>({host.data(), n, sink.data()}));
    const uint32_t got = test::to_host(sink)[0];
    CHECK((got == probe::marker) == (at < n));
  }
}
