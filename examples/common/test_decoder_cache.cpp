// Host-resident experts (device_model::load with expert_slots, gen::expert_store) on the MoE fixtures:
// logits bit-identical to the all-resident decoder with 0, 1, a few and all but one device slots, in
// prompt chunks (the grouped path, staged in windows of experts) and decode steps (the kernels reading through the
// index), with promotions every step or never, across several turns; the cache record against an independent count from
// the router's histograms; the promotion protocol (the index names a slot only after its copy is committed); each
// policy's choice after every step (frequency: the highest decayed counts; lru: the most recently selected).
#include <doctest/doctest.h>

#include <algorithm>
#include <cstring>
#include <numeric>
#include <span>
#include <vector>

#include "decoder.hpp"
#include "q35/launch/moe.hpp"
#include "q35/sim/options.hpp"
#include "test_model.hpp"
#include "test_util.hpp"

namespace {

using namespace q35;
using counts_t = std::vector<std::vector<uint64_t>>;

// 46 token ids spread over the vocabulary
std::vector<int32_t> turn_tokens(int64_t n_vocab) {
  std::vector<int32_t> t;
  for (int i = 0; i < 46; ++i) t.push_back(int32_t((i * 89 + 7) % n_vocab));
  return t;
}

gen::decoder_config cache_config(int rebalance) {
  gen::decoder_config c;
  c.n_ctx = 128, c.n_batch = 12, c.keep_all_logits = true, c.expert_stats = true;
  c.expert_rebalance_steps = rebalance;
  return c;
}

// The inputs of a session: turn 1, a 20-token prompt in chunks of 12 (grouped path) and 8 (decode
// kernels) and 6 decode steps; turn 2, 8 prompt tokens (decode kernels), 10 (grouped), 2 steps.
const size_t feeds[] = {12, 8, 1, 1, 1, 1, 1, 1, 8, 10, 1, 1};

struct session {
  std::vector<float> logits;
  std::vector<counts_t> counts;  // the router's histograms after each feed
  std::vector<gen::expert_cache_stats> cache;
  int64_t replays = 0;  // decode steps that replayed a graph
};

session run_session(const gen::device_model& m, const gen::decoder_config& cfg, const std::vector<int32_t>& t) {
  gen::decoder d;
  Q35_OK(d.init(m, cfg));
  const std::span<const int32_t> all(t);
  session s;
  size_t at = 0;
  for (const size_t n : feeds) {
    std::vector<float> rows;
    Q35_OK(d.eval(all.subspan(at, n), &rows));
    s.logits.insert(s.logits.end(), rows.begin(), rows.end());
    s.counts.emplace_back();
    Q35_OK(d.expert_counts(s.counts.back()));
    at += n;
  }
  REQUIRE(at == t.size());
  Q35_OK(d.expert_cache(s.cache));
  s.replays = d.graph_replays();
  return s;
}

}  // namespace

