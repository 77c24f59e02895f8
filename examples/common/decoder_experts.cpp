// The decoder's expert statistics and the expert cache of host-resident models: the router's counts
// folded into the cache's record after steps, and the rebalance that promotes the policy's choice of
// experts into the device slots (the protocol is expert_store's).
#include <algorithm>

#include "decoder.hpp"
#include "expert_report.hpp"

namespace q35::gen {

status decoder::expert_counts(std::vector<std::vector<uint64_t>>& out) const {
  if (!expert_load_)
    return error(status_code::invalid_argument, m_ && moe_layers_.empty()
                                                    ? "decoder::expert_counts: the model has no MoE layers"
                                                    : "decoder::expert_counts: expert statistics are off "
                                                      "(decoder_config::expert_stats)");
  return expert_load_->read_all(out, stream());  // one copy, one wait (settled at every rebalance)
}

bool decoder::step_stages() const {
  for (const group& g : groups_)
    if (moe_grouped(g)) return true;
  return false;
}

status decoder::settle_experts(bool staged, bool rebalance) {
  std::vector<std::vector<uint64_t>> now;
  Q35_TRY(expert_counts(now));
  for (size_t j = 0; j < now.size(); ++j) {
    std::vector<uint64_t> d(now[j].size());
    for (size_t e = 0; e < d.size(); ++e) d[e] = now[j][e] - expert_seen_[j][e];
    expert_cache_stats& c = cache_stats_[j];
    const uint64_t bytes = experts_->expert_bytes(j);
    const std::vector<int>& slot = experts_->layers()[j].expert_slot;
    if (staged) {
      // one staging call (a step's layer call of more than 8 rows) copied each expert it selected once:
      // from its slot within device memory, else from host memory
      for (size_t e = 0; e < d.size(); ++e) {
        c.staged += d[e];
        if (d[e] && slot[e] < 0) c.host_bytes += bytes;
      }
    } else {
      for (size_t e = 0; e < d.size(); ++e) {
        (slot[e] >= 0 ? c.hits : c.misses) += d[e];
        if (slot[e] < 0) c.host_bytes += d[e] * bytes;
      }
    }
    for (size_t e = 0; e < d.size(); ++e) expert_pending_[j][e] += d[e];
  }
  expert_seen_ = std::move(now);
  if (!rebalance) return status::success();
  // the policy's key from the selections since the previous rebalance (a settle without a rebalance, before
  // a staging step or when the record is read, changes no key)
  ++expert_looks_;
  for (size_t j = 0; j < expert_score_.size(); ++j) {
    std::vector<double>& score = expert_score_[j];
    std::vector<uint64_t>& d = expert_pending_[j];
    if (cfg_.expert_cache_policy == expert_policy::lru) {
      // the rebalance of the last selection, then (a fraction below 1) the share of that interval's selections
      uint64_t total = 0;
      for (const uint64_t v : d) total += v;
      for (size_t e = 0; e < d.size(); ++e)
        if (d[e]) score[e] = double(expert_looks_) + double(d[e]) / double(total + 1);
    } else {
      for (size_t e = 0; e < d.size(); ++e) score[e] = score[e] / 2 + double(d[e]);
    }
    std::fill(d.begin(), d.end(), 0);
  }
  // the slots' experts: the layer's `slots` highest scores (residents first on ties: no churn); a layer
  // whose previous promotions are still in flight waits for the next rebalance
  for (size_t j = 0; j < expert_score_.size(); ++j) {
    const int S = experts_->slots(j);
    if (S == 0 || experts_->in_flight(j)) continue;
    const std::vector<double>& score = expert_score_[j];
    const expert_store::layer& L = experts_->layers()[j];
    std::vector<int> order(score.size());
    for (size_t e = 0; e < order.size(); ++e) order[e] = int(e);
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
      if (score[size_t(a)] != score[size_t(b)]) return score[size_t(a)] > score[size_t(b)];
      return (L.expert_slot[size_t(a)] >= 0) > (L.expert_slot[size_t(b)] >= 0);
    });
    std::vector<bool> wanted(score.size(), false), taken(size_t(S), false);
    for (int i = 0; i < S; ++i) wanted[size_t(order[size_t(i)])] = true;
    std::vector<std::pair<int, int>> moves;
    for (int i = 0; i < S; ++i) {
      const int e = order[size_t(i)];
      if (L.expert_slot[size_t(e)] >= 0) continue;
      // a slot whose expert is not wanted (one exists: fewer than S wanted ones are resident)
      int s = 0;
      while (taken[size_t(s)] || (L.slot_expert[size_t(s)] >= 0 && wanted[size_t(L.slot_expert[size_t(s)])])) ++s;
      taken[size_t(s)] = true;
      moves.emplace_back(e, s);
    }
    Q35_TRY(experts_->promote(j, moves, stream()));
    cache_stats_[j].promotions += moves.size();
  }
  return status::success();
}

status decoder::land_promotions() {
  std::vector<size_t> done;
  for (size_t j = 0; experts_ && j < experts_->layers().size(); ++j) {
    bool d = false;
    Q35_TRY(experts_->copies_done(j, d));
    if (experts_->in_flight(j) && d) done.push_back(j);
  }
  if (done.empty()) return status::success();
  // the selections so far were read through the index these promotions change: into the record first
  Q35_TRY(settle_experts(false, false));
  for (const size_t j : done) Q35_TRY(experts_->land(j, stream()));
  return status::success();
}

status decoder::expert_cache(std::vector<expert_cache_stats>& out) {
  out.clear();
  if (!experts_) return status::success();
  Q35_TRY(settle_experts(false, false));
  out = cache_stats_;
  return status::success();
}

status fill_expert_report(decoder& d, expert_report& r) {
  r.layers = d.moe_layers();
  Q35_TRY(d.expert_counts(r.counts));
  std::vector<expert_cache_stats> cache;
  Q35_TRY(d.expert_cache(cache));
  const std::vector<int> slots = d.expert_layer_slots();
  r.cache.clear();
  for (size_t j = 0; j < cache.size(); ++j) {
    const expert_cache_stats& c = cache[j];
    r.cache.push_back({c.hits, c.misses, c.staged, c.host_bytes, c.promotions, j < slots.size() ? slots[j] : 0});
  }
  if (!cache.empty()) {
    r.cache_slots = d.expert_slots();
    r.cache_policy = d.expert_cache_policy() == expert_policy::lru
                         ? "lru: the slots hold the most recently selected experts (within a rebalance "
                           "interval, the most selected first), "
                         : "frequency: the slots hold the experts with the most selections (halved at each "
                           "rebalance), ";
    r.cache_policy += d.expert_rebalance_steps() > 0
                          ? "rebalanced every " + std::to_string(d.expert_rebalance_steps()) + " steps"
                          : "never rebalanced (the slots keep their first experts)";
  }
  return status::success();
}

}  // namespace q35::gen
