// The MoE expert kernels of decode: the fused gate+up SwiGLU of every (token, slot) pair's expert
// and of each token's shared expert (moe_gate_up_kernel), then the down projections of a token's k
// experts and shared expert, weighted and summed in a fixed order and added to the residual
// (moe_down_kernel). Expert ids are read on the device (the router wrote them); an id outside
// [0, n_experts) sets *error_flag and poisons the outputs it would have produced with NaN.
#pragma once

#include <cmath>
#include <cstdint>

#include "q35/arch/math.hpp"
#include "q35/arch/thread.hpp"
#include "q35/core/dim3.hpp"
#include "q35/kernels/moe_policy.hpp"
#include "q35/ops/moe_row.hpp"
#include "q35/quant/formats.hpp"

namespace q35::kernels {

// act[p] = silu(W_gate[ids[p]] x[p / k]) * (W_up[ids[p]] x[p / k]) for pairs p < n_pairs, and
// sh_act[t] = silu(W_sh_gate x[t]) * (W_sh_up x[t]) for tokens t when the shared expert is given.
// Thread mapping: block (j, tile) computes rows [tile * rows_per_block, +rows_per_block) of job j
// (a pair, or a token's shared expert for j >= n_pairs); each warp takes rows_per_warp of them, a
// lane one 16-element unit of each of them per step, gate and up rows of all rows_per_warp rows at once.
template <quant::weight_format Format, class Policy = moe_policy_decode>
struct moe_gate_up_kernel {
  using block = typename Format::block;
  static constexpr int threads = Policy::threads;
  static constexpr int rows_per_warp = Policy::rows_per_warp;
  static constexpr int rows_per_block = Policy::rows_per_block;

  struct params {
    const float* x;                // [n_tokens][n_embd], 16-byte aligned
    const uint8_t* gate;           // expert e's gate rows [expert_ff][n_embd] start at gate + e * expert_stride_bytes
    int64_t up_offset_bytes;       // expert e's up rows start up_offset_bytes after its gate rows
    int64_t expert_stride_bytes;   // bytes from one expert to the next (gate and up alike)
    const int32_t* ids;            // [n_pairs] = [n_tokens][k], device-resident
    float* act;                    // [n_pairs][expert_ff]
    const uint8_t* maybe_sh_gate;  // [shared_ff][n_embd] shared-expert gate rows, or null (no shared jobs)
    int64_t sh_up_offset_bytes;    // the shared up rows start this many bytes after its gate rows
    float* maybe_sh_act;           // [n_tokens][shared_ff] when maybe_sh_gate is set
    int64_t n_tokens;
    int k, n_experts, n_embd, expert_ff, shared_ff;
    int* error_flag;  // set to 1 on an out-of-range id
  };
  struct shared_storage {};
  static int64_t n_pairs(const params& p) { return p.n_tokens * p.k; }
  static dim3 grid(const params& p) {
    const int64_t jobs = n_pairs(p) + (p.maybe_sh_gate ? p.n_tokens : 0);
    const int rows = p.maybe_sh_gate && p.shared_ff > p.expert_ff ? p.shared_ff : p.expert_ff;
    return dim3(unsigned(jobs), unsigned(ceil_div(rows, rows_per_block)));
  }

  Q35_DEVICE void operator()(const params& p, shared_storage&) const {
    const int64_t job = int64_t(arch::block_idx().x);
    const int row0 = int(arch::block_idx().y) * rows_per_block + arch::warp_id() * rows_per_warp;
    const int64_t row_bytes = Format::row_bytes(p.n_embd);
    const int64_t pairs = int64_t(p.n_tokens) * p.k;
    const uint8_t* base;
    int64_t up_offset;
    const float* x;
    float* out;
    int n_rows;
    if (job < pairs) {
      const int32_t e = p.ids[job];
      n_rows = p.expert_ff;
      out = p.act + job * p.expert_ff;
      if (e < 0 || e >= p.n_experts) {  // the router never writes this; guard against a corrupt id
        if (arch::thread_rank() == 0) *p.error_flag = 1;
        Q35_UNROLL
        for (int i = 0; i < rows_per_warp; ++i)
          if (arch::lane_id() == 0 && row0 + i < n_rows) out[row0 + i] = NAN;
        return;
      }
      base = p.gate + int64_t(e) * p.expert_stride_bytes;
      up_offset = p.up_offset_bytes;
      x = p.x + (job / p.k) * p.n_embd;
    } else {
      const int64_t t = job - pairs;
      n_rows = p.shared_ff;
      out = p.maybe_sh_act + t * p.shared_ff;
      base = p.maybe_sh_gate;
      up_offset = p.sh_up_offset_bytes;
      x = p.x + t * p.n_embd;
    }
    // rows of this warp: gate r0, up r0, gate r0 + 1, up r0 + 1, ... (a prefix of them inside the matrix)
    const int n_here = n_rows - row0 < rows_per_warp ? (n_rows - row0 > 0 ? n_rows - row0 : 0) : rows_per_warp;
    const block* rows[2 * rows_per_warp];
    const float* xs[2 * rows_per_warp];
    Q35_UNROLL
    for (int i = 0; i < rows_per_warp; ++i) {
      const int r = i < n_here ? row0 + i : 0;  // a row that exists (unused)
      rows[2 * i] = ops::row_at<Format>(base, r, row_bytes);
      rows[2 * i + 1] = ops::row_at<Format>(base + up_offset, r, row_bytes);
      xs[2 * i] = xs[2 * i + 1] = x;
    }
    float d[2 * rows_per_warp];
    ops::warp_row_dots<Format, 2 * rows_per_warp>(rows, xs, 2 * n_here, p.n_embd / quant::unit_elems, d);
    Q35_UNROLL
    for (int i = 0; i < rows_per_warp; ++i) {
      // act = silu(gate . x) * (up . x)
      if (i < n_here && arch::lane_id() == 0) out[row0 + i] = arch::silu(d[2 * i]) * d[2 * i + 1];
    }
  }
};

// h[t] += sum_{j < k} w[t, j] * (W_down[ids[t, j]] act[t k + j])  +  g[t] * s[t], in that order,
// where s[t] = W_sh_down sh_act[t] (computed here when maybe_sh_down is set) or maybe_sh_y[t]
// (computed by another launch: a shared expert in another format than the routed experts).
// Thread mapping: block (t, tile) owns rows [tile * rows_per_block, +rows_per_block) of token t; a
// warp computes rows_per_warp of them, each over the k experts in slot order (experts_per_step
// experts' rows loaded at once), then the shared expert.
template <quant::weight_format Format, class Policy = moe_policy_decode>
struct moe_down_kernel {
  using block = typename Format::block;
  static constexpr int threads = Policy::threads;
  static constexpr int rows_per_warp = Policy::rows_per_warp;
  static constexpr int rows_per_block = Policy::rows_per_block;
  static constexpr int experts_per_step = Policy::experts_per_step;
  // Without a minimum ptxas trimmed the Q6_K instance to 80 registers on sm_80 and spilled 20
  // bytes (nvcc 13.0); 4 blocks of 128 threads per SM allow 128.
  static constexpr int min_blocks_per_sm = 4;