TEST_CASE("decoder: host-resident experts give the all-resident logits bit for bit, any slot count" *
          test::needs_device()) {
  for (const char* name : test::q4km_moe_fixtures) {
    CAPTURE(name);
    const auto l = test::load_model(name);
    const io::model_hparams& h = l->model.hparams();
    const int E = int(h.n_experts);
    std::vector<int32_t> tokens = turn_tokens(h.n_vocab);
    const session want = run_session(l->model, cache_config(0), tokens);
    CHECK(want.cache.empty());  // all resident: no cache
    for (const int slots : {0, 1, 3, E - 1}) {
      for (const int rebalance : {0, 1}) {
        CAPTURE(slots);
        CAPTURE(rebalance);
        gen::device_model m;
        Q35_OK(m.load(l->file, l->bound, {}, slots));
        REQUIRE(m.experts() != nullptr);
        CHECK(m.experts()->slots() == slots);
        CHECK(m.weight_bytes() < l->model.weight_bytes());  // the experts are not on the device
        // the staged chunks' experts in windows of 5, 1, 3 experts or a whole layer
        gen::decoder_config cfg = cache_config(rebalance);
        cfg.expert_staging_window = slots == 0 ? 5 : slots == 1 ? 1 : slots == 3 ? 3 : E;
        CAPTURE(cfg.expert_staging_window);
        const session got = run_session(m, cfg, tokens);
        REQUIRE(got.logits.size() == want.logits.size());
        CHECK(std::memcmp(got.logits.data(), want.logits.data(), got.logits.size() * sizeof(float)) == 0);
        if (slots == 1) {
          // the decode steps above replayed their graph while promotions moved experts between slots
          // and host memory; issued directly, every launch gives the same bits
          cfg.use_graphs = false;
          const session eager = run_session(m, cfg, tokens);
          REQUIRE(eager.logits.size() == want.logits.size());
          CHECK(std::memcmp(eager.logits.data(), want.logits.data(), want.logits.size() * sizeof(float)) == 0);
          CHECK(eager.counts == got.counts);
          CHECK(got.replays == 8);  // the one-token feeds
          CHECK(eager.replays == 0);
          cfg.use_graphs = true;
        }
        CHECK(got.counts == want.counts);
        REQUIRE(got.cache.size() == got.counts.back().size());
        const uint64_t k = uint64_t(h.n_experts_used);
        for (size_t j = 0; j < got.cache.size(); ++j) {
          CAPTURE(j);
          const gen::expert_cache_stats& c = got.cache[j];
          // an independent count from the histograms: staged = the selections of the chunks of more
          // than 8 tokens; without promotions the slots hold experts 0 .. slots - 1 throughout
          // (and a staged chunk copies each expert it selected once, from host memory unless slotted)
          uint64_t staged = 0, decode = 0, resident = 0, staged_from_host = 0;
          for (size_t f = 0; f < std::size(feeds); ++f)
            for (int e = 0; e < E; ++e) {
              const uint64_t d = got.counts[f][j][size_t(e)] - (f ? got.counts[f - 1][j][size_t(e)] : 0);
              (feeds[f] > 8 ? staged : decode) += d;
              if (feeds[f] <= 8 && e < slots) resident += d;
              if (feeds[f] > 8 && e >= slots && d > 0) ++staged_from_host;
            }
          CHECK(staged == 22 * k);
          CHECK(staged + decode == uint64_t(tokens.size()) * k);
          CHECK(c.staged == staged);
          CHECK(c.hits + c.misses == decode);
          if (slots == 0) CHECK(c.hits == 0);
          if (rebalance == 0) {
            CHECK(c.promotions == 0);
            CHECK(c.hits == resident);
            CHECK(c.host_bytes == (c.misses + staged_from_host) * m.experts()->expert_bytes(j));
          } else if (slots > 0) {
            CHECK(c.promotions > 0);
          }
          CHECK(c.host_bytes >= c.misses * m.experts()->expert_bytes(j));
        }
      }
    }
  }
}

