// The MoE expert kernels of decode: the fused gate+up SwiGLU of every (token, slot) pair's expert
// and of each token's shared expert (moe_gate_up_kernel), then the down projections of a token's k
// experts and shared expert, weighted and summed in a fixed order and added to the residual
// (moe_down_kernel). Expert ids are read on the device (the router wrote them). An id of -1 is an
// empty slot (adaptive top-k: the token's slots past its k_used), which both kernels skip; any other
// id outside [0, n_experts) sets *error_flag and poisons the outputs it would have produced with NaN.
#pragma once

#include <cmath>
#include <cstdint>

#include "q35/arch/atomic.hpp"
#include "q35/arch/math.hpp"
#include "q35/arch/thread.hpp"
#include "q35/core/dim3.hpp"
#include "q35/kernels/moe_policy.hpp"
#include "q35/ops/act16_warp.hpp"
#include "q35/ops/gemv_engine.hpp"
#include "q35/ops/router.hpp"
#include "q35/quant/act16.hpp"
#include "q35/quant/formats.hpp"

namespace q35::kernels {

// act[p] = silu(W_gate[ids[p]] x[p / k]) * (W_up[ids[p]] x[p / k]) for pairs p < n_pairs, and
// sh_act[t] = silu(W_sh_gate x[t]) * (W_sh_up x[t]) for tokens t when the shared expert is given;
// optionally also act and sh_act quantized (quant/act16.hpp) for the down kernel's integer path.
// The weights stream through ops::gemv_engine (Act16: x as 16-bit activations, dp2a; else fp32 x).
// Thread mapping: block (j, tile) computes rows [tile * rows_per_block(p), +rows_per_block(p)) of
// job j (a pair, or a token's shared expert for j >= n_pairs): `lanes` lanes per row (the engine's
// workers), so a pass of the block covers n_warps * 32 / lanes rows; a block covers whole 32-row
// groups (passes of it), which it then quantizes one warp per group.
template <quant::weight_format Format, bool Act16, class Policy = moe_policy_decode>
struct moe_gate_up_kernel {
  using engine = ops::gemv_engine<Format, 1, 2, Act16, Act16 ? 1 : 2>;
  static constexpr int threads = Policy::threads;
  static constexpr int n_warps = threads / warp_size;
  static constexpr int max_block_rows = threads;  // one lane per row at most

  struct params {
    const float* x;                // [n_tokens][n_embd], 16-byte aligned (float path)
    quant::act16_view x16;         // the same rows quantized (integer path)
    const uint8_t* gate;           // expert e's gate rows [expert_ff][n_embd] start at gate + e * expert_stride_bytes
    int64_t up_offset_bytes;       // expert e's up rows start up_offset_bytes after its gate rows
    int64_t expert_stride_bytes;   // bytes from one expert to the next (gate and up alike)
    const int32_t* ids;            // [n_pairs] = [n_tokens][k], device-resident
    float* act;                    // [n_pairs][expert_ff]
    const uint8_t* maybe_sh_gate;  // [shared_ff][n_embd] shared-expert gate rows, or null (no shared jobs)
    int64_t sh_up_offset_bytes;    // the shared up rows start this many bytes after its gate rows
    float* maybe_sh_act;           // [n_tokens][shared_ff] when maybe_sh_gate is set
    // Optional 16-bit copies (expert_ff and shared_ff multiples of 32): [n_pairs][expert_ff] and
    // [n_tokens][shared_ff] values, and their group records; null: not written.
    int16_t* maybe_act_q;
    quant::act16_group* maybe_act_groups;
    int16_t* maybe_sh_act_q;
    quant::act16_group* maybe_sh_act_groups;
    int64_t n_tokens;
    int k, n_experts, n_embd, expert_ff, shared_ff;
    int log2_lanes;   // lanes per row (<= 5): ops::gemv_engine workers of one row
    int* error_flag;  // set to 1 on an out-of-range id
  };
  struct shared_storage {
    float out[max_block_rows];  // the block's outputs, for the 16-bit copy
  };
  static Q35_HOST_DEVICE int64_t n_pairs(const params& p) { return p.n_tokens * p.k; }
  static Q35_HOST_DEVICE int rows_per_pass(const params& p) { return n_warps * (warp_size >> p.log2_lanes); }
  // Whole 32-row groups (the 16-bit copy's unit), at least one pass.
  static Q35_HOST_DEVICE int rows_per_block(const params& p) { return rows_per_pass(p) > 32 ? rows_per_pass(p) : 32; }
  static dim3 grid(const params& p) {
    const int64_t jobs = n_pairs(p) + (p.maybe_sh_gate ? p.n_tokens : 0);
    const int rows = p.maybe_sh_gate && p.shared_ff > p.expert_ff ? p.shared_ff : p.expert_ff;
    return dim3(unsigned(jobs), unsigned(ceil_div(rows, rows_per_block(p))));
  }