  struct params {
    const float* act;     // [n_tokens * k][expert_ff], 16-byte aligned rows
    const uint8_t* down;  // expert e's rows [n_embd][expert_ff] start at down + e * expert_stride_bytes
    int64_t expert_stride_bytes;
    const int32_t* ids;            // [n_tokens][k]
    const float* weights;          // [n_tokens][k] routing weights
    const float* maybe_sh_act;     // [n_tokens][shared_ff] with maybe_sh_down
    const uint8_t* maybe_sh_down;  // [n_embd][shared_ff] in Format, or null
    const float* maybe_sh_y;       // [n_tokens][n_embd] shared-expert output, or null
    const float* maybe_sh_gate;    // [n_tokens] sigmoid gate of the shared expert (with either of the two above)
    float* h;                      // [n_tokens][n_embd] residual stream, read and written
    int64_t n_tokens;
    int k, n_experts, n_embd, expert_ff, shared_ff;
    int* error_flag;
  };
  struct shared_storage {};
  static dim3 grid(const params& p) { return dim3(unsigned(p.n_tokens), unsigned(ceil_div(p.n_embd, rows_per_block))); }

  Q35_DEVICE void operator()(const params& p, shared_storage&) const {
    const int64_t t = int64_t(arch::block_idx().x);
    const int row0 = int(arch::block_idx().y) * rows_per_block + arch::warp_id() * rows_per_warp;
    const int64_t row_bytes = Format::row_bytes(p.expert_ff);
    const int64_t sh_row_bytes = p.maybe_sh_down ? Format::row_bytes(p.shared_ff) : 0;
    Q35_UNROLL
    for (int i = 0; i < rows_per_warp; ++i) {
      const int r = row0 + i;
      if (r >= p.n_embd) continue;  // warp-uniform
      float total = 0.0f;
      bool bad = false;
      // experts_per_step experts' rows at once (their loads in flight together), summed in slot order
      for (int j0 = 0; j0 < p.k; j0 += experts_per_step) {
        const int n_step = p.k - j0 < experts_per_step ? p.k - j0 : experts_per_step;
        const block* rows[experts_per_step];
        const float* xs[experts_per_step];
        bool valid[experts_per_step];
        Q35_UNROLL
        for (int g = 0; g < experts_per_step; ++g) {
          const int64_t pair = t * p.k + j0 + (g < n_step ? g : 0);
          const int32_t e = p.ids[pair];
          valid[g] = g < n_step && e >= 0 && e < p.n_experts;
          rows[g] = ops::row_at<Format>(p.down + (valid[g] ? int64_t(e) : 0) * p.expert_stride_bytes, r, row_bytes);
          xs[g] = p.act + pair * p.expert_ff;
        }
        float d[experts_per_step];
        ops::warp_row_dots<Format, experts_per_step>(rows, xs, n_step, p.expert_ff / quant::unit_elems, d);
        Q35_UNROLL
        for (int g = 0; g < experts_per_step; ++g) {
          if (g >= n_step) continue;
          bad |= !valid[g];
          // total += w_j * y_j
          if (valid[g]) total += p.weights[t * p.k + j0 + g] * d[g];
        }
      }
      float shared = 0.0f;
      if (p.maybe_sh_down) {
        const block* const row[1] = {ops::row_at<Format>(p.maybe_sh_down, r, sh_row_bytes)};
        const float* const xs[1] = {p.maybe_sh_act + t * p.shared_ff};
        float d[1];
        ops::warp_row_dots<Format, 1>(row, xs, 1, p.shared_ff / quant::unit_elems, d);
        shared = d[0];
      } else if (p.maybe_sh_y) {
        shared = p.maybe_sh_y[t * p.n_embd + r];
      }
      if (arch::lane_id() == 0) {
        // total += g * s (the shared expert, scaled by its gate)
        if (p.maybe_sh_down || p.maybe_sh_y) total += p.maybe_sh_gate[t] * shared;
        float* out = p.h + t * p.n_embd + r;
        // h = h + FFN(x)
        *out = bad ? NAN : *out + total;
        if (bad) *p.error_flag = 1;
      }
    }
  }
};

}  // namespace q35::kernels