TEST_CASE("decoder: after every step the slots hold what the policy says" * test::needs_device()) {
  // Rebalancing every step with 3 slots, after each step: every slotted expert ranks at least as high as
  // every other one by the policy's key, computed here from the router's histograms. frequency: counts
  // halved at each step; lru: the step of the last selection, then that step's count. The logits stay
  // the all-resident ones.
  for (const char* name : test::q4km_moe_fixtures) {
    const auto l = test::load_model(name);
    const io::model_hparams& h = l->model.hparams();
    const int E = int(h.n_experts), S = 3;
    const std::vector<int32_t> tokens = turn_tokens(h.n_vocab);
    const session want = run_session(l->model, cache_config(0), tokens);
    for (const gen::expert_policy policy : {gen::expert_policy::frequency, gen::expert_policy::lru}) {
      const std::string fixture = name;
      CAPTURE(fixture);
      const std::string policy_name = gen::to_string(policy);
      CAPTURE(policy_name);
      gen::device_model m;
      Q35_OK(m.load(l->file, l->bound, {}, S));
      gen::decoder_config cfg = cache_config(1);
      cfg.expert_cache_policy = policy;
      gen::decoder d;
      Q35_OK(d.init(m, cfg));
      const size_t L = d.moe_layers().size();
      std::vector<std::vector<double>> decayed(L, std::vector<double>(size_t(E), 0.0));
      std::vector<std::vector<int64_t>> last_step(L, std::vector<int64_t>(size_t(E), -1));
      std::vector<std::vector<uint64_t>> last_count(L, std::vector<uint64_t>(size_t(E), 0));
      counts_t prev(L, std::vector<uint64_t>(size_t(E), 0));
      std::vector<float> logits;
      size_t at = 0;
      int64_t step = 0, violations = 0;
      // the experts a decode step reads from slots: those chosen after the step before (what was in flight
      // lands at the start of the step; at first, experts 0 .. S - 1)
      std::vector<std::vector<bool>> prev_chosen(L, std::vector<bool>(size_t(E), false));
      for (auto& c : prev_chosen) std::fill(c.begin(), c.begin() + S, true);
      std::vector<uint64_t> want_hits(L, 0);
      for (const size_t n : feeds) {
        std::vector<float> rows;
        Q35_OK(d.eval(std::span<const int32_t>(tokens).subspan(at, n), &rows));
        logits.insert(logits.end(), rows.begin(), rows.end());
        at += n;
        counts_t now;
        Q35_OK(d.expert_counts(now));
        for (size_t j = 0; j < L; ++j) {
          std::vector<std::pair<double, double>> key(static_cast<size_t>(E));  // (primary, secondary), higher first
          for (int e = 0; e < E; ++e) {
            const uint64_t delta = now[j][size_t(e)] - prev[j][size_t(e)];
            decayed[j][size_t(e)] = decayed[j][size_t(e)] / 2 + double(delta);
            if (delta) last_step[j][size_t(e)] = step, last_count[j][size_t(e)] = delta;
            key[size_t(e)] = policy == gen::expert_policy::lru
                                 ? std::pair{double(last_step[j][size_t(e)]), double(last_count[j][size_t(e)])}
                                 : std::pair{decayed[j][size_t(e)], 0.0};
          }
          // the policy's choice: the slots' experts and those on their way (landing at the next step)
          const gen::expert_store::layer& layer = m.experts()->layers()[j];
          std::vector<bool> chosen(size_t(E), false);
          for (int e = 0; e < E; ++e) chosen[size_t(e)] = layer.expert_slot[size_t(e)] >= 0;
          for (const auto& [e, s] : layer.in_flight) chosen[size_t(e)] = true;
          if (n <= size_t(launch::moe_decode_max_tokens))
            for (int e = 0; e < E; ++e)
              if (prev_chosen[j][size_t(e)]) want_hits[j] += now[j][size_t(e)] - prev[j][size_t(e)];
          prev_chosen[j] = chosen;
          for (int a = 0; a < E; ++a)
            for (int b = 0; b < E; ++b)
              if (chosen[size_t(a)] && !chosen[size_t(b)] && key[size_t(a)] < key[size_t(b)]) {
                ++violations;
                MESSAGE("step " << step << " layer " << j << ": slotted " << a << " (" << key[size_t(a)].first << ", "
                                << key[size_t(a)].second << ") below " << b << " (" << key[size_t(b)].first << ", "
                                << key[size_t(b)].second << ")");
              }
        }
        prev = std::move(now);
        ++step;
      }
      CHECK(violations == 0);
      std::vector<gen::expert_cache_stats> cache;
      Q35_OK(d.expert_cache(cache));
      uint64_t promotions = 0;
      for (const gen::expert_cache_stats& c : cache) promotions += c.promotions;
      REQUIRE(cache.size() == L);
      for (size_t j = 0; j < L; ++j) CHECK(cache[j].hits == want_hits[j]);
      CHECK(promotions > 0);
      REQUIRE(logits.size() == want.logits.size());
      CHECK(std::memcmp(logits.data(), want.logits.data(), logits.size() * sizeof(float)) == 0);
    }
  }
}

TEST_CASE("decoder: promotions still copying when the next steps run change no logit" * test::needs_device()) {
  // The side stream lags (sim): a promotion's copy completes only at the third query of its event, so
  // rebalancing every step, several steps run while copies are in flight (each layer waits for its batch
  // to land before it promotes again). Logits and counts stay the all-resident ones, and promotions land.
  sim::options o = sim::current_options();
  o.side_stream_lag = 2;
  sim::scoped_options scoped(o);
  const auto l = test::load_model("tiny_moe_q4km.gguf");
  const std::vector<int32_t> tokens = turn_tokens(l->model.hparams().n_vocab);
  const session want = run_session(l->model, cache_config(0), tokens);
  gen::device_model m;
  Q35_OK(m.load(l->file, l->bound, {}, 3));
  const session got = run_session(m, cache_config(1), tokens);
  REQUIRE(got.logits.size() == want.logits.size());
  CHECK(std::memcmp(got.logits.data(), want.logits.data(), got.logits.size() * sizeof(float)) == 0);
  CHECK(got.counts == want.counts);
  uint64_t promotions = 0, in_flight = 0;
  for (const gen::expert_cache_stats& c : got.cache) promotions += c.promotions;
  for (const gen::expert_store::layer& L : m.experts()->layers()) in_flight += L.in_flight.size();
  CHECK(promotions > in_flight);  // some landed
}

