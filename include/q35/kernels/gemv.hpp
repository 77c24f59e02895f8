// gemv_kernel: y = W x for 1-8 tokens (decode), W in any supported GGUF format, fp32 accumulation,
// with the epilogues the decoder needs (store, residual add, SwiGLU of gate and up) and an
// expert-indexed mode (MoE: each pair reads the expert matrix its id names). Its loop is
// ops::gemv_engine, the weight-streaming engine of every decode product (the router's logits too).
//
// Thread mapping: a row is split into work items (integer path: ops::dot16<Format>::item_bytes of
// whole blocks, e.g. one Q4_K block; float path: one 16-element unit). A group of `lanes` = 2^k
// consecutive lanes of a warp owns one row (lanes = the largest power of two <= 32 that divides the
// row's item count, so every lane gets the same number of items), and 2^log2_split warps of the block
// share the same rows (split-K, chosen by launch::gemv where a matrix has too few rows to fill the
// GPU); each worker takes its items straight from global memory into registers (each integer item is
// >= 9 independent 16-byte loads issued before any is used), an xor-shuffle tree over the lanes and
// then the slices in order through shared memory finish the row: no barrier in the loop, one after
// it when split. grid.y is the group (expert mode: one (token, slot) pair per group).
//
// Integer path (Act16): activations arrive as 16-bit integers with one fp32 scale per 32 elements
// (quant/act16.hpp, filled by act16_quantize_kernel), products are summed exactly by dp2a and
// scaled in fp32. Float path: fp32 activations and the bit-exact float dequantization
// (quant::dequant_row_unit), for the plain float formats and for shapes the integer items do not tile.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "q35/arch/atomic.hpp"
#include "q35/arch/shuffle.hpp"
#include "q35/arch/thread.hpp"
#include "q35/arch/vector_load.hpp"
#include "q35/core/dim3.hpp"
#include "q35/ops/epilogue.hpp"
#include "q35/ops/gemv_engine.hpp"
#include "q35/ops/gemv_policy.hpp"
#include "q35/quant/act16.hpp"
#include "q35/quant/formats.hpp"

namespace q35::kernels {

using gemv_epilogue = ops::epilogue;

// LoadBytes: the width of the integer path's loads, i.e. its item (ops::dot16<Format, LoadBytes>): 16;
// Q6_K rows that its 16-byte item does not tile take 8 (rows of 1024 n) or 4 (512 n).
template <quant::weight_format Format, class Policy, int NTokens, gemv_epilogue Epilogue, bool Indexed, bool Act16,
          int LoadBytes = 16>
struct gemv_kernel {
  using block = typename Format::block;
  static constexpr int n_mats = ops::epilogue_mats<Epilogue>;
  using engine = ops::gemv_engine<Format, NTokens, n_mats, Act16, 1, LoadBytes>;
  static constexpr int threads = Policy::threads;
  // Registers (launch::kernel_entry): 1-token instances keep ptxas's own choice (36-106 registers on
  // sm_90 and no local memory, docs/benchmarks.md). Left to itself, ptxas trimmed the multi-token
  // and Q5_K instances to an occupancy step and spilled 4-24 bytes (nvcc 13.0: sm_80 q4_K 4-token,
  // q5_K expert, q5_K/q8_0 8-token swiglu; sm_90 float-path 8-token), so those get a minimum of
  // blocks per SM instead: 2 (multi-token: up to 255 registers) or 4 (Q5_K 1 token: up to 128).
  static constexpr int min_blocks_per_sm = NTokens > 1 ? 2 : std::is_same_v<Format, quant::q5_k_format> ? 4 : 0;
  static constexpr int n_warps = threads / warp_size;
  static_assert(threads % warp_size == 0, "whole warps");
  static_assert(NTokens >= 1 && NTokens <= 8 && (!Indexed || NTokens == 1), "expert mode: one token per pair");
  static_assert(!Act16 || ops::has_dot16<Format>, "the integer path needs ops::dot16<Format>");

