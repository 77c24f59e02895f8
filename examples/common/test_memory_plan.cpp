// The memory planner (--vram) and the decoder's memory estimate: decoder::memory_needed equals what
// init() takes, kind by kind, over configurations and fixtures; the plan's device bytes equal what the
// model, its expert store and the decoder then allocate; budgets that hold everything, only the
// non-expert part (0 slots), a few slots, less than the non-expert part (the error, naming both
// numbers); fixed slot counts; a file whose experts are in different formats per layer (tiny_moe_q4km:
// Q4_K down in layers 0-1, Q6_K in 2-3); the size parser. Traced plans (--expert-plan): the slots
// against every allocation's saving, placed and allocated as planned, logits as all resident; the
// trace reader's errors.
#include <doctest/doctest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "decoder.hpp"
#include "expert_store.hpp"
#include "expert_trace.hpp"
#include "memory_plan.hpp"
#include "test_model.hpp"
#include "test_util.hpp"

namespace {

using namespace q35;

void check_same(const gen::decoder_memory& a, const gen::decoder_memory& b) {
  CHECK(a.kv == b.kv);
  CHECK(a.recurrent == b.recurrent);
  CHECK(a.workspace == b.workspace);
  CHECK(a.activations == b.activations);
  CHECK(a.other == b.other);
  CHECK(a.expert_staging == b.expert_staging);
}

std::vector<gen::decoder_config> configs() {
  std::vector<gen::decoder_config> v(5);
  v[1].n_ctx = 300, v[1].n_seq_max = 3, v[1].n_prefix_slots = 2, v[1].n_batch = 7, v[1].keep_all_logits = true;
  v[2].n_ctx = 256, v[2].n_seq_max = 12, v[2].batch_invariant = true, v[2].n_batch = 1000;  // n_batch > n_ctx
  v[3].n_ctx = 64, v[3].n_batch = 1, v[3].kv_type = kv::kv_type::f32;
  v[4].n_ctx = 128, v[4].n_batch = 12, v[4].expert_stats = true, v[4].expert_staging_window = 3;
  v[1].score_rows = 5;
  v[4].score_rows = 100;              // more than n_batch: n_batch rows
  v[1].expert_staging_window = 1000;  // more than any fixture's experts: a whole layer
  return v;
}

// Device bytes the model, its expert store and the decoder hold.
uint64_t device_bytes(const gen::device_model& m, const gen::decoder& d) {
  return m.weight_bytes() + (m.experts() ? m.experts()->device_bytes() : 0) + d.device_memory().total();
}

// 30 ids spread over the vocabulary.
std::vector<int32_t> some_tokens(int64_t n_vocab) {
  std::vector<int32_t> t;
  for (int i = 0; i < 30; ++i) t.push_back(int32_t((i * 37 + 11) % n_vocab));
  return t;
}

// Logits of a 20-token prompt in chunks of 12 (grouped path) and 8, then 10 decode steps.
std::vector<float> run(const gen::device_model& m, const gen::decoder_config& cfg) {
  gen::decoder d;
  Q35_OK(d.init(m, cfg));
  const std::vector<int32_t> t = some_tokens(m.hparams().n_vocab);
  std::vector<float> all;
  size_t at = 0;
  for (const size_t n : {12, 8, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1}) {
    std::vector<float> rows;
    Q35_OK(d.eval(std::span<const int32_t>(t).subspan(at, n), &rows));
    all.insert(all.end(), rows.begin(), rows.end());
    at += n;
  }
  return all;
}

}  // namespace

