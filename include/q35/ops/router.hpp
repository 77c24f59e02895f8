// ops::route_token: one warp turns one token's router logits into expert ids and weights
// (scoring, top-k, optional entropy-adaptive k, renormalisation): the router's epilogue.
#pragma once

#include <cmath>
#include <cstdint>

#include "q35/arch/atomic.hpp"
#include "q35/arch/math.hpp"
#include "q35/arch/thread.hpp"
#include "q35/core/config.hpp"
#include "q35/warp/reduce.hpp"
#include "q35/warp/top_k.hpp"

namespace q35::ops {

// Largest expert count and k the router supports (16 logits and one slot per lane).
inline constexpr int router_max_experts = 512;
inline constexpr int router_max_k = 16;

// Floor of the renormalisation denominator (llama.cpp's clamp, the f16 normal minimum).
inline constexpr float router_renorm_min_sum = 6.1e-5f;

enum class router_score {
  softmax,  // p = softmax over all experts (Qwen3.5)
  sigmoid,  // p = sigmoid(logit), per expert
};

// Adaptive top-k (opt-in): k = k_values[i] for the first i with entropy < entropy_below[i], else
// k_values[2]. Entropy in nats over the softmax distribution of all experts. It departs from the
// trained routing (always n_experts_used experts): fewer experts per token, faster, lower quality.
struct adaptive_k_options {
  float entropy_below[2] = {1.2f, 2.5f};
  int k_values[3] = {1, 2, 3};
};

struct route_options {
  router_score score = router_score::softmax;
  bool renormalize = true;  // w = p / max(sum of the selected p, 6.1e-5); Qwen3.5 always does
  bool adaptive = false;    // adaptive top-k (softmax scoring only)
  adaptive_k_options adaptive_k;
};

// The id of a slot past a token's k_used (adaptive top-k); its weight is 0. The expert kernels
// (moe_ffn) skip such slots, and treat any other id outside [0, n_experts) as an error.
inline constexpr int32_t router_empty_slot = -1;

// What lane r of the warp holds after route_token.
struct routed {
  int id;        // rank-r expert for r < k_used, else router_empty_slot
  float weight;  // its weight for r < k_used, else 0
  int k_used;    // experts selected for this token (the same on every lane)
};

// Routes one token. logits: item j of lane l is expert l + 32 j (warp::strided_index); items at
// index >= n_experts are ignored. k: experts to select (the maximum, when adaptive).
//
// Non-finite logits, defined so that ids are always distinct, in range and weights never NaN:
//   ranking  NaN ranks after every number (-inf included), ties go to the lower index;
//   softmax  a NaN logit counts as -inf; with m = max logit, p_i = exp(l_i - m) / sum when m is
//            finite; when m = +inf the experts at +inf share p equally (the limit of softmax);
//            when every logit is -inf or NaN, p is uniform over all experts.
//   sigmoid  sigmoid(NaN) counts as sigmoid(-inf) = 0.
// If all selected p are 0 the weights are 0 (the sum is clamped to 6.1e-5).
template <int ItemsPerLane>
Q35_DEVICE routed route_token(const float (&logits)[ItemsPerLane], int n_experts, int k, const route_options& opt,
                              uint64_t* maybe_expert_counts /* [n_experts], += 1 per selection */) {
  const int lane = arch::lane_id();

  // m = max over experts of s_i, s_i = (l_i is NaN ? -inf : l_i)  (fmaxf drops NaN)
  float m = -INFINITY;
  Q35_UNROLL
  for (int j = 0; j < ItemsPerLane; ++j)
    if (warp::strided_index(lane, j) < n_experts) m = fmaxf(m, logits[j]);
  m = warp::reduce_max(m);
  const bool m_infinite = m == INFINITY || m == -INFINITY;
  const bool softmax = opt.score == router_score::softmax;

  // e_i = exp(s_i - m), or [s_i == m] when m is infinite
  auto unnormalised = [&](float l) {
    const float s = l != l ? -INFINITY : l;
    return m_infinite ? (s == m ? 1.0f : 0.0f) : arch::fast_exp(s - m);
  };
  // sum = sum_i e_i  (>= 1: the maximum contributes 1)
  float sum = 0.0f;
  if (softmax) {
    Q35_UNROLL
    for (int j = 0; j < ItemsPerLane; ++j)
      if (warp::strided_index(lane, j) < n_experts) sum += unnormalised(logits[j]);
    sum = warp::reduce_sum(sum);
  }
  const float inv_sum = 1.0f / sum;
  auto score = [&](float l) { return softmax ? unnormalised(l) * inv_sum : arch::sigmoid(l != l ? -INFINITY : l); };

  int k_used = k;
  if (opt.adaptive) {
    // H = -sum_i p_i ln p_i = ln(sum) - sum_i p_i (s_i - m)  with p_i = e_i / sum; terms with
    // e_i = 0 are 0, and an infinite m leaves only equal maxima: H = ln(number of them) = ln(sum).
    // (One log per token rather than one per expert.)
    float t = 0.0f;
    Q35_UNROLL
    for (int j = 0; j < ItemsPerLane; ++j) {
      if (m_infinite || warp::strided_index(lane, j) >= n_experts) continue;
      const float e = unnormalised(logits[j]);
      if (e > 0.0f) t += e * (logits[j] - m);
    }
    t = warp::reduce_sum(t);
    const float h = logf(sum) - t * inv_sum;
    const adaptive_k_options& a = opt.adaptive_k;
    k_used = h < a.entropy_below[0] ? a.k_values[0] : h < a.entropy_below[1] ? a.k_values[1] : a.k_values[2];
  }

  const warp::arg_value pick = warp::top_k(logits, n_experts, k_used);
  const bool selected = lane < k_used;
  const float p = selected ? score(pick.value) : 0.0f;
  float denom = 1.0f;
  if (opt.renormalize) {
    // w_r = p_r / max(sum_{r < k_used} p_r, 6.1e-5)
    denom = fmaxf(warp::reduce_sum(p), router_renorm_min_sum);
  }
  if (selected && maybe_expert_counts) arch::atomic_add(maybe_expert_counts + pick.index, uint64_t(1));
  return routed{selected ? pick.index : -1, selected ? p / denom : 0.0f, k_used};
}

}  // namespace q35::ops