  // Elements of one work item.
  static constexpr int item_elems = engine::item_elems;
  // Largest log2 of the warps that may share a row (split-K): all of the block's.
  static constexpr int max_log2_split = std::countr_zero(unsigned(n_warps));

  struct params {
    const block* w;           // expert e's rows start expert_stride_bytes * e after w (n_experts = 1 unless Indexed)
    const block* maybe_w_up;  // the up matrix of swiglu (w is the gate; same shape and expert stride), else null
    const float* x;           // float path: [n_x_rows][cols] row-major, 16-byte aligned
    quant::act16_view x16;    // integer path: the same rows quantized (quant/act16.hpp layout)
    float* y;                 // [n_groups * NTokens][rows] row-major (plain: [n_tokens][rows])
    int64_t rows, cols;
    int n_tokens;    // plain: tokens sharing the weight pass, 1..NTokens
    int n_groups;    // plain: 1; expert mode: pairs (token, slot)
    int log2_lanes;  // lanes per row = 2^log2_lanes (<= 5), dividing cols / item_elems
    int log2_split;  // warps per row = 2^log2_split (<= max_log2_split): split-K across warps
    // Expert mode only:
    const int32_t* maybe_expert_ids;  // [n_groups], device-resident; out-of-range ids set *maybe_error_flag
    int32_t n_experts;
    int64_t expert_stride_bytes;  // bytes from expert e's first row to expert e + 1's (w and maybe_w_up alike)
    int x_group_div;              // group g reads x row g / x_group_div (top-k slots of one token share x)
    int* maybe_error_flag;        // set to 1 by a block whose expert id is out of range
  };
  struct shared_storage {
    typename engine::template warp_partials<n_warps> partials;  // split-K partial sums
  };

  // Lanes per row for a row of `cols` elements: the largest power of two <= 32 dividing its items.
  static int log2_lanes_for(int64_t cols) {
    const int64_t items = cols / item_elems;
    int k = 0;
    while (k < 5 && items % (int64_t(2) << k) == 0) ++k;
    return k;
  }
  static int64_t rows_per_block(const params& p) {
    return int64_t(n_warps >> p.log2_split) * (warp_size >> p.log2_lanes);
  }
  static dim3 grid(const params& p) {
    return dim3(unsigned(ceil_div<int64_t>(p.rows, rows_per_block(p))), unsigned(p.n_groups));
  }