TEST_CASE("decoder: memory_needed is what init takes, by kind") {
  for (const char* name : test::q4km_fixtures) {
    const auto l = test::load_model(name);
    const io::model_hparams& h = l->model.hparams();
    for (const gen::decoder_config& cfg : configs()) {
      CAPTURE(name);
      CAPTURE(cfg.n_seq_max);
      gen::decoder d;
      Q35_OK(d.init(l->model, cfg));
      gen::decoder_memory need;
      Q35_OK(gen::decoder::memory_needed(h, cfg, 0, need));
      check_same(need, d.device_memory());
      CHECK(need.kv == d.kv_bytes());
      CHECK(need.expert_staging == 0);
    }
  }
  // host-resident experts: the staging area (prompt chunks past 8 rows) and the router's counts
  for (const char* name : test::q4km_moe_fixtures) {
    const auto l = test::load_model(name);
    gen::device_model m;
    Q35_OK(m.load(l->file, l->bound, {}, 2));
    REQUIRE(m.experts());
    std::vector<gen::expert_layer_shape> shapes;
    Q35_OK(gen::expert_layer_shapes(l->bound.weights, shapes));
    const int E = int(m.hparams().n_experts);
    // windows of W experts of the largest layer, each a window of gate+up or of down matrices
    const auto window_bytes = [&](int W) {
      uint64_t b = 0;
      for (const gen::expert_layer_shape& s : shapes)
        b = std::max<uint64_t>(b, uint64_t(std::min(W, E)) * uint64_t(std::max(s.gu_stride, s.dn_stride)));
      return b;
    };
    for (const int W : {1, 3, E, E + 5}) {
      CAPTURE(W);
      CHECK(gen::expert_staging_bytes(shapes, E, W) == window_bytes(W));
      CHECK(m.experts()->staging_bytes(W) == window_bytes(W));
    }
    for (const gen::decoder_config& cfg : configs()) {
      CAPTURE(name);
      CAPTURE(cfg.n_batch);
      gen::decoder d;
      Q35_OK(d.init(m, cfg));
      gen::decoder_memory need;
      Q35_OK(
          gen::decoder::memory_needed(m.hparams(), cfg, m.experts()->staging_bytes(cfg.expert_staging_window), need));
      check_same(need, d.device_memory());
      CHECK((need.expert_staging > 0) == (std::max(std::min(cfg.n_batch, cfg.n_ctx), int64_t(cfg.n_seq_max)) > 8));
      if (need.expert_staging) CHECK(need.expert_staging == window_bytes(cfg.expert_staging_window));
    }
    gen::decoder_config zero;
    zero.expert_staging_window = 0;
    gen::decoder d;
    CHECK(d.init(m, zero).message().find("expert staging window of 0 experts") != std::string::npos);
  }
}