TEST_CASE("expert_store: the index names a slot only after its copy has landed" * test::needs_device()) {
  // The side stream lags (sim): its copies run only when an event on it is waited for or queried three
  // times, as late as a GPU could run them. A protocol that named the slot before the copy completed
  // would have the kernels read the evicted expert's bytes.
  sim::options o = sim::current_options();
  o.side_stream_lag = 3;
  sim::scoped_options scoped(o);
  const auto l = test::load_model("tiny_moe_q4km.gguf");
  const io::model_hparams& h = l->model.hparams();
  gen::device_model m;
  Q35_OK(m.load(l->file, l->bound, {}, 1));
  gen::expert_store& store = *m.experts();
  const size_t il = size_t(store.layers()[0].index);
  launch::ffn_shape s{int(h.n_embd),         int(h.ff_dim),        int(h.n_experts),
                      int(h.n_experts_used), int(h.expert_ff_dim), int(h.shared_ff_dim)};
  const std::vector<float> x = test::random_floats(size_t(h.n_embd), 77);
  auto d_x = test::to_device(x);
  device_buffer<uint8_t> ws;
  Q35_OK(ws.allocate(launch::moe_workspace_bytes(s, 1)));
  device_buffer<int> flag = test::to_device(std::vector<int>{0});
  // h = MoE(x) for one token (decode kernels) with the given weights; ids: the token's experts. Nothing
  // is freed between the polls below (a free waits for all streams' work, as cudaFree does).
  const std::vector<float> zeros(size_t(h.n_embd), 0.0f);
  auto d_h = test::to_device(zeros);
  auto run = [&](const launch::moe_weights& w, std::vector<int32_t>* ids = nullptr) {
    Q35_OK(copy(d_h.data(), zeros.data(), zeros.size() * 4, copy_kind::host_to_device));
    launch::ffn_layer_args a;
    a.shape = s, a.x = d_x.data(), a.h = d_h.data(), a.n_tokens = 1;
    a.workspace = ws.data(), a.workspace_bytes = ws.bytes(), a.error_flag = flag.data();
    Q35_OK(launch::moe_ffn(a, w));
    Q35_OK(synchronize());
    if (ids) {
      const launch::detail::moe_buffers b = launch::detail::moe_buffers_of(a);
      ids->resize(size_t(s.n_experts_used));
      Q35_OK(copy(ids->data(), b.ids, ids->size() * 4, copy_kind::device_to_host));
    }
    return test::to_host(d_h);
  };
  std::vector<int32_t> ids;
  const std::vector<float> want = run(l->model.layers()[il].moe, &ids);
  const launch::moe_weights& w = m.layers()[il].moe;
  REQUIRE(!w.maybe_index.empty());
  CHECK(run(w) == want);  // expert 0 in the slot, the token's experts wherever they are

  // promote one of the token's experts into the slot, evicting expert 0 (the slot still holds its
  // bytes: the copy is queued): until it lands, the token's experts are read from home
  const int e = ids[0] == 0 ? ids[1] : ids[0];
  const gen::expert_store::layer& L = store.layers()[0];
  const std::pair<int, int> move{e, 0};
  Q35_OK(store.promote(0, std::span(&move, 1), nullptr));
  CHECK(store.in_flight(0));
  CHECK(L.slot_expert[0] == -1);
  CHECK(L.expert_slot[size_t(e)] == -1);
  CHECK(std::memcmp(L.slot_gu, L.home_gu, size_t(L.gu_stride)) == 0);  // expert 0's bytes, not e's
  CHECK(store.promote(0, std::span(&move, 1), nullptr).code() == status_code::invalid_argument);  // one batch
  for (int poll = 0; poll < 3; ++poll) {
    bool done = true;
    Q35_OK(store.copies_done(0, done));
    CHECK_FALSE(done);
    CHECK(run(w) == want);
  }
  Q35_OK(store.land(0, nullptr));
  CHECK_FALSE(store.in_flight(0));
  CHECK(L.slot_expert[0] == e);
  CHECK(std::memcmp(L.slot_gu, L.home_gu + int64_t(e) * L.gu_stride, size_t(L.gu_stride)) == 0);
  CHECK(run(w) == want);
  // the kernels now read the slot (so the order above is what protects them): spoilt bytes show
  Q35_OK(fill_bytes(L.slot_gu, 0x7f, size_t(L.gu_stride)));
  CHECK(run(w) != want);
  CHECK(test::to_host(flag)[0] == 0);
  // bad moves are refused
  const std::pair<int, int> bad[] = {{int(h.n_experts), 0}, {0, 1}};
  CHECK(store.promote(0, std::span(bad, 1), nullptr).code() == status_code::invalid_argument);
  CHECK(store.promote(0, std::span(bad + 1, 1), nullptr).code() == status_code::invalid_argument);
  const std::pair<int, int> twice[] = {{1, 0}, {2, 0}};
  CHECK(store.promote(0, twice, nullptr).code() == status_code::invalid_argument);
  const size_t past = store.layers().size();  // a layer position that does not exist
  CHECK(store.promote(past, std::span(&move, 1), nullptr).code() == status_code::invalid_argument);
  bool done = false;
  CHECK(store.copies_done(past, done).code() == status_code::invalid_argument);
  CHECK(store.land(past, nullptr).code() == status_code::invalid_argument);
}

