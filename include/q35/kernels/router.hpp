// router_kernel: hidden state -> router logits (GEMV) -> scores -> top-k -> renormalised weights,
// plus the shared-expert gate, in one launch.
//
// Thread-to-data mapping. Block (tile, chunk) computes the logits of Policy::tokens_per_block tokens
// for Policy::rows_per_block weight rows and stores them in the workspace: Policy::split_k warps
// share a row (each a slice of its columns, combined through shared memory in a fixed order), the
// block's n_warps / split_k warp groups take rows g, g + groups, ...; row n_experts is the
// shared-expert gate. The last block of a token tile to finish (an atomic counter per tile, which
// it resets to 0) then routes the tile's tokens, one warp per token.
#pragma once

#include <algorithm>
#include <cmath>
#include <concepts>
#include <cstdint>

#include "q35/arch/atomic.hpp"
#include "q35/arch/fence.hpp"
#include "q35/arch/math.hpp"
#include "q35/arch/thread.hpp"
#include "q35/core/config.hpp"
#include "q35/core/dim3.hpp"
#include "q35/core/vec.hpp"
#include "q35/kernels/router_policy.hpp"
#include "q35/ops/router.hpp"
#include "q35/ops/router_gemv.hpp"

namespace q35::kernels {

// What the routing math needs from a model: experts per layer and experts per token.
template <class T>
concept router_traits = requires {
  { T::n_experts } -> std::convertible_to<int>;
  { T::n_experts_used } -> std::convertible_to<int>;
}
&&(T::n_experts >= 1) && (T::n_experts <= ops::router_max_experts) && (T::n_experts_used >= 1) &&
    (T::n_experts_used <= ops::router_max_k) && (T::n_experts_used <= T::n_experts);

// Traits bound the shape: Traits::n_experts is the largest expert count an instance serves (it sets
// the logits each lane holds); the actual n_experts (<= it) and k (<= Traits::n_experts_used) are
// run-time params, so one instance per bucket serves every file.
template <router_traits Traits, class WeightT = float, class Policy = router_policy_decode>
struct router_kernel {
  static constexpr int max_experts = Traits::n_experts;
  static constexpr int max_k = Traits::n_experts_used;
  static constexpr int threads = Policy::threads;
  // ptxas trimmed both policies to an occupancy step and spilled 4-20 bytes (nvcc 13.0) without a
  // minimum; with 2 blocks per SM it keeps every value in registers (56 on the batch policy, ~118 on
  // the decode policy with quantized weights).
  static constexpr int min_blocks_per_sm = 2;
  static constexpr int n_warps = threads / warp_size;
  static constexpr int tokens_per_block = Policy::tokens_per_block;
  static constexpr int rows_per_block = Policy::rows_per_block;
  static constexpr int split_k = Policy::split_k;
  static constexpr int row_groups = n_warps / split_k;  // rows computed at once
  static constexpr int items_per_lane = ceil_div(max_experts, warp_size);

  struct params {
    const float* x;                 // [n_tokens, n_embd], row-major
    const WeightT* w_router;        // [n_experts, n_embd], row-major (GGUF ffn_gate_inp, ne = [n_embd, n_experts])
    const WeightT* maybe_w_shexp;   // [n_embd] (ffn_gate_inp_shexp), or null: no shared-expert gate
    int32_t* ids;                   // [n_tokens, k] (k = n_experts_used)
    float* weights;                 // [n_tokens, k]
    int32_t* maybe_k_used;          // [n_tokens], or null
    float* maybe_shexp_gate;        // [n_tokens]: sigmoid(w_shexp . x); written when maybe_w_shexp is set
    uint64_t* maybe_expert_counts;  // [n_experts], += 1 per selection, or null
    float* logits;                  // workspace [n_tokens, n_experts + 1]: logits, then the shared gate's
    uint32_t* tile_counters;        // workspace [ceil(n_tokens / tokens_per_block)], 0 between launches
    int64_t n_tokens;
    int n_embd;
    int n_experts;  // 1..max_experts
    int k;          // experts per token, 1..min(max_k, n_experts)
    ops::route_options route;
  };
  struct shared_storage {
    float partial[split_k > 1 ? n_warps : 1][tokens_per_block];  // [warp, token]: split-k partial dots
    int is_last;  // this block is the last of its token tile to finish its logits
  };