TEST_CASE("memory plan: budgets from all resident down to below the non-expert part") {
  for (const char* name : test::q4km_moe_fixtures) {
    CAPTURE(name);
    const auto l = test::load_model(name);
    const io::model_hparams& h = l->model.hparams();
    const int E = int(h.n_experts);
    gen::decoder_config cfg;
    cfg.n_ctx = 128, cfg.n_batch = 12;

    // one slot in every MoE layer: the expert tensors' bytes over the expert count, summed over layers
    uint64_t expert_tensor_bytes = 0;
    for (const io::layer_weights& lw : l->bound.weights.layers)
      if (lw.ffn_kind == models::ffn_type::moe)
        for (const io::tensor_info* t :
             {lw.moe.maybe_gate_exps, lw.moe.maybe_up_exps, lw.moe.maybe_gate_up_exps, lw.moe.down_exps})
          if (t) expert_tensor_bytes += t->n_bytes;

    // no limit: every expert on the device, as load() without slots lays it out
    gen::memory_plan all;
    Q35_OK(gen::plan_memory(l->file, h, l->bound.weights, cfg, UINT64_MAX, std::nullopt, all));
    CHECK(all.slots == -1);
    CHECK(all.slot_bytes * uint64_t(E) == expert_tensor_bytes);
    CHECK(all.experts == expert_tensor_bytes);
    CHECK(all.host_bytes() == 0);
    {
      gen::decoder d;
      Q35_OK(d.init(l->model, cfg));
      CHECK(all.weights + all.expert_device_bytes() == l->model.weight_bytes());
      CHECK(all.resident_experts >= expert_tensor_bytes);
      CHECK(all.device_bytes() == device_bytes(l->model, d));
    }
    // exactly enough for everything; one byte less puts the experts in host memory
    gen::memory_plan exact;
    Q35_OK(gen::plan_memory(l->file, h, l->bound.weights, cfg, all.device_bytes(), std::nullopt, exact));
    CHECK(exact.slots == -1);
    gen::memory_plan less;
    Q35_OK(gen::plan_memory(l->file, h, l->bound.weights, cfg, all.device_bytes() - 1, std::nullopt, less));
    CHECK(less.host_experts());
    CHECK(less.slots <= E - 1);
    CHECK(less.host_bytes() == expert_tensor_bytes);
    CHECK(less.device_bytes() <= all.device_bytes() - 1);

    // the non-expert part alone: 0 slots; and a few slots' worth
    gen::memory_plan none;
    Q35_OK(gen::plan_memory(l->file, h, l->bound.weights, cfg, UINT64_MAX, int64_t(0), none));
    const uint64_t fixed = none.device_bytes();
    CHECK(fixed < all.device_bytes());
    for (const int want : {0, 1, 3, E - 1}) {
      CAPTURE(want);
      for (const uint64_t extra : {uint64_t(0), none.slot_bytes - 1}) {
        // a budget that holds every expert on the device (the staging area and the index cost more
        // than the last slots) gets them all there
        const uint64_t budget = fixed + uint64_t(want) * none.slot_bytes + extra;
        gen::memory_plan p;
        Q35_OK(gen::plan_memory(l->file, h, l->bound.weights, cfg, budget, std::nullopt, p));
        CHECK(p.slots == (budget >= all.device_bytes() ? -1 : want));
      }
      if (fixed + uint64_t(want) * none.slot_bytes >= all.device_bytes()) continue;
      // what the plan says is what the model, its store and the decoder allocate
      gen::memory_plan p;
      Q35_OK(gen::plan_memory(l->file, h, l->bound.weights, cfg, fixed + uint64_t(want) * none.slot_bytes, std::nullopt,
                              p));
      gen::device_model m;
      Q35_OK(m.load(l->file, l->bound, {}, p.slots));
      REQUIRE(m.experts());
      CHECK(m.experts()->slots() == want);
      gen::decoder d;
      Q35_OK(d.init(m, cfg));
      CHECK(p.weights == m.weight_bytes());
      CHECK(p.expert_device_bytes() == m.experts()->device_bytes());
      CHECK(p.host_bytes() == m.experts()->host_bytes());
      CHECK(p.device_bytes() == device_bytes(m, d));
    }

    // below the non-expert part: an error that names both numbers
    gen::memory_plan bad;
    const status st = gen::plan_memory(l->file, h, l->bound.weights, cfg, fixed - 1, std::nullopt, bad);
    CHECK(st.code() == status_code::out_of_memory);
    CHECK(st.message().find(std::to_string(fixed - 1) + " bytes") != std::string::npos);
    CHECK(st.message().find(std::to_string(fixed) + " bytes") != std::string::npos);

    // fixed slot counts (--expert-cache): as asked, checked against the budget; >= E: all resident
    gen::memory_plan three;
    Q35_OK(gen::plan_memory(l->file, h, l->bound.weights, cfg, UINT64_MAX, int64_t(3), three));
    CHECK(three.slots == 3);
    CHECK(three.device_bytes() == fixed + 3 * none.slot_bytes);
    CHECK(gen::plan_memory(l->file, h, l->bound.weights, cfg, three.device_bytes() - 1, int64_t(3), bad).code() ==
          status_code::out_of_memory);
    gen::memory_plan every;
    Q35_OK(gen::plan_memory(l->file, h, l->bound.weights, cfg, UINT64_MAX, int64_t(E + 5), every));
    CHECK(every.slots == -1);
    CHECK(every.device_bytes() == all.device_bytes());
    const status st_all = gen::plan_memory(l->file, h, l->bound.weights, cfg, all.device_bytes() - 1, int64_t(E), bad);
    CHECK(st_all.code() == status_code::out_of_memory);
    CHECK(st_all.message().find("--expert-cache") != std::string::npos);
  }
}

TEST_CASE("memory plan: a planned model decodes as the all-resident one (experts in two formats)") {
  // tiny_moe_q4km's experts: Q4_K gate/up everywhere, down Q4_K in layers 0-1 and Q6_K in layers 2-3
  const auto l = test::load_model("tiny_moe_q4km.gguf");
  std::vector<gen::expert_layer_shape> shapes;
  Q35_OK(gen::expert_layer_shapes(l->bound.weights, shapes));
  REQUIRE(shapes.size() == 4);
  CHECK(shapes[0].down_type == uint32_t(io::ggml_type::q4_k));
  CHECK(shapes[3].down_type == uint32_t(io::ggml_type::q6_k));
  CHECK(shapes[0].dn_stride < shapes[3].dn_stride);

  gen::decoder_config cfg;
  cfg.n_ctx = 64, cfg.n_batch = 12, cfg.keep_all_logits = true;
  gen::memory_plan none;
  Q35_OK(gen::plan_memory(l->file, l->model.hparams(), l->bound.weights, cfg, UINT64_MAX, int64_t(0), none));
  gen::memory_plan p;
  Q35_OK(gen::plan_memory(l->file, l->model.hparams(), l->bound.weights, cfg,
                          none.device_bytes() + 2 * none.slot_bytes + none.slot_bytes / 2, std::nullopt, p));
  REQUIRE(p.slots == 2);
  gen::device_model m;
  Q35_OK(m.load(l->file, l->bound, {}, p.slots));
  const std::vector<float> want = run(l->model, cfg);
  const std::vector<float> got = run(m, cfg);
  REQUIRE(got.size() == want.size());
  CHECK(std::memcmp(got.data(), want.data(), want.size() * sizeof(float)) == 0);
}