  Q35_DEVICE void operator()(const params& p, shared_storage& s) const {
    const int64_t job = int64_t(arch::block_idx().x);
    const int lane = arch::lane_id(), warp = arch::warp_id();
    const int lanes = 1 << p.log2_lanes, sub = lane & (lanes - 1);
    const int block_rows = rows_per_block(p), pass_rows = rows_per_pass(p);
    const int row0 = int(arch::block_idx().y) * block_rows;
    const int64_t row_bytes = Format::row_bytes(p.n_embd);
    const int64_t pairs = n_pairs(p);
    const uint8_t* base;
    int64_t up_offset, x_row, out_row;
    float* out;
    int n_rows, ff;
    int16_t* maybe_q;
    quant::act16_group* maybe_groups;
    if (job < pairs) {
      const int32_t e = p.ids[job];
      n_rows = ff = p.expert_ff;
      out = p.act + job * p.expert_ff;
      if (e == ops::router_empty_slot) return;  // nothing reads the act row of an empty slot
      if (e < 0 || e >= p.n_experts) {          // the router never writes this; guard against a corrupt id
        if (arch::thread_rank() == 0) arch::raise_flag(p.error_flag);
        for (int r = arch::thread_rank(); r < block_rows; r += threads)
          if (row0 + r < n_rows) out[row0 + r] = NAN;
        return;  // the whole block: no barrier follows
      }
      base = p.gate + int64_t(e) * p.expert_stride_bytes;
      up_offset = p.up_offset_bytes;
      x_row = job / p.k, out_row = job;
      maybe_q = p.maybe_act_q, maybe_groups = p.maybe_act_groups;
    } else {
      const int64_t t = job - pairs;
      n_rows = ff = p.shared_ff;
      out = p.maybe_sh_act + t * p.shared_ff;
      base = p.maybe_sh_gate;
      up_offset = p.sh_up_offset_bytes;
      x_row = t, out_row = t;
      maybe_q = p.maybe_sh_act_q, maybe_groups = p.maybe_sh_act_groups;
    }
    ops::gemv_input in{};
    in.cols = p.n_embd;
    if constexpr (Act16) {
      in.x16 = {p.x16.q + x_row * p.n_embd, p.x16.groups + x_row * (p.n_embd / quant::act16_group_elems), p.n_embd};
    } else {
      in.x = p.x + x_row * p.n_embd;
    }
    // 1, but not known to the compiler: the engine's per-token exits then bound how far ptxas hoists
    // the loads of both matrices (with a constant it hoisted all of them: 128-174 registers and a
    // 6 KB spill for Q6_K, nvcc 13.0; gemv_kernel does the same)
    const int n_tok = p.k > 0 ? 1 : 0;
    for (int pass = 0; pass < block_rows; pass += pass_rows) {  // the same trip count for the whole block
      const int local = pass + warp * (warp_size >> p.log2_lanes) + (lane >> p.log2_lanes);
      const int row = row0 + local;
      float acc[2][1] = {};
      if (row < n_rows) engine::accumulate(base + row * row_bytes, up_offset, in, sub, lanes, n_tok, acc);
      engine::reduce_lanes(lanes, acc);
      // act = silu(gate . x) * (up . x)
      const float v = arch::silu(acc[0][0]) * acc[1][0];
      if (sub == 0 && row < n_rows) {
        out[row] = v;
        s.out[local] = v;
      }
    }
    if (!maybe_q) return;  // the same for the whole block (one job)
    arch::sync_block();
    // the 16-bit copy: warp w quantizes the block's groups w, w + n_warps, ... (rows are whole groups)
    constexpr int ge = quant::act16_group_elems;
    for (int g = warp; g * ge < block_rows && row0 + g * ge < n_rows; g += n_warps) {
      const int64_t gi = out_row * (ff / ge) + (row0 / ge + g);
      ops::quantize_group_warp(s.out[g * ge + lane], maybe_q + gi * ge, maybe_groups + gi);
    }
  }
};

// h[t] += sum_{j < k} w[t, j] * (W_down[ids[t, j]] act[t k + j])  +  g[t] * s[t], in that order,
// where s[t] = W_sh_down sh_act[t] (computed here when maybe_sh_down is set) or maybe_sh_y[t]
// (computed by another launch: a shared expert in another format than the routed experts).
// The weights stream through ops::gemv_engine (Act16: act as 16-bit activations written by
// moe_gate_up_kernel; else fp32 act).
// Thread mapping: block (t, tile) owns rows [tile * R, +R) of token t, R = 32 / lanes; every warp
// covers all R rows (`lanes` workers each) for its share of the jobs (the k experts, then the
// shared expert: warp w takes jobs w, w + n_warps, ...), keeps each job's dot in shared memory, and
// warp 0 combines them in slot order.
//
// BlocksPerRow > 0 (Q6_K rows of 512 or 1024 weights, Act16): rows are bundled 8 / BlocksPerRow to
// one 8-block item (ops::gemv_engine::accumulate_rows); block (t, tile) owns bundles_per_block
// bundles, and thread i takes the (job, bundle) units i, i + threads, ...
template <quant::weight_format Format, bool Act16, class Policy = moe_policy_decode, int BlocksPerRow = 0>
struct moe_down_kernel {
  using engine = ops::gemv_engine<Format, 1, 1, Act16, Act16 ? 1 : 2>;
  static constexpr int threads = Policy::threads;
  static constexpr int n_warps = threads / warp_size;
  static constexpr int max_jobs = ops::router_max_k + 1;
  static constexpr int bundle_rows = BlocksPerRow > 0 ? 8 / BlocksPerRow : 1;
  static constexpr int bundles_per_block = 4;
  static_assert(BlocksPerRow == 0 || (Act16 && bundles_per_block * bundle_rows <= warp_size), "row bundles");