  static int64_t n_tiles(int64_t n_tokens) { return ceil_div<int64_t>(n_tokens, tokens_per_block); }
  static Q35_HOST_DEVICE int n_rows(const params& p) { return p.n_experts + (p.maybe_w_shexp ? 1 : 0); }
  static dim3 grid(const params& p) {
    return dim3(unsigned(n_tiles(p.n_tokens)), unsigned(ceil_div(n_rows(p), rows_per_block)));
  }

  Q35_DEVICE void operator()(const params& p, shared_storage& s) const {
    const int64_t tile = int64_t(arch::block_idx().x);
    const int chunk = int(arch::block_idx().y);
    const int64_t t0 = tile * tokens_per_block;
    const int n_here = int(std::min<int64_t>(tokens_per_block, p.n_tokens - t0));
    const int warp = arch::warp_id(), lane = arch::lane_id();
    const int n_experts = p.n_experts, k = p.k;
    const int64_t logits_stride = n_experts + 1;  // workspace row: n_experts logits, then the shared gate's

    // Phase 1: logits[t, row] = W[row] . x[t]  for this block's rows and tokens.
    const int group = warp / split_k, slice = warp % split_k;
    for (int i = 0; i < rows_per_block / row_groups; ++i) {  // the same trip count for the whole block
      const int row = chunk * rows_per_block + i * row_groups + group;
      const bool valid = row < n_rows(p);  // the same for the warps of a group
      float dot[tokens_per_block];
      if (valid) {
        const WeightT* w = row < n_experts ? ops::weight_row<WeightT>::row(p.w_router, row, p.n_embd) : p.maybe_w_shexp;
        ops::warp_dot_tokens<tokens_per_block, Policy::unroll>(w, p.x + t0 * p.n_embd, p.n_embd, n_here, slice, split_k,
                                                               dot);
      }
      if constexpr (split_k == 1) {
        Q35_UNROLL
        for (int t = 0; t < tokens_per_block; ++t)
          if (valid && t < n_here && lane == t) p.logits[(t0 + t) * logits_stride + row] = dot[t];
      } else {
        Q35_UNROLL
        for (int t = 0; t < tokens_per_block; ++t)
          if (valid && lane == t) s.partial[warp][t] = dot[t];
        arch::sync_block();
        // logit = sum over slices 0 .. split_k - 1 of the partial dots, in that order
        Q35_UNROLL
        for (int t = 0; t < tokens_per_block; ++t) {
          if (valid && slice == 0 && t < n_here && lane == t) {
            float sum = 0.0f;
            Q35_UNROLL
            for (int q = 0; q < split_k; ++q) sum += s.partial[warp + q][t];
            p.logits[(t0 + t) * logits_stride + row] = sum;
          }
        }
        arch::sync_block();  // partial is rewritten by the next row
      }
    }

    // Publish the logits; the last block of the tile to arrive routes its tokens.
    arch::thread_fence();
    arch::sync_block();
    if (arch::thread_rank() == 0) {
      const uint32_t arrived = arch::atomic_add(p.tile_counters + tile, 1u);
      s.is_last = arrived + 1 == arch::grid_dim().y;
    }
    arch::sync_block();
    if (!s.is_last) return;  // the whole block
    arch::thread_fence();
    if (arch::thread_rank() == 0) arch::atomic_exchange(p.tile_counters + tile, 0u);  // ready for the next launch

    // Phase 2: one warp per token of the tile.
    for (int t = warp; t < n_here; t += n_warps) {
      const int64_t token = t0 + t;
      const float* row = p.logits + token * logits_stride;
      float l[items_per_lane];
      Q35_UNROLL
      for (int j = 0; j < items_per_lane; ++j) {
        const int e = warp::strided_index(lane, j);
        l[j] = e < n_experts ? arch::load_coherent(row + e) : NAN;
      }
      const ops::routed r = ops::route_token(l, n_experts, k, p.route, p.maybe_expert_counts);
      if (lane < k) {
        p.ids[token * k + lane] = r.id;
        p.weights[token * k + lane] = r.weight;
      }
      // One lane-0 region: separate `lane == 0 && ...` branches made ptxas spill a convergence
      // barrier register (4-byte spills on some instantiations).
      if (lane == 0) {
        if (p.maybe_k_used) p.maybe_k_used[token] = r.k_used;
        // gate = sigmoid(w_shexp . x)
        if (p.maybe_w_shexp) p.maybe_shexp_gate[token] = arch::sigmoid(arch::load_coherent(row + n_experts));
      }
    }
  }
};

}  // namespace q35::kernels