TEST_CASE("memory plan: a model without MoE layers either fits or is an error") {
  const auto l = test::load_model("tiny_dense_q4km.gguf");
  gen::decoder_config cfg;
  cfg.n_ctx = 128;
  gen::memory_plan p;
  Q35_OK(gen::plan_memory(l->file, l->model.hparams(), l->bound.weights, cfg, UINT64_MAX, std::nullopt, p));
  CHECK(p.slots == -1);
  CHECK(p.experts == 0);
  const status st =
      gen::plan_memory(l->file, l->model.hparams(), l->bound.weights, cfg, p.device_bytes() - 1, std::nullopt, p);
  CHECK(st.code() == status_code::out_of_memory);
  CHECK(st.message().find("no MoE layers") != std::string::npos);
}

TEST_CASE("memory plan: sizes as --vram takes them") {
  CHECK(gen::parse_memory_size("24G") == uint64_t(24) << 30);
  CHECK(gen::parse_memory_size("16000M") == uint64_t(16000) << 20);
  CHECK(gen::parse_memory_size("1.5GiB") == uint64_t(3) << 29);
  CHECK(gen::parse_memory_size("512mb") == uint64_t(512) << 20);
  CHECK(gen::parse_memory_size("2t") == uint64_t(2) << 40);
  CHECK(gen::parse_memory_size("123456789") == uint64_t(123456789));
  CHECK(gen::parse_memory_size("100B") == uint64_t(100));
  for (const char* bad :
       {"", "G", "-1", "0", "0.5", "1.2.3", "24X", "24 G", "24GG", "1e9", "99999999T", ".", "24Gb!"}) {
    CAPTURE(bad);
    CHECK_FALSE(gen::parse_memory_size(bad).has_value());
  }
  CHECK(gen::format_bytes(512) == "512 B");
  CHECK(gen::format_bytes(uint64_t(3) << 29) == "1.50 GiB");
  CHECK(gen::format_bytes(uint64_t(24) << 30) == "24.0 GiB");
}

namespace {

// Bus bytes a plan saves per traced token: sum over layers of expert bytes x the selections of its slots.
uint64_t saved(const std::vector<uint64_t>& bytes, const std::vector<std::vector<uint64_t>>& counts,
               const gen::expert_slot_plan& p) {
  uint64_t s = 0;
  for (size_t j = 0; j < bytes.size(); ++j)
    for (const int e : p.first[j]) s += bytes[j] * counts[j][size_t(e)];
  return s;
}

// The most any choice of slot counts saves within `budget`: every (n_0, .., n_L-1) in [0, E]^L, each
// layer's n_j slots holding its n_j most selected experts.
uint64_t best_saving(const std::vector<uint64_t>& bytes, const std::vector<std::vector<uint64_t>>& counts,
                     uint64_t budget) {
  const size_t L = bytes.size(), E = counts[0].size();
  std::vector<std::vector<uint64_t>> top(L, std::vector<uint64_t>(E + 1, 0));  // top[j][n]: n most selected
  for (size_t j = 0; j < L; ++j) {
    std::vector<uint64_t> c = counts[j];
    std::sort(c.rbegin(), c.rend());
    for (size_t n = 0; n < E; ++n) top[j][n + 1] = top[j][n] + c[n];
  }
  uint64_t best = 0;
  std::vector<size_t> n(L, 0);
  for (;;) {
    uint64_t b = 0, s = 0;
    for (size_t j = 0; j < L; ++j) b += n[j] * bytes[j], s += bytes[j] * top[j][n[j]];
    if (b <= budget) best = std::max(best, s);
    size_t j = 0;
    while (j < L && n[j] == E) n[j++] = 0;
    if (j == L) return best;
    ++n[j];
  }
}

}  // namespace

