// gemv_kernel: y = W x for 1-8 tokens (decode), W in any supported GGUF format, fp32 accumulation,
// with the epilogues the decoder needs (store, residual add, SwiGLU of gate and up) and an
// expert-indexed mode (MoE: each pair reads the expert matrix its id names).
//
// Thread mapping: a block owns `rows_per_block` rows (two per warp with the default policy) of one
// group (the plain case has one group; expert mode one group per (token, slot) pair, grid.y). It
// streams the rows' bytes segment by segment into shared memory (ops::stage_rows, 128-bit loads),
// then lane l of a warp dequantizes units l, l+32, ... of its rows and dots them with every token's
// x; a warp reduction finishes each row.
#pragma once

#include <cmath>
#include <cstdint>

#include "q35/arch/thread.hpp"
#include "q35/core/dim3.hpp"
#include "q35/ops/epilogue.hpp"
#include "q35/ops/gemv_dot.hpp"
#include "q35/ops/gemv_policy.hpp"
#include "q35/ops/stage_rows.hpp"
#include "q35/quant/formats.hpp"
#include "q35/warp/reduce.hpp"

namespace q35::kernels {

using gemv_epilogue = ops::epilogue;

template <quant::weight_format Format, class Policy, int NTokens, gemv_epilogue Epilogue, bool Indexed>
struct gemv_kernel {
  using block = typename Format::block;
  static constexpr int n_mats = ops::epilogue_mats<Epilogue>;
  static constexpr int threads = Policy::threads;
  static constexpr int n_warps = threads / warp_size;
  static constexpr int rows_per_block = Policy::rows_per_block;
  static constexpr int rows_per_warp = rows_per_block / n_warps;
  static constexpr int seg_blocks = ops::segment_blocks<Format, Policy>;
  static constexpr int seg_bytes = seg_blocks * Format::block_bytes;
  static constexpr int slot_bytes = int(ops::staged_row_bytes(seg_bytes));
  static_assert(threads % warp_size == 0 && rows_per_block % n_warps == 0 && rows_per_block <= threads &&
                    rows_per_block <= 64,
                "whole rows per warp; at most 64 rows per block (32-bit row offsets, see validate)");
  static_assert(NTokens >= 1 && NTokens <= 8 && (!Indexed || NTokens == 1), "expert mode: one token per pair");
  static_assert(Policy::vector_bytes == 16, "weights stream through 16-byte loads");

  struct params {
    const block* w;           // expert e's rows start expert_stride_bytes * e after w (n_experts = 1 unless Indexed)
    const block* maybe_w_up;  // the up matrix of swiglu (w is the gate; same shape and expert stride), else null
    const float* x;           // [n_x_rows][cols] row-major, 16-byte aligned
    float* y;                 // [n_groups * NTokens][rows] row-major (plain: [n_tokens][rows])
    int64_t rows, cols;
    int n_tokens;  // plain: tokens sharing the weight pass, 1..NTokens
    int n_groups;  // plain: 1; expert mode: pairs (token, slot)
    // Expert mode only:
    const int32_t* maybe_expert_ids;  // [n_groups], device-resident; out-of-range ids set *maybe_error_flag
    int32_t n_experts;
    int64_t expert_stride_bytes;  // bytes from expert e's first row to expert e + 1's (w and maybe_w_up alike)
    int x_group_div;              // group g reads x row g / x_group_div (top-k slots of one token share x)
    int* maybe_error_flag;        // set to 1 by a block whose expert id is out of range
  };
  struct shared_storage {};
  static size_t dynamic_shared_bytes(const params&) { return size_t(n_mats * rows_per_block * slot_bytes); }
  static dim3 grid(const params& p) {
    return dim3(unsigned(ceil_div<int64_t>(p.rows, rows_per_block)), unsigned(p.n_groups));
  }