  struct params {
    const float* act;         // [n_tokens * k][expert_ff], 16-byte aligned rows (float path)
    quant::act16_view act16;  // the same quantized (integer path)
    const uint8_t* down;      // expert e's rows [n_embd][expert_ff] start at down + e * expert_stride_bytes
    int64_t expert_stride_bytes;
    const int32_t* ids;            // [n_tokens][k]
    const float* weights;          // [n_tokens][k] routing weights
    const float* maybe_sh_act;     // [n_tokens][shared_ff] with maybe_sh_down (float path)
    quant::act16_view sh_act16;    // the same quantized (integer path)
    const uint8_t* maybe_sh_down;  // [n_embd][shared_ff] in Format, or null
    const float* maybe_sh_y;       // [n_tokens][n_embd] shared-expert output, or null
    const float* maybe_sh_gate;    // [n_tokens] sigmoid gate of the shared expert (with either of the two above)
    float* h;                      // [n_tokens][n_embd] residual stream, read and written
    int64_t n_tokens;
    int k, n_experts, n_embd, expert_ff, shared_ff;
    int log2_lanes;  // lanes per row (<= 5)
    int* error_flag;
  };
  struct shared_storage {
    float dot[max_jobs][warp_size];  // [job][row of the block]
    int bad[max_jobs];               // the job's expert id is out of range (and not an empty slot)
  };
  static Q35_HOST_DEVICE int rows_per_block(const params& p) {
    return BlocksPerRow > 0 ? bundles_per_block * bundle_rows : warp_size >> p.log2_lanes;
  }
  static dim3 grid(const params& p) {
    return dim3(unsigned(p.n_tokens), unsigned(ceil_div(p.n_embd, rows_per_block(p))));
  }

  Q35_DEVICE void operator()(const params& p, shared_storage& s) const {
    const int64_t t = int64_t(arch::block_idx().x);
    const int local = arch::lane_id() >> p.log2_lanes;
    const int r0 = int(arch::block_idx().y) * rows_per_block(p), row = r0 + local;
    const int n_jobs = p.k + (p.maybe_sh_down ? 1 : 0);
    if constexpr (BlocksPerRow > 0) {
      bundled_dots(p, s, t, r0, n_jobs);
    } else {
      engine_dots(p, s, t, row, local, n_jobs);
    }
    arch::sync_block();
    combine(p, s, t, r0);
  }

 private:
  // The input row of a job: act row in_row (a routed expert's pair) or sh_act row in_row (the shared expert).
  static Q35_DEVICE ops::gemv_input input_row(const params& p, bool routed, int64_t in_row, int cols) {
    ops::gemv_input in{};
    in.cols = cols;
    if constexpr (Act16) {
      const quant::act16_view& v = routed ? p.act16 : p.sh_act16;
      in.x16 = {v.q + in_row * cols, v.groups + in_row * (cols / quant::act16_group_elems), cols};
    } else {
      in.x = (routed ? p.act : p.maybe_sh_act) + in_row * cols;
    }
    return in;
  }
  // Job j of token t: expert j's down matrix (pair t k + j's act), or (j == k) the shared expert's
  // (token t's sh_act); valid: the expert id is in range; bad: it is neither that nor an empty slot.
  static Q35_DEVICE const uint8_t* job_matrix(const params& p, int64_t t, int j, bool& valid, bool& bad) {
    valid = true, bad = false;
    if (j >= p.k) return p.maybe_sh_down;
    const int32_t e = p.ids[t * p.k + j];
    valid = e >= 0 && e < p.n_experts;
    bad = !valid && e != ops::router_empty_slot;
    return p.down + (valid ? int64_t(e) : 0) * p.expert_stride_bytes;
  }