TEST_CASE("memory plan: traced slots save the most bus bytes") {
  std::mt19937_64 rng(20261204);
  for (const std::vector<uint64_t>& bytes :
       {std::vector<uint64_t>{4, 4, 4}, std::vector<uint64_t>{3, 5, 3}, std::vector<uint64_t>{7, 2, 4, 5}}) {
    const size_t L = bytes.size(), E = L == 4 ? 4 : 5;
    for (int trial = 0; trial < 6; ++trial) {
      std::vector<std::vector<uint64_t>> counts(L, std::vector<uint64_t>(E));
      for (auto& row : counts)
        for (uint64_t& c : row) c = trial == 0 ? 3 : rng() % (trial < 3 ? 4 : 40);  // trial 0: a flat trace
      uint64_t all = 0, max_item = 0;
      for (size_t j = 0; j < L; ++j) all += E * bytes[j];
      for (size_t j = 0; j < L; ++j)
        for (const uint64_t c : counts[j]) max_item = std::max(max_item, bytes[j] * c);
      for (uint64_t budget = 0; budget <= all; ++budget) {
        INFO("bytes[1] " << bytes[1] << ", trial " << trial << ", budget " << budget);
        const gen::expert_slot_plan p = gen::plan_expert_slots(bytes, counts, budget);
        REQUIRE(p.slots.size() == L);
        REQUIRE(p.first.size() == L);
        uint64_t used = 0;
        for (size_t j = 0; j < L; ++j) {
          used += uint64_t(p.slots[size_t(j)]) * bytes[j];
          REQUIRE(p.first[j].size() == size_t(p.slots[j]));
          // each layer's slots hold its most selected experts, most selected first
          std::vector<bool> in(E, false);
          for (size_t i = 0; i < p.first[j].size(); ++i) {
            in[size_t(p.first[j][i])] = true;
            if (i) CHECK(counts[j][size_t(p.first[j][i - 1])] >= counts[j][size_t(p.first[j][i])]);
          }
          for (size_t a = 0; a < E; ++a)
            for (size_t b = 0; b < E; ++b)
              if (in[a] && !in[b]) CHECK(counts[j][a] >= counts[j][b]);
        }
        CHECK(used <= budget);
        // no layer could take another slot in what is left
        for (size_t j = 0; j < L; ++j)
          if (p.slots[j] < int(E)) CHECK(used + bytes[j] > budget);
        // the saving: the optimum with equal expert sizes; with unequal ones, within one expert's worth
        const uint64_t best = best_saving(bytes, counts, budget), got = saved(bytes, counts, p);
        CHECK(got <= best);
        if (bytes[0] == bytes[1] && bytes[1] == bytes[2])
          CHECK(got == best);
        else
          CHECK(got + max_item >= best);
        // a flat trace with equal sizes spreads the slots evenly
        if (trial == 0 && bytes[0] == bytes[1] && bytes[1] == bytes[2])
          CHECK(*std::max_element(p.slots.begin(), p.slots.end()) - *std::min_element(p.slots.begin(), p.slots.end()) <=
                1);
      }
    }
  }
}

