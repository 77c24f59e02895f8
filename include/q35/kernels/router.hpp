// router_kernel: hidden state -> router logits (GEMV) -> scores -> top-k -> renormalised weights,
// plus the shared-expert gate, in one launch.
//
// Thread-to-data mapping. Block (tile, chunk) computes the logits of Policy::tokens_per_block tokens
// for Policy::rows_per_block weight rows with the GEMV engine (ops::gemv_engine, float path) and
// stores them in the workspace: Policy::split_k warps share a row (each a slice of its columns,
// combined through shared memory in a fixed order), the
// block's n_warps / split_k warp groups take rows g, g + groups, ...; row n_experts is the
// shared-expert gate. The last block of a token tile to finish (an atomic counter per tile, which
// it resets to 0) then routes the tile's tokens, one warp per token.
#pragma once

#include <algorithm>
#include <cmath>
#include <concepts>
#include <cstdint>
#include <type_traits>

#include "q35/arch/atomic.hpp"
#include "q35/arch/fence.hpp"
#include "q35/arch/math.hpp"
#include "q35/arch/thread.hpp"
#include "q35/core/config.hpp"
#include "q35/core/dim3.hpp"
#include "q35/core/vec.hpp"
#include "q35/kernels/router_policy.hpp"
#include "q35/ops/gemv_engine.hpp"
#include "q35/ops/router.hpp"
#include "q35/quant/format_list.hpp"

namespace q35::kernels {

// What the routing math needs from a model: experts per layer and experts per token.
template <class T>
concept router_traits = requires {
  { T::n_experts } -> std::convertible_to<int>;
  { T::n_experts_used } -> std::convertible_to<int>;
}
&&(T::n_experts >= 1) && (T::n_experts <= ops::router_max_experts) && (T::n_experts_used >= 1) &&
    (T::n_experts_used <= ops::router_max_k) && (T::n_experts_used <= T::n_experts);

// The weight format of router weights stored as T: f32/f16/bf16 for float/half/bf16, else the GGUF
// format whose block T is.
template <class T, class List>
struct format_with_block;
template <class T, class F, class... Rest>
struct format_with_block<T, quant::format_list<F, Rest...>>
    : std::conditional_t<std::is_same_v<typename F::block, T>, std::type_identity<F>,
                         format_with_block<T, quant::format_list<Rest...>>> {};
template <class T>
struct router_format : format_with_block<T, quant::supported_formats> {};
template <>
struct router_format<float> : std::type_identity<quant::f32_format> {};
template <>
struct router_format<half> : std::type_identity<quant::f16_format> {};
template <>
struct router_format<bf16> : std::type_identity<quant::bf16_format> {};
template <class T>
using router_format_t = typename router_format<T>::type;

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
  using format = router_format_t<WeightT>;
  // fp32 activations (the float path: the logits decide the ranking, so no activation rounding)
  using engine = ops::gemv_engine<format, tokens_per_block, 1, false, Policy::unroll>;

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
    typename engine::template warp_partials<(split_k > 1 ? n_warps : 1)> partials;  // split-k partial dots
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

    // Phase 1: logits[t, row] = W[row] . x[t]  for this block's rows and tokens, through the GEMV
    // engine: the 32 lanes of each of a row's split_k warps are its workers (unit `slice * 32 + lane`,
    // then every 32 split_k units).
    const int group = warp / split_k, slice = warp % split_k;
    const int64_t row_bytes = format::row_bytes(p.n_embd);
    ops::gemv_input in{};
    in.x = p.x + t0 * p.n_embd;
    in.cols = p.n_embd;
    for (int i = 0; i < rows_per_block / row_groups; ++i) {  // the same trip count for the whole block
      const int row = chunk * rows_per_block + i * row_groups + group;
      const bool valid = row < n_rows(p);  // the same for the warps of a group
      float acc[1][tokens_per_block] = {};
      if (valid) {
        const auto* w = reinterpret_cast<const uint8_t*>(row < n_experts ? p.w_router : p.maybe_w_shexp) +
                        (row < n_experts ? row * row_bytes : 0);
        engine::accumulate(w, 0, in, slice * warp_size + lane, warp_size * split_k, n_here, acc);
      }
      engine::reduce_lanes(warp_size, acc);
      if constexpr (split_k > 1) engine::reduce_warps(split_k, s.partials, acc);  // slice order
      Q35_UNROLL
      for (int t = 0; t < tokens_per_block; ++t)
        if (valid && slice == 0 && t < n_here && lane == t) p.logits[(t0 + t) * logits_stride + row] = acc[0][t];
      if constexpr (split_k > 1) arch::sync_block();  // the partials are rewritten by the next row
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