  // s.dot[j][row - r0] for the block's R rows: warp w takes jobs w, w + n_warps, ... (the job
  // written out as an if/else: through job_matrix and selects, ptxas formed the activation addresses
  // with 3x the IMAD/LEA and the Q4_K loop rose from 1.46 to 1.68 instructions per weight)
  static Q35_DEVICE void engine_dots(const params& p, shared_storage& s, int64_t t, int row, int local, int n_jobs) {
    const int lane = arch::lane_id(), warp = arch::warp_id();
    const int lanes = 1 << p.log2_lanes, sub = lane & (lanes - 1);
    for (int j = warp; j < n_jobs; j += n_warps) {  // warp-uniform
      const uint8_t* base;
      int64_t in_row;
      int cols;
      bool valid = true, bad = false;
      if (j < p.k) {
        const int64_t pair = t * p.k + j;
        const int32_t e = p.ids[pair];
        valid = e >= 0 && e < p.n_experts;
        bad = !valid && e != ops::router_empty_slot;
        base = p.down + (valid ? int64_t(e) : 0) * p.expert_stride_bytes;
        in_row = pair, cols = p.expert_ff;
      } else {
        base = p.maybe_sh_down;
        in_row = t, cols = p.shared_ff;
      }
      const ops::gemv_input in = input_row(p, j < p.k, in_row, cols);
      float acc[1][1] = {};
      const int n_tok = p.k > 0 ? 1 : 0;  // 1, as a run-time value (see moe_gate_up_kernel)
      if (valid && row < p.n_embd)
        engine::accumulate(base + row * Format::row_bytes(cols), 0, in, sub, lanes, n_tok, acc);
      engine::reduce_lanes(lanes, acc);
      if (sub == 0) s.dot[j][local] = acc[0][0];
      if (lane == 0) s.bad[j] = bad;  // an empty slot's dot stays 0 (its weight is 0 too)
    }
  }

  // The same for bundled rows: thread i takes the (job, bundle) units i, i + threads, ...
  static Q35_DEVICE void bundled_dots(const params& p, shared_storage& s, int64_t t, int r0, int n_jobs) {
    if constexpr (BlocksPerRow > 0) {
      for (int u = arch::thread_rank(); u < n_jobs * bundles_per_block; u += threads) {
        const int j = u / bundles_per_block, b = u % bundles_per_block;
        bool valid, bad;
        const uint8_t* base = job_matrix(p, t, j, valid, bad);
        const ops::gemv_input in =
            input_row(p, j < p.k, j < p.k ? t * p.k + j : t, j < p.k ? p.expert_ff : p.shared_ff);
        const int first = r0 + b * bundle_rows;  // a multiple of bundle_rows: a 16-byte aligned item
        float acc[bundle_rows][1] = {};
        const int n_tok = p.k > 0 ? 1 : 0;
        if (valid && first < p.n_embd)
          engine::template accumulate_rows<BlocksPerRow>(base + first * Format::row_bytes(in.cols), in, n_tok, acc);
        Q35_UNROLL
        for (int i = 0; i < bundle_rows; ++i) s.dot[j][b * bundle_rows + i] = acc[i][0];
        if (b == 0) s.bad[j] = bad;
      }
    }
  }

  // Warp 0: h[r] += sum_j w_j dot_j + g s for the block's rows, in slot order.
  static Q35_DEVICE void combine(const params& p, shared_storage& s, int64_t t, int r0) {
    const int lane = arch::lane_id();
    if (arch::warp_id() != 0 || lane >= rows_per_block(p) || r0 + lane >= p.n_embd) return;
    const int r = r0 + lane;
    // total = sum_j w_j y_j in slot order, then + g s (the shared expert, scaled by its gate)
    float total = 0.0f;
    bool bad = false;
    for (int j = 0; j < p.k; ++j) {
      bad |= s.bad[j] != 0;
      if (!s.bad[j]) total += p.weights[t * p.k + j] * s.dot[j][lane];
    }
    if (p.maybe_sh_down) {
      total += p.maybe_sh_gate[t] * s.dot[p.k][lane];
    } else if (p.maybe_sh_y) {
      total += p.maybe_sh_gate[t] * p.maybe_sh_y[t * p.n_embd + r];
    }
    float* out = p.h + t * p.n_embd + r;
    // h = h + FFN(x)
    *out = bad ? NAN : *out + total;
    if (bad) arch::raise_flag(p.error_flag);
  }
};

}  // namespace q35::kernels