TEST_CASE("memory plan: a traced plan places the slots as planned and decodes as all resident") {
  gen::decoder_config cfg;
  cfg.n_ctx = 64, cfg.n_batch = 12, cfg.keep_all_logits = true;
  for (const char* name : test::q4km_moe_fixtures) {
    CAPTURE(name);
    const auto l = test::load_model(name);
    const io::model_hparams& h = l->model.hparams();
    const int E = int(h.n_experts);
    gen::memory_plan none;
    Q35_OK(gen::plan_memory(l->file, h, l->bound.weights, cfg, UINT64_MAX, int64_t(0), none));
    const size_t L = none.layer_expert_bytes.size();
    // a skewed trace: layer j's experts selected j + 1 times more often the lower their id from the
    // layer's pivot (its own favourites), the last layer flat
    std::vector<std::vector<uint64_t>> trace(L, std::vector<uint64_t>(size_t(E)));
    for (size_t j = 0; j < L; ++j)
      for (int e = 0; e < E; ++e)
        trace[j][size_t(e)] = j + 1 == L ? 5 : uint64_t(100 * (j + 1)) >> ((e + E - int(3 * j + 1)) % E);
    const std::vector<float> want = run(l->model, cfg);
    for (const uint64_t extra : {none.slot_bytes * 2 / 3, 2 * none.slot_bytes + none.slot_bytes / 2}) {
      CAPTURE(extra);
      gen::memory_plan p;
      Q35_OK(gen::plan_memory(l->file, h, l->bound.weights, cfg, none.device_bytes() + extra, std::nullopt, p, &trace));
      REQUIRE(p.host_experts());
      const gen::expert_slot_plan direct = gen::plan_expert_slots(none.layer_expert_bytes, trace, extra);
      CHECK(p.layer_slots == direct.slots);
      CHECK(p.first_experts == direct.first);
      INFO("expert bytes " << none.layer_expert_bytes[0] << ", " << none.layer_expert_bytes.back());
      CHECK(direct.total() > 0);
      // the store holds each layer's planned experts in its slots, and the bytes planned are those allocated
      gen::device_model m;
      Q35_OK(m.load(l->file, l->bound, {}, p.placement()));
      REQUIRE(m.experts());
      for (size_t j = 0; j < L; ++j) {
        CHECK(m.experts()->slots(j) == p.layer_slots[j]);
        CHECK(m.experts()->layers()[j].slot_expert == p.first_experts[j]);
      }
      gen::decoder d;
      Q35_OK(d.init(m, cfg));
      CHECK(p.expert_device_bytes() == m.experts()->device_bytes());
      CHECK(p.device_bytes() == device_bytes(m, d));
      CHECK(p.device_bytes() <= none.device_bytes() + extra);
      CHECK(d.expert_layer_slots() == p.layer_slots);
      const std::vector<float> got = run(m, cfg);
      REQUIRE(got.size() == want.size());
      CHECK(std::memcmp(got.data(), want.data(), want.size() * sizeof(float)) == 0);
    }
    // a fixed count (--expert-cache 2) with a trace: 2 in every layer, its 2 most selected first
    gen::memory_plan two;
    Q35_OK(gen::plan_memory(l->file, h, l->bound.weights, cfg, UINT64_MAX, int64_t(2), two, &trace));
    CHECK(two.layer_slots == std::vector<int>(L, 2));
    for (size_t j = 0; j < L; ++j) {
      REQUIRE(two.first_experts[j].size() == 2);
      for (int e = 0; e < E; ++e)
        if (e != two.first_experts[j][0] && e != two.first_experts[j][1])
          CHECK(trace[j][size_t(e)] <= trace[j][size_t(two.first_experts[j][1])]);
    }
    // a trace of another shape is refused
    std::vector<std::vector<uint64_t>> short_trace(trace.begin(), trace.end() - 1);
    gen::memory_plan bad;
    CHECK(gen::plan_memory(l->file, h, l->bound.weights, cfg, UINT64_MAX, std::nullopt, bad, &short_trace).code() ==
          status_code::invalid_argument);
    std::vector<std::vector<uint64_t>> narrow = trace;
    narrow[0].pop_back();
    CHECK(gen::plan_memory(l->file, h, l->bound.weights, cfg, UINT64_MAX, std::nullopt, bad, &narrow).code() ==
          status_code::invalid_argument);
  }
}

TEST_CASE("memory plan: the store refuses a slot plan that does not fit the model") {
  const auto l = test::load_model("tiny_moe_q4km.gguf");
  const io::model_hparams& h = l->model.hparams();
  const auto refused = [&](const gen::expert_slot_plan& p, const std::string& says) {
    gen::expert_store st;
    const status s = st.load(h, l->bound.weights, p);
    CHECK(s.code() == status_code::invalid_argument);
    CHECK(s.message().find(says) != std::string::npos);
  };
  refused({{1, 1, 1}, {}}, "a slot plan for 3 MoE layers, the model has 4");
  refused({{1, 9, 1, 1}, {}}, "layer 1: 9 slots is outside 0..n_experts = 8");
  refused({{1, 2, 1, 1}, {{0}, {3, 3}, {}, {}}}, "layer 1: first expert 3 is out of range or repeated");
  refused({{1, 2, 1, 1}, {{0}, {3, 8}, {}, {}}}, "layer 1: first expert 8 is out of range or repeated");
  refused({{1, 1, 1, 1}, {{0}, {3, 4}, {}, {}}}, "layer 1: 2 first experts for 1 slots");
  // fewer first experts than slots: the lowest ids not named fill the rest
  gen::expert_store st;
  Q35_OK(st.load(h, l->bound.weights, {{3, 0, 8, 1}, {{5}, {}, {7, 6}, {}}}));
  CHECK(st.layers()[0].slot_expert == std::vector<int>{5, 0, 1});
  CHECK(st.layers()[1].slot_expert.empty());
  CHECK(st.layers()[2].slot_expert == std::vector<int>{7, 6, 0, 1, 2, 3, 4, 5});
  CHECK(st.layers()[3].slot_expert == std::vector<int>{0});
  CHECK(st.total_slots() == 12);
  CHECK(st.slots() == 3);
}