  // Thread mapping: warp w of the block is slice w % 2^log2_split of row group w / 2^log2_split; lane
  // l of a warp is worker l % lanes of row l / lanes of its group. Worker `sub` of slice s takes
  // items s * lanes + sub, + lanes * 2^log2_split, ... of its row.
  Q35_DEVICE void operator()(const params& p, shared_storage& s) const {
    const int g = int(arch::block_idx().y);
    const int lane = arch::lane_id(), warp = arch::warp_id();
    const int lanes = 1 << p.log2_lanes, split = 1 << p.log2_split;
    const int sub = lane & (lanes - 1);  // this lane's place in its row's group
    const int slice = warp & (split - 1);
    const int64_t row = (int64_t(arch::block_idx().x) * (n_warps >> p.log2_split) + (warp >> p.log2_split)) *
                            (warp_size >> p.log2_lanes) +
                        (lane >> p.log2_lanes);
    float* y = p.y + int64_t(g) * NTokens * p.rows;
    int64_t expert = 0, x_row = 0;
    if constexpr (Indexed) {
      expert = p.maybe_expert_ids[g];
      x_row = g / p.x_group_div;
      if (expert < 0 || expert >= p.n_experts) {  // device-side guard: flag it, poison this pair's rows
        if (arch::thread_rank() == 0 && p.maybe_error_flag) arch::raise_flag(p.maybe_error_flag);
        if (sub == 0 && slice == 0 && row < p.rows) y[row] = NAN;
        return;  // the whole block leaves: no collective follows
      }
    }
    // Run-time even in expert mode (where it is 1): the per-token exits then bound how far ptxas hoists
    // the loads of both matrices of a swiglu item (a constant let it hoist all of them and spill).
    const int n_tok = p.n_tokens;
    const int64_t row_bytes = Format::row_bytes(p.cols);
    // Row `row` of matrix m starts at w_row + m * up_offset (bytes).
    const uint8_t* w_row = reinterpret_cast<const uint8_t*>(p.w) + expert * p.expert_stride_bytes + row * row_bytes;
    const int64_t up_offset =
        n_mats == 2 ? reinterpret_cast<const uint8_t*>(p.maybe_w_up) - reinterpret_cast<const uint8_t*>(p.w) : 0;
    // What the epilogue needs after the loop, as one pointer and one predicate (fewer values live
    // across the loop: ptxas kept row and y on the stack in some instances otherwise).
    float* const out = y + row;
    const bool writes = sub == 0 && slice == 0 && row < p.rows;

    float acc[n_mats][NTokens] = {};
    if (row < p.rows) {
      ops::gemv_input in{};  // only the path's own pointers (the other may be null)
      in.cols = p.cols;
      if constexpr (Act16) {
        in.x16 = {p.x16.q + x_row * p.cols, p.x16.groups + x_row * (p.cols / quant::act16_group_elems), p.cols};
      } else {
        in.x = p.x + x_row * p.cols;
      }
      engine::accumulate(w_row, up_offset, in, slice * lanes + sub, lanes * split, n_tok, acc);
    }
    engine::reduce_lanes(lanes, acc);              // the row's workers in this warp
    engine::reduce_warps(split, s.partials, acc);  // then its slices, in slice order
    if (writes) {
      Q35_UNROLL
      for (int t = 0; t < NTokens; ++t)
        if (t < n_tok) ops::apply_epilogue<Epilogue>(out + int64_t(t) * p.rows, acc[0][t], acc[n_mats - 1][t]);
    }
  }
};

// Quantizes rows of fp32 activations into 16-bit integers with one scale per 32 elements
// (quant::quantize_group). Thread i quantizes group i of the flattened [n_rows][cols / 32] groups.
template <int Threads = 128>
struct act16_quantize_kernel {
  static constexpr int threads = Threads;
  struct params {
    const float* x;  // [n_rows][cols], 16-byte aligned
    int64_t n_rows, cols;
    int16_t* q;                  // [n_rows][cols], 16-byte aligned
    quant::act16_group* groups;  // [n_rows][cols / 32], 16-byte aligned
  };
  struct shared_storage {};
  static dim3 grid(const params& p) {
    return dim3(unsigned(ceil_div<int64_t>(quant::act16_group_count(p.n_rows, p.cols), threads)));
  }

  Q35_DEVICE void operator()(const params& p, shared_storage&) const {
    const int64_t gi = int64_t(arch::block_idx().x) * threads + arch::thread_rank();
    if (gi >= quant::act16_group_count(p.n_rows, p.cols)) return;
    constexpr int n = quant::act16_group_elems;
    uint32_t q[n / 2];
    quant::act16_group g;
    quant::load_quantize_group(p.x, gi, q, g);
    auto* out = reinterpret_cast<uint32_t*>(p.q + gi * n);
    Q35_UNROLL
    for (int k = 0; k < n / 8; ++k)
      arch::store_16(out + 4 * k, vec16<uint32_t>{{q[4 * k], q[4 * k + 1], q[4 * k + 2], q[4 * k + 3]}});
    arch::store_16(
        reinterpret_cast<uint32_t*>(p.groups + gi),
        vec16<uint32_t>{{float_bits(g.scale), float_bits(g.sum), uint32_t(g.neg32_sum_lo), uint32_t(g.neg32_sum_hi)}});
  }
};

}  // namespace q35::kernels
