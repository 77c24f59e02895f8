// Expert statistics (decoder_config::expert_stats) on the MoE fixtures: the router's device histograms
// against the ids it returns and a float64 host routing (both moe_ffn paths, on the file's weights), then
// through the decoder: every token counted k times per MoE layer in prompt chunks (grouped and decode
// kernels) and in decode steps, each step adding one to k distinct experts, the same histogram whether the
// tokens come in chunks or one at a time, each layer's call adding to its own histogram, and a fresh
// histogram for every init().
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <span>
#include <string>
#include <vector>

#include "decoder.hpp"
#include "q35/launch/moe.hpp"
#include "q35/quant/formats.hpp"
#include "test_model.hpp"
#include "test_util.hpp"

namespace {

using namespace q35;
using counts_t = std::vector<std::vector<uint64_t>>;

gen::decoder_config stats_config(int64_t n_batch) {
  gen::decoder_config c;
  c.n_ctx = 128, c.n_batch = n_batch, c.expert_stats = true;
  return c;
}

counts_t read_counts(const gen::decoder& d) {
  counts_t c;
  Q35_OK(d.expert_counts(c));
  REQUIRE(c.size() == d.moe_layers().size());
  return c;
}

uint64_t sum(const std::vector<uint64_t>& v) { return std::accumulate(v.begin(), v.end(), uint64_t(0)); }

// c1 - c0, per layer and expert (counters only grow)
counts_t delta(const counts_t& c1, const counts_t& c0) {
  counts_t d = c1;
  for (size_t j = 0; j < d.size(); ++j)
    for (size_t e = 0; e < d[j].size(); ++e) {
      REQUIRE(c1[j][e] >= c0[j][e]);
      d[j][e] -= c0[j][e];
    }
  return d;
}

// 24 token ids spread over the vocabulary
std::vector<int32_t> session_tokens(int64_t n_vocab) {
  std::vector<int32_t> t;
  for (int i = 0; i < 24; ++i) t.push_back(int32_t((i * 97 + 13) % n_vocab));
  return t;
}

TEST_CASE("decoder: expert statistics, moe_ffn's histogram against its ids and a host routing, both paths" *
          test::needs_device()) {
  for (const char* name : test::q4km_moe_fixtures) {
    CAPTURE(name);
    const auto l = test::load_model(name);
    const io::model_hparams& h = l->model.hparams();
    const int n_e = int(h.n_experts), k = int(h.n_experts_used);
    int host_checked = 0;  // layer calls checked against the host routing
    launch::ffn_shape s{int(h.n_embd), int(h.ff_dim), n_e, k, int(h.expert_ff_dim), int(h.shared_ff_dim)};
    for (const int64_t n : {int64_t(5), int64_t(20)}) {  // the decode kernels (<= 8 tokens), the grouped path
      CAPTURE(n);
      for (size_t il = 0; il < l->model.layers().size(); ++il) {
        const gen::layer_views& lv = l->model.layers()[il];
        if (lv.ffn_kind != models::ffn_type::moe) continue;
        CAPTURE(il);
        const std::vector<float> x = test::random_floats(size_t(n * h.n_embd), 100 + il);
        auto d_x = test::to_device(x);
        auto d_h = test::to_device(std::vector<float>(size_t(n * h.n_embd), 0.0f));
        device_buffer<uint8_t> ws;
        Q35_OK(ws.allocate(launch::moe_workspace_bytes(s, n)));
        launch::expert_load load;
        Q35_OK(load.allocate(1, n_e));
        device_buffer<int32_t> flag;
        Q35_OK(flag.allocate(1));
        Q35_OK(fill_bytes(flag.data(), 0, flag.bytes()));
        launch::ffn_layer_args a;
        a.shape = s, a.x = d_x.data(), a.h = d_h.data(), a.n_tokens = n;
        a.workspace = ws.data(), a.workspace_bytes = ws.bytes(), a.error_flag = flag.data();
        a.maybe_expert_counts = load.counts(0);
        Q35_OK(launch::moe_ffn(a, lv.moe));
        Q35_OK(synchronize());
        std::vector<uint64_t> got;
        Q35_OK(load.read(0, got));

        // the ids the router wrote (moe_ffn's workspace), counted on the host
        std::vector<int32_t> ids(size_t(n * k));
        Q35_OK(copy(ids.data(), ws.data() + launch::detail::moe_plan(s, n).ids, ids.size() * 4,
                    copy_kind::device_to_host));
        Q35_OK(synchronize());
        std::vector<uint64_t> want(size_t(n_e), 0);
        for (int32_t id : ids) {
          REQUIRE(id >= 0);
          REQUIRE(id < n_e);
          ++want[size_t(id)];
        }
        CHECK(got == want);
        CHECK(sum(got) == uint64_t(n * k));

        // float64 routing on the host when the router is f32: each token's k largest logits W_r x
        if (lv.moe.router.type != uint32_t(quant::type_id::f32)) continue;
        std::vector<float> w(size_t(n_e) * size_t(h.n_embd));
        Q35_OK(copy(w.data(), lv.moe.router.data, w.size() * 4, copy_kind::device_to_host));
        Q35_OK(synchronize());
        std::vector<uint64_t> host(size_t(n_e), 0);
        int decided = 0;
        for (int64_t t = 0; t < n; ++t) {
          std::vector<double> logit(size_t(n_e), 0.0);
          for (int e = 0; e < n_e; ++e)
            for (int64_t c = 0; c < h.n_embd; ++c)
              logit[size_t(e)] += double(w[size_t(e * h.n_embd + c)]) * double(x[size_t(t * h.n_embd + c)]);
          std::vector<int> order(static_cast<size_t>(n_e));
          std::iota(order.begin(), order.end(), 0);
          std::stable_sort(order.begin(), order.end(),
                           [&](int p, int q) { return logit[size_t(p)] > logit[size_t(q)]; });
          // a token whose k-th and (k+1)-th logits are within float rounding may go either way: not judged
          if (k < n_e && logit[size_t(order[size_t(k - 1)])] - logit[size_t(order[size_t(k)])] < 1e-4) {
            for (int j = 0; j < k; ++j) ++host[size_t(ids[size_t(t * k + j)])];
            continue;
          }
          ++decided;
          for (int j = 0; j < k; ++j) ++host[size_t(order[size_t(j)])];
        }
        CHECK(decided >= n - 1);
        CHECK(got == host);
        ++host_checked;
      }
    }
    CHECK(host_checked > 0);  // the fixtures keep the router in f32 (as llama.cpp's quantizer does)
  }
}

TEST_CASE("decoder: expert statistics count every token of prompt chunks and decode steps" * test::needs_device()) {
  for (const char* name : test::q4km_moe_fixtures) {
    CAPTURE(name);
    const auto l = test::load_model(name);
    const io::model_hparams& h = l->model.hparams();
    const uint64_t k = uint64_t(h.n_experts_used);
    std::vector<int> want_layers;
    for (size_t il = 0; il < l->model.layers().size(); ++il)
      if (l->model.layers()[il].ffn_kind == models::ffn_type::moe) want_layers.push_back(int(il));
    REQUIRE(!want_layers.empty());
    const std::vector<int32_t> tokens = session_tokens(h.n_vocab);
    const std::span<const int32_t> all(tokens);

    // a: the first 20 tokens as a prompt in chunks of 12 (grouped path) and 8 (decode kernels), then 4
    // decode steps
    gen::decoder a;
    Q35_OK(a.init(l->model, stats_config(12)));
    CHECK(a.moe_layers() == want_layers);
    counts_t c = read_counts(a);
    for (const auto& layer : c) {
      CHECK(layer.size() == size_t(h.n_experts));
      CHECK(sum(layer) == 0);
    }
    Q35_OK(a.eval(all.subspan(0, 12)));
    counts_t c1 = read_counts(a);
    for (const auto& d : delta(c1, c)) {
      CHECK(sum(d) == 12 * k);
      for (uint64_t v : d) CHECK(v <= 12);  // a token is routed to k distinct experts
    }
    Q35_OK(a.eval(all.subspan(12, 8)));
    c = read_counts(a);
    for (const auto& d : delta(c, c1)) {
      CHECK(sum(d) == 8 * k);
      for (uint64_t v : d) CHECK(v <= 8);
    }
    for (size_t i = 20; i < tokens.size(); ++i) {
      Q35_OK(a.eval(all.subspan(i, 1)));
      c1 = read_counts(a);
      for (const auto& d : delta(c1, c)) {  // one decode step: +1 on exactly k experts
        CHECK(sum(d) == k);
        CHECK(uint64_t(std::count(d.begin(), d.end(), uint64_t(1))) == k);
      }
      c = c1;
    }
    for (const auto& layer : c) CHECK(sum(layer) == tokens.size() * k);

    // each MoE layer's call adds to its own histogram: the j-th moe_ffn call of a step (the call hook, after
    // each call) changes histogram j only, by n tokens x k
    const size_t n_moe = want_layers.size();
    for (const size_t n : {size_t(1), size_t(10)}) {
      CAPTURE(n);
      size_t calls = 0;
      counts_t before = read_counts(a);
      a.set_call_hook([&](gen::decoder::call what) {
        if (what != gen::decoder::call::moe_ffn) return;
        const counts_t now = read_counts(a);
        const counts_t d = delta(now, before);
        for (size_t j = 0; j < n_moe; ++j) CHECK(sum(d[j]) == (j == calls % n_moe ? n * k : 0));
        before = now;
        ++calls;
      });
      Q35_OK(a.eval(all.subspan(0, n)));
      a.set_call_hook({});
      CHECK(calls == n_moe);
    }

    // b: the same tokens one at a time (every step on the decode kernels): routing is per token, so the
    // same histogram
    gen::decoder b;
    Q35_OK(b.init(l->model, stats_config(1)));
    Q35_OK(b.eval(all));
    CHECK(read_counts(b) == c);

    // a new init() starts from zero; expert_stats off has no histograms
    Q35_OK(a.init(l->model, stats_config(12)));
    for (const auto& layer : read_counts(a)) CHECK(sum(layer) == 0);
    gen::decoder off;
    gen::decoder_config oc = stats_config(12);
    oc.expert_stats = false;
    Q35_OK(off.init(l->model, oc));
    CHECK(off.moe_layers() == want_layers);
    Q35_OK(off.eval(all.subspan(0, 3)));
    counts_t none;
    CHECK(!off.expert_counts(none).ok());
  }
}

TEST_CASE("decoder: expert statistics of a model without MoE layers are an error" * test::needs_device()) {
  const auto l = test::load_model("tiny_dense_q4km.gguf");
  gen::decoder d;
  Q35_OK(d.init(l->model, stats_config(12)));
  CHECK(d.moe_layers().empty());
  counts_t c;
  const status s = d.expert_counts(c);
  CHECK(!s.ok());
  CHECK(s.message().find("no MoE layers") != std::string::npos);
}

}  // namespace