  Q35_DEVICE void operator()(const params& p, shared_storage& s) const {
    const int g = int(arch::block_idx().y);
    const int64_t row0 = int64_t(arch::block_idx().x) * rows_per_block;
    const int rows_here = p.rows - row0 < rows_per_block ? int(p.rows - row0) : rows_per_block;
    const int row_bytes = int(p.cols / Format::block_elems) * Format::block_bytes;  // < 2^31 (validated)
    const float* x = p.x;
    float* y = p.y + int64_t(g) * NTokens * p.rows;
    int64_t expert = 0;
    if constexpr (Indexed) {
      expert = p.maybe_expert_ids[g];
      x += int64_t(unsigned(g) / unsigned(p.x_group_div)) * p.cols;  // unsigned: no sign word kept live
      if (expert < 0 || expert >= p.n_experts) {  // device-side guard: flag it, poison this pair's rows
        if (arch::thread_rank() == 0 && p.maybe_error_flag) *p.maybe_error_flag = 1;
        if (arch::thread_rank() < rows_here) y[row0 + arch::thread_rank()] = NAN;  // rows_per_block <= threads
        return;
      }
    }
    const int n_tok = Indexed ? 1 : p.n_tokens;
    // Row r of matrix m of this tile starts at w_tile + m * up_offset + r * row_bytes (bytes): few
    // 64-bit values stay live through the loop, so no instance spills.
    const uint8_t* w_tile = reinterpret_cast<const uint8_t*>(p.w) + expert * p.expert_stride_bytes + row0 * row_bytes;
    const int64_t up_offset =
        n_mats == 2 ? reinterpret_cast<const uint8_t*>(p.maybe_w_up) - reinterpret_cast<const uint8_t*>(p.w) : 0;
    uint8_t* smem = arch::shared_tail<uint8_t>(s);
    const int warp = arch::warp_id();
    const uint8_t* warp_slots = smem + warp * rows_per_warp * slot_bytes;

    float acc[n_mats][rows_per_warp][NTokens] = {};
    for (int seg = 0; seg < row_bytes; seg += seg_bytes) {
      const int n_bytes = row_bytes - seg < seg_bytes ? row_bytes - seg : seg_bytes;
      // smem slot (m, r) <- bytes [seg, seg + n_bytes) of row row0 + r of matrix m
      ops::stage_rows(
          smem, slot_bytes,
          [&](int i) -> const uint8_t* {
            const int m = i / rows_per_block, r = i % rows_per_block;
            return r < rows_here ? w_tile + m * up_offset + r * row_bytes + seg : nullptr;
          },
          int(n_mats * rows_per_block), n_bytes, arch::thread_rank(), threads);
      arch::sync_block();
      const float* x_seg = x + seg / Format::block_bytes * Format::block_elems;
      const int n_units = n_bytes / Format::block_bytes * Format::block_elems / quant::unit_elems;
      // One pass over the segment's units per (matrix, row): x is re-read from L1 in each pass
      // rather than held in registers across them, which keeps every instance free of spills. The
      // trip count is warp-uniform (divergent only in the last step), so the loop stays structured.
      Q35_UNROLL
      for (int m = 0; m < n_mats; ++m) {
        Q35_UNROLL
        for (int rw = 0; rw < rows_per_warp; ++rw) {
          if (warp * rows_per_warp + rw >= rows_here) continue;
          // this warp's first slot plus a compile-time offset (folds into the shared loads)
          const uint8_t* slot = warp_slots + (m * rows_per_block + rw) * slot_bytes;
          const auto* blocks = reinterpret_cast<const block*>(
              slot + ops::stage_phase(w_tile + m * up_offset + (warp * rows_per_warp + rw) * row_bytes + seg));
          for (int u0 = 0; u0 < n_units; u0 += warp_size) {
            const int u = u0 + arch::lane_id();
            if (u < n_units)
              ops::dot_unit<Format, NTokens>(blocks, u, x_seg + u * quant::unit_elems, p.cols, n_tok, acc[m][rw]);
          }
        }
      }
      arch::sync_block();  // the next segment overwrites the slots
    }

    // Lane t keeps the finished dots of token t and writes them: after the reductions only
    // rows_per_warp x n_mats values stay live through the epilogue.
    const int lane = arch::lane_id();
    float mine[rows_per_warp][2] = {};
    Q35_UNROLL
    for (int rw = 0; rw < rows_per_warp; ++rw) {
      Q35_UNROLL
      for (int t = 0; t < NTokens; ++t) {
        const float a = warp::reduce_sum(acc[0][rw][t]);
        const float b = n_mats == 2 ? warp::reduce_sum(acc[n_mats - 1][rw][t]) : 0.0f;
        if (lane == t) mine[rw][0] = a, mine[rw][1] = b;
      }
    }
    if (lane < n_tok) {
      Q35_UNROLL
      for (int rw = 0; rw < rows_per_warp; ++rw) {
        const int r = warp * rows_per_warp + rw;
        if (r < rows_here)
          ops::apply_epilogue<Epilogue>(y + int64_t(lane) * p.rows + row0 + r, mine[rw][0], mine[rw][1]);
      }
    }
  }
};

}  // namespace q35::kernels