TEST_CASE("memory plan: a trace is read back, and a bad one is refused naming the file and the key") {
  const auto l = test::load_model("tiny_interleaved_q4km.gguf");  // MoE layers 1 and 3 of 4, 16 experts
  const io::model_hparams& h = l->model.hparams();
  const std::string path =
      (std::filesystem::temp_directory_path() / ("q35_trace_" + std::to_string(::getpid()) + ".json")).string();
  const auto with = [&](const std::string& text, std::vector<std::vector<uint64_t>>& out) {
    std::ofstream(path) << text;
    return gen::read_expert_trace(path, h, out);
  };
  std::string row, zeros;
  for (int e = 0; e < 16; ++e) {
    if (e) row += ',', zeros += ',';
    row += std::to_string(e * 3), zeros += '0';
  }
  const std::string good = R"({"n_experts": 16, "layers": [{"layer": 1, "tokens_per_expert": [)" + row +
                           R"(]}, {"layer": 3, "tokens_per_expert": [)" + zeros + "]}]}";
  std::vector<std::vector<uint64_t>> t;
  Q35_OK(with(good, t));
  REQUIRE(t.size() == 2);
  CHECK(t[0][5] == 15);
  CHECK(t[1] == std::vector<uint64_t>(16, 0));
  const std::pair<std::string, std::string> bad[] = {
      {"{", "not a JSON object"},
      {"[1, 2]", "not a JSON object"},
      {R"({"layers": []})", "\"n_experts\" is missing"},
      {R"({"n_experts": 8, "layers": []})", "traced with n_experts = 8, the model has 16"},
      {R"({"n_experts": 16})", "\"layers\" is missing"},
      {R"({"n_experts": 16, "layers": [{"layer": 1, "tokens_per_expert": [)" + row + "]}]}",
       "traces 1 MoE layers, the model has 2"},
      {R"({"n_experts": 16, "layers": [{"layer": 0, "tokens_per_expert": [)" + row + R"(]}, {"layer": 3}]})",
       "layers[0] is layer 0, the model's MoE layer 0 is layer 1"},
      {R"({"n_experts": 16, "layers": [{"layer": 1, "tokens_per_expert": [)" + row + R"(]}, {"layer": 3}]})",
       "layers[1].tokens_per_expert is not an array of 16 counts"},
      {R"({"n_experts": 16, "layers": [{"layer": 1, "tokens_per_expert": [1,2]}, {"layer": 3}]})",
       "layers[0].tokens_per_expert is not an array of 16 counts"},
      {R"({"n_experts": 16, "layers": [{"layer": 1, "tokens_per_expert": [)" + row + R"(]}, {"layer": 3, )" +
           R"("tokens_per_expert": [-1)" + zeros.substr(1) + "]}]}",
       "layers[1].tokens_per_expert holds -1, not a non-negative integer"},
      {R"({"n_experts": 16, "layers": [{"tokens_per_expert": []}, {}]})", "layers[0] has no integer \"layer\""},
  };
  for (const auto& [text, says] : bad) {
    CAPTURE(text);
    const status s = with(text, t);
    CHECK(s.code() == status_code::invalid_argument);
    CHECK(s.message().find("--expert-plan " + path + ": ") == 0);
    CHECK(s.message().find(says) != std::string::npos);
  }
  std::filesystem::remove(path);
  const status missing = gen::read_expert_trace(path, h, t);
  CHECK(missing.message() == "--expert-plan " + path + ": cannot be read");
}