namespace {

// Every row of the logits of `tokens`: a 20-token prompt in chunks of 12 (grouped path) and 8 (decode
// kernels), then one decode step per token.
std::vector<float> session_logits(const gen::device_model& m, const gen::decoder_config& cfg,
                                  std::span<const int32_t> tokens, counts_t* counts = nullptr) {
  gen::decoder d;
  Q35_OK(d.init(m, cfg));
  std::vector<float> out, rows;
  Q35_OK(d.eval(tokens.subspan(0, 20), &rows));
  out = rows;
  for (size_t i = 20; i < tokens.size(); ++i) {
    Q35_OK(d.eval(tokens.subspan(i, 1), &rows));
    out.insert(out.end(), rows.begin(), rows.end());
  }
  if (counts) *counts = read_counts(d);
  return out;
}

gen::decoder_config logits_config() {
  gen::decoder_config c = stats_config(12);
  c.keep_all_logits = true;
  return c;
}

double rel_rms(const std::vector<float>& got, const std::vector<float>& want) {
  double num = 0, den = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double d = double(got[i]) - double(want[i]);
    num += d * d, den += double(want[i]) * double(want[i]);
  }
  return std::sqrt(num / den);
}

}  // namespace

TEST_CASE("decoder: adaptive top-k with one expert per token is the k = 1 model, bit for bit" * test::needs_device()) {
  for (const char* name : test::q4km_moe_fixtures) {
    CAPTURE(name);
    const auto l = test::load_model(name);
    const io::model_hparams& h = l->model.hparams();
    REQUIRE(h.n_experts_used > 1);
    const std::vector<int32_t> tokens = session_tokens(h.n_vocab);

    // the same file read as a top-1 model: the router's weights and scores do not depend on k
    io::bound_model top1 = l->bound;
    top1.hparams.n_experts_used = 1;
    gen::device_model m1;
    Q35_OK(m1.load(l->file, top1));
    counts_t c1, ca;
    const std::vector<float> want = session_logits(m1, logits_config(), tokens, &c1);

    gen::decoder_config cfg = logits_config();
    cfg.moe_adaptive_k = ops::adaptive_k_options{};
    for (int& k : cfg.moe_adaptive_k->k_values) k = 1;
    const std::vector<float> got = session_logits(l->model, cfg, tokens, &ca);
    REQUIRE(got.size() == want.size());
    CHECK(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)) == 0);
    CHECK(ca == c1);
    for (const auto& layer : ca) CHECK(sum(layer) == tokens.size());  // one expert per token read

    // k values all equal to the file's k: the exact model
    for (int& k : cfg.moe_adaptive_k->k_values) k = int(h.n_experts_used);
    const std::vector<float> exact = session_logits(l->model, logits_config(), tokens);
    CHECK(std::memcmp(session_logits(l->model, cfg, tokens).data(), exact.data(), exact.size() * sizeof(float)) == 0);
  }
}