// The grouped path reads an expert in place exactly when the index names its slot: the in-place ranges
// the store gives the kernels cover the slots' indexes and no home index, for gate+up and down, before
// and after a promotion lands (a range that reached home would read host memory once per GEMM tile; one
// that missed a slot would copy it within device memory: both give the same logits, so only this
// shows them).
TEST_CASE("expert_store: the in-place ranges cover the slots and nothing else" * test::needs_device()) {
  const auto l = test::load_model("tiny_moe_q4km.gguf");
  const int E = int(l->model.hparams().n_experts);
  for (const int slots : {0, 1, 3, E - 1}) {
    CAPTURE(slots);
    gen::device_model m;
    Q35_OK(m.load(l->file, l->bound, {}, slots));
    gen::expert_store& store = *m.experts();
    const auto check = [&] {
      for (size_t j = 0; j < store.layers().size(); ++j) {
        const gen::expert_store::layer& L = store.layers()[j];
        const launch::moe_expert_index& ix = m.layers()[size_t(L.index)].moe.maybe_index;
        CAPTURE(L.index);
        CHECK(ix.in_place_gu_end - ix.in_place_gu_begin == slots);
        CHECK(ix.in_place_dn_end - ix.in_place_dn_begin == slots);
        int in_slots = 0;
        for (int e = 0; e < E; ++e) {
          const int32_t gu = L.index_gu_host[size_t(e)], dn = L.index_dn_host[size_t(e)];
          const bool slotted = L.expert_slot[size_t(e)] >= 0;
          in_slots += slotted;
          CHECK((gu >= ix.in_place_gu_begin && gu < ix.in_place_gu_end) == slotted);
          CHECK((dn >= ix.in_place_dn_begin && dn < ix.in_place_dn_end) == slotted);
        }
        CHECK(in_slots == slots);
      }
    };
    check();
    if (slots == 0) continue;
    const std::pair<int, int> move{E - 1, 0};  // the last expert into slot 0 (it held expert 0)
    Q35_OK(store.promote(0, std::span(&move, 1), nullptr));
    Q35_OK(store.land(0, nullptr));
    CHECK(store.layers()[0].expert_slot[size_t(E - 1)] == 0);
    check();
  }
}

TEST_CASE("device_model: bad expert slot counts are refused" * test::needs_device()) {
  const auto l = test::load_model("tiny_moe_q4km.gguf");
  gen::device_model m;
  Q35_OK(m.load(l->file, l->bound, {}, -1));  // -1: everything on the device
  CHECK(m.experts() == nullptr);
  Q35_OK(m.load(l->file, l->bound, {}, int(l->model.hparams().n_experts)));
  CHECK(m.experts() == nullptr);  // as many slots as experts: all resident
  const auto dense = test::load_model("tiny_dense_q4km.gguf");
  Q35_OK(m.load(dense->file, dense->bound, {}, 0));
  CHECK(m.experts() == nullptr);  // no MoE layers: nothing to keep in host memory
}