TEST_CASE("decoder: adaptive top-k reads fewer experts; its distance from exact top-k" * test::needs_device()) {
  for (const char* name : test::q4km_moe_fixtures) {
    CAPTURE(name);
    const auto l = test::load_model(name);
    const io::model_hparams& h = l->model.hparams();
    const int k = int(h.n_experts_used);
    const std::vector<int32_t> tokens = session_tokens(h.n_vocab);
    const std::vector<float> exact = session_logits(l->model, logits_config(), tokens);
    // the library's default thresholds (1.2, 2.5 nats) with k / 4, k / 2 and k experts
    gen::decoder_config cfg = logits_config();
    cfg.moe_adaptive_k = ops::adaptive_k_options{};
    const int ks[3] = {std::max(1, k / 4), std::max(1, k / 2), k};
    std::copy(ks, ks + 3, cfg.moe_adaptive_k->k_values);
    counts_t c;
    const std::vector<float> got = session_logits(l->model, cfg, tokens, &c);
    REQUIRE(got.size() == exact.size());
    for (const float v : got) REQUIRE(std::isfinite(v));
    double per_token = 0;
    for (const auto& layer : c) {
      const uint64_t n = sum(layer);
      CHECK(n >= tokens.size() * uint64_t(ks[0]));
      CHECK(n <= tokens.size() * uint64_t(k));
      per_token += double(n) / double(tokens.size()) / double(c.size());
    }
    const double rms = rel_rms(got, exact);
    MESSAGE(std::string(name) << ": adaptive top-(" << ks[0] << "," << ks[1] << "," << ks[2] << ") of " << h.n_experts
                              << ", " << per_token << " experts per token (exact " << k
                              << "); logits' relative RMS from exact top-" << k << " = " << rms);
    CHECK(per_token < double(k));  // the router is sure often enough on the fixtures to drop experts
    CHECK(rms > 0);
  }
}

TEST_CASE("decoder: adaptive top-k options are checked against the model" * test::needs_device()) {
  const auto l = test::load_model("tiny_moe_q4km.gguf");
  gen::decoder d;
  gen::decoder_config cfg = stats_config(12);
  cfg.moe_adaptive_k = ops::adaptive_k_options{};
  cfg.moe_adaptive_k->k_values[2] = int(l->model.hparams().n_experts_used) + 1;
  status s = d.init(l->model, cfg);
  CHECK(s.message().find("adaptive k value") != std::string::npos);
  const auto dense = test::load_model("tiny_dense_q4km.gguf");
  cfg.moe_adaptive_k = ops::adaptive_k_options{};
  s = d.init(dense->model, cfg);
  CHECK(s.message().find("no MoE layers") != std::string::npos);
}
