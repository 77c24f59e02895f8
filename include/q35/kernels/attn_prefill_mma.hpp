// attn_prefill_mma_kernel: causal GQA attention of new tokens over a paged KV cache (prefill), the same
// result as attn_paged_kernel, with Q K^T and P V on tensor cores (mma.sync m16n8k16, fp32
// accumulators) at fp32 grade, online softmax in fp32, optional split-KV (attn_merge_kernel combines).
// f16 and bf16 KV, head dims 128 and 256 (f32 KV and decode stay on attn_paged_kernel).
//
// Thread-to-data mapping. Block (tile, seq, z) serves 16 RowWarps query rows (64; 32 where shared
// memory is short, below) = tokens_per_block tokens x heads_per_block q heads of one kv head (z as
// attn_paged_kernel: (kv_head * n_splits + split) * n_chunks + chunk); row r = token r /
// heads_per_block, head r % heads_per_block. Row warp rw (RowWarps of them) owns rows 16 rw .. 16 rw +
// 15 (lane l: rows l / 4 and l / 4 + 8, the mma accumulator layout) and computes their scores; D 128:
// one warp per row group holds all 128 output dims, D 256: two (256 threads with 4 row warps), dims
// 128 dw .. +127 each. All warps share each
// K/V tile of Bc keys in shared memory (Bc = 32 for D 128, 16 for D 256), so the heads of a group
// share one read of K/V.
//
// Numerics (u = 2^-24; tensor-core adds truncate: an mma is d = c + 16 exact products with
// |err| <= 34 u (|c| + sum |p|), gemm_mma_float.hpp's 17 * 2^-23, tests/arch/test_mma.cpp).
// * q' = fl(q / sqrt(D)) is split so that the parts' sum reproduces it (K is exact in its type):
//   F16  per row xs = q' 2^(14 - e), e = exponent of the row's max |q'| clamped to [-100, 127];
//        hi = f16(xs), lo = f16(xs - hi): |q' - (hi + lo) 2^(e - 14)| <= 2^-22 |q'| + 2^(e - 39). The
//        score tile is multiplied back by 2^(e - 14) (exact). 2 mma per k16 step.
//   BF16 q' = b0 + b1 + b2 (bf16 residuals, exact for |q'| >= 2^-110). 3 mma per k16 step.
//   Each score tile is a fresh chain of N_s = parts * D / 16 mma over part products summing to at most
//   (1 + 2^-8) sum_d |q'_d k_jd|, so
//     |ds_j| <= c_s u scale sum_d |q_d k_jd|,  c_s = 34 N_s + 8 (f16: + 4 for the split)
//   = 556 / 1100 (f16, D 128 / 256), 824 / 1640 (bf16): it takes the place of the fp32 dot's (E + 8)
//   in tests/reference/attention_reference.hpp (q's norm, RoPE and scale rounding stay as there).
// * p = e^(s - m) in [0, 1] (fast_exp, as ops::online_softmax) is split for the P V mma:
//   F16  ps = p 2^15 (<= 2^15, f16-finite), hi = f16(ps), lo = f16(ps - hi):
//        |p - (hi + lo) 2^-15| <= 2^-22 p + 2^-40 (the f16 subnormal floor, scaled down).
//   BF16 p = b0 + b1 + b2, exact (p >= 2^-110; below, <= 2^-134 absolute).
//   Per tile and 32 output dims P V is a fresh chain of N_pv = parts * Bc / 16 mma, then
//   o = o corr + tile (2 roundings per tile of Bc keys: within the reference's 1.5 u per key); the
//   lane's share of l = l corr + sum of its Bc / 4 weights, the 4 shares added at the end, o / l.
//   Relative to sum_j p_j |v_jd| this adds
//     c_pv u,  c_pv = 34 N_pv + Bc / 4 + 7 (f16: + 4 for the split) = 155 / 83 (f16, D 128 / 256),
//   219 / 113 (bf16), plus 2^-40 sum_j |v_jd| / l (f16; l >= 1). tests/attention/
//   test_attn_prefill_mma.cpp evaluates this bound with the cache's exact K/V (u_kv = 0).
// NaN: as attn_paged_kernel, a NaN score makes l NaN, which fails "l > 0": the row is written as 0.
//
// Order and bit-identity: key tiles are aligned to absolute key positions (tile i = keys
// [i Bc, (i + 1) Bc)) and run in increasing order; each output element depends only on its own row
// of Q and P (mma rows are independent), and a tile in which a row sees no key leaves it unchanged
// exactly (p = 0, corr = e^0 = 1). So with one split a row's result does not depend on the chunk or
// on which rows share its block. Keys outside [split begin, min(split end, seq_len, last row's
// position + 1)) are zero-filled in shared memory, never read from the cache.
//
// Pipeline: Q is split once into shared memory (parts x rows x D 16-bit); K/V tiles are double-buffered
// with cp.async (tile i + 1 in flight while tile i multiplies), one barrier per tile; a warp whose
// rows see no key of a tile skips its math. At the end o / l goes through shared memory (over Q) and
// each warp writes whole rows with 16-byte stores. Shared rows are padded by 8 elements (16 bytes):
// the row stride is D / 8 + 1 (odd) 16-byte units, so the 8 rows of an ldmatrix phase fall on 8
// different 4-bank groups (no conflicts; padding rather than a swizzle keeps the cp.async and
// ldmatrix addresses plain, for 6 % / 3 % more shared memory). Shared memory: 70,400 / 87,808 B
// (f16 / bf16, D 128), 102,144 / 135,936 B (D 256); an sm_86 / sm_89 GPU gives a block at most
// 99 KB (101,376 B), so there D 256 runs RowWarps = 2: 67,968 / 84,864 B (launch/attention.hpp picks
// by launch::max_shared_bytes(); rows do not depend on each other, so both give the same bits).
// nvcc 13 (sm_80 / sm_90), 0 spills: 243 / 242 registers (f16, D 128), 249 / 252 (bf16, D 128),
// 204 / 203 (f16, D 256), 234 / 235 (bf16, D 256); RowWarps = 2: 209 / 208 (f16), 239 / 239 (bf16).
// HMMA per tile and warp: f16 D 128 64 + 64, bf16 96 + 96 (32 keys); f16 D 256 64 + 32, bf16 96 + 48
// (16 keys; the scores computed by both warps of a row group).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "q35/arch/cp_async.hpp"
#include "q35/arch/half_bits.hpp"
#include "q35/arch/ldmatrix.hpp"
#include "q35/arch/math.hpp"
#include "q35/arch/mma.hpp"
#include "q35/arch/shuffle.hpp"
#include "q35/arch/thread.hpp"
#include "q35/arch/vector_load.hpp"
#include "q35/core/config.hpp"
#include "q35/core/dim3.hpp"
#include "q35/core/numeric.hpp"
#include "q35/core/vec.hpp"
#include "q35/kernels/attn_paged.hpp"
#include "q35/ops/float_split.hpp"

namespace q35::kernels {

namespace attn_mma_detail {

Q35_DEVICE uint32_t pack(uint16_t lo, uint16_t hi) { return uint32_t(lo) | uint32_t(hi) << 16; }

}  // namespace attn_mma_detail

template <class T, int HeadDim, int RowWarps = 4>
struct attn_prefill_mma_kernel {
  static_assert(std::is_same_v<T, half> || std::is_same_v<T, bf16>, "f16 or bf16 KV");
  static_assert(HeadDim == 128 || HeadDim == 256, "head_dim 128 or 256");
  static_assert(RowWarps == 4 || RowWarps == 2, "4 row warps, or 2 where shared memory is short");
  // RowWarps row warps of 16 rows; D 256 gives each row group 2 warps of 128 output dims (both compute
  // the group's scores): one warp for all 256 would hold 128 accumulators per thread and spill (nvcc
  // 13, sm_90: 255 registers, 540 B)
  static constexpr int row_warps = RowWarps, dim_warps = HeadDim / 128, warp_dims = HeadDim / dim_warps;
  static constexpr int threads = warp_size * row_warps * dim_warps;
  static constexpr int min_blocks_per_sm = 1;  // up to 255 registers
  static constexpr int rows = 16 * row_warps;  // query rows per block
  // Keys per tile: 32 for D 128; 16 for D 256 keeps the bf16 instance under sm_80's 163 KB.
  static constexpr int tile_keys = HeadDim == 128 ? 32 : 16;
  static constexpr bool scaled = std::is_same_v<T, half>;  // f16: power-of-two scaled parts
  static constexpr int parts = scaled ? 2 : 3;
  static constexpr int ld = HeadDim + 8;  // shared row stride in elements, see the header
  // o rows in floats: D + 8, a multiple of 4, so the epilogue's 16-byte row reads stay aligned and
  // conflict-free (the one-time fragment writes conflict 2-way)
  static constexpr int o_ld = HeadDim + 8;
  static constexpr int pv_dims = 32;              // output dims per P V pass (a fresh accumulator tile)
  static constexpr int n_ot = warp_dims / 8;      // n8 accumulator tiles of o per warp
  static constexpr int n_st = tile_keys / 8;      // n8 score tiles per warp
  static constexpr int row_chunks = HeadDim / 8;  // 16-byte chunks per K/V row
  static constexpr int kv_per_thread = tile_keys * row_chunks / threads;
  static_assert(kv_per_thread * threads == tile_keys * row_chunks, "K/V staging mapping");
  static constexpr float p_scale = 32768.0f, p_unscale = 1.0f / 32768.0f;  // f16 P parts: p 2^15

  using params = attn_params<T>;
  struct alignas(16) shared_storage {
    union {
      uint16_t q[parts][rows][ld];  // q' parts, [row][dim] (f16: scaled per row)
      float o[rows][o_ld];          // after the last tile: o / l, [row][dim]
    };
    uint16_t k[2][tile_keys][ld];  // K tile bits, [key][dim], two stages
    uint16_t v[2][tile_keys][ld];  // V tile bits, [key][dim]
    float q_unscale[rows];         // f16: 2^(e - 14) per row, else 1
    float lse[rows];               // m + log l per row (n_splits > 1), -inf if no key
    int lim[rows];                 // row r sees keys < lim[r] (0: not a row of this block)
  };
  static dim3 grid(const params& p) {
    return dim3(unsigned(ceil_div(p.max_seq_tokens, p.tokens_per_block)), unsigned(p.n_seqs),
                unsigned(p.n_kv_heads * p.n_chunks * p.n_splits));
  }

  static Q35_DEVICE void mma(arch::mma_c_f32_16x8& d, const arch::mma_a_f16_16x16& a, const arch::mma_b_f16_16x8& b) {
    if constexpr (scaled)
      arch::mma_m16n8k16_f16(d, a, b, d);
    else
      arch::mma_m16n8k16_bf16(d, a, b, d);
  }

  // Where the block's rows and keys are.
  struct block_info {
    int64_t tok0, page_row;
    int seq, t_first, n_t, n_h, h_first, kv_head, split, kb, ke;
  };

  static Q35_DEVICE bool row_valid(const params& p, const block_info& b, int r) {
    return r / p.heads_per_block < b.n_t && r % p.heads_per_block < b.n_h && r < p.heads_per_block * p.tokens_per_block;
  }
  static Q35_DEVICE int64_t row_index(const params& p, const block_info& b, int r) {
    return (b.tok0 + b.t_first + r / p.heads_per_block) * p.n_heads + b.h_first + r % p.heads_per_block;
  }

  // Thread t stages part t % tpr of row t / tpr's dims (tpr = threads / rows consecutive lanes per
  // row): q' = q * scale, split into the parts.
  static Q35_DEVICE void stage_q(const params& p, const block_info& b, shared_storage& s) {
    constexpr int tpr = threads / rows, half_dims = HeadDim / tpr, n_vec = half_dims / 8;
    const int t = arch::thread_rank(), r = t / tpr, hf = t % tpr;
    const bool valid = row_valid(p, b, r);
    const int lim = valid ? p.positions[b.tok0 + b.t_first + r / p.heads_per_block] + 1 : 0;
    const float* src = p.qg + (valid ? row_index(p, b, r) * 2 * HeadDim + hf * half_dims : 0);
    const auto load8 = [&](int c, float(&x)[8]) {
      Q35_UNROLL
      for (int h = 0; h < 2; ++h) {
        const vec<float, 4> v = valid ? arch::load_16(src + 8 * c + 4 * h) : vec<float, 4>{};
        Q35_UNROLL
        for (int e = 0; e < 4; ++e) x[4 * h + e] = v[e] * p.scale;
      }
    };
    float mul = 1.0f, unscale = 1.0f;
    if constexpr (scaled) {
      // e = exponent of the row's max |q'| (both halves), clamped to [-100, 127]
      uint32_t amax = 0;
      for (int c = 0; c < n_vec; ++c) {
        float x[8];
        load8(c, x);
        Q35_UNROLL
        for (int e = 0; e < 8; ++e) amax = ops::abs_bits_max(amax, x[e]);
      }
      Q35_UNROLL
      for (int o = 1; o < tpr; o *= 2) {
        const uint32_t other = arch::shfl_xor(amax, o);
        amax = other > amax ? other : amax;
      }
      const ops::f16_range fr = ops::f16_range_of(amax);
      mul = fr.mul, unscale = fr.unscale;
    }
    if (hf == 0) {
      s.lim[r] = lim;
      s.q_unscale[r] = unscale;
    }
    for (int c = 0; c < n_vec; ++c) {
      float x[8];
      load8(c, x);
      vec<uint32_t, 4> words[parts];
      Q35_UNROLL
      for (int e = 0; e < 8; e += 2) {
        uint16_t a[parts], bb[parts];
        ops::split_float<T>(x[e] * mul, a);
        ops::split_float<T>(x[e + 1] * mul, bb);
        Q35_UNROLL
        for (int j = 0; j < parts; ++j) words[j][e / 2] = attn_mma_detail::pack(a[j], bb[j]);
      }
      Q35_UNROLL
      for (int j = 0; j < parts; ++j)
        arch::store_16(reinterpret_cast<uint32_t*>(&s.q[j][r][hf * half_dims + 8 * c]), words[j]);
    }
  }

  // cp.async of the K/V rows of tile `tile` into stage st; keys outside [kb, ke) are zero-filled.
  static Q35_DEVICE void issue_kv(const params& p, const block_info& b, int tile, int st, shared_storage& s) {
    const int t = arch::thread_rank();
    const int64_t head_stride = int64_t(HeadDim) << p.page_shift;
    Q35_UNROLL
    for (int h = 0; h < kv_per_thread; ++h) {
      const int c = t + h * threads, kr = c / row_chunks, col = 8 * (c % row_chunks);
      const int key = tile * tile_keys + kr;
      const bool inside = key >= b.kb && key < b.ke;
      int64_t off = 0;
      if (inside) {
        const int page = p.page_indices[b.page_row + (key >> p.page_shift)];
        off = (int64_t(page) * p.n_kv_heads + b.kv_head) * head_stride +
              int64_t(key & ((1 << p.page_shift) - 1)) * HeadDim + col;
      }
      arch::cp_async_zfill<16>(&s.k[st][kr][col], p.k_cache + off, inside ? 16 : 0);
      arch::cp_async_zfill<16>(&s.v[st][kr][col], p.v_cache + off, inside ? 16 : 0);
    }
  }

  // Per-lane online-softmax state of the lane's two rows (rows l / 4 and l / 4 + 8 of the warp).
  struct row_state {
    float m[2], l[2];  // running max (score units), the lane's share of l
    int lim[2];
    float unscale[2];
  };

  // One tile for the warp's 16 rows: s = q' k (-inf where masked), m' = max(m, s), p = e^(s - m'),
  // l = l e^(m - m') + sum p, o = o e^(m - m') + p V.
  static Q35_DEVICE void tile_math(const shared_storage& s, const block_info& b, int st, int k0, row_state& rs,
                                   arch::mma_c_f32_16x8 (&o)[n_ot]) {
    const int lane = arch::lane_id(), rw = arch::warp_id() % row_warps, dw = arch::warp_id() / row_warps;
    const int mi = lane / 8, ri = lane % 8;  // ldmatrix: this lane's matrix and row
    // S = Q' K^T: A rows 16 rw + ri (+8 for matrices 1, 3), dims kk (+8 for 2, 3); B keys 16 g + ri (+8
    // for matrices 2, 3), dims kk (+8 for 1, 3): n-tile 2 g + n = {d[2n], d[2n+1]}
    arch::mma_c_f32_16x8 sc[n_st] = {};
    // a loop: unrolled, ptxas hoisted the fragments of every step (D 256: 255 registers and spills)
    Q35_NO_UNROLL
    for (int kk = 0; kk < HeadDim; kk += 16) {
      arch::mma_b_f16_16x8 kf[n_st];
      Q35_UNROLL
      for (int g = 0; g < n_st / 2; ++g) {
        uint32_t d[4];
        arch::ldmatrix_x4(d, &s.k[st][16 * g + ri + 8 * (mi / 2)][kk + 8 * (mi % 2)]);
        kf[2 * g].r[0] = d[0], kf[2 * g].r[1] = d[1];
        kf[2 * g + 1].r[0] = d[2], kf[2 * g + 1].r[1] = d[3];
      }
      Q35_UNROLL
      for (int j = 0; j < parts; ++j) {
        arch::mma_a_f16_16x16 a;
        arch::ldmatrix_x4(a.r, &s.q[j][16 * rw + ri + 8 * (mi % 2)][kk + 8 * (mi / 2)]);
        Q35_UNROLL
        for (int nt = 0; nt < n_st; ++nt) mma(sc[nt], a, kf[nt]);
      }
    }
    // mask and row max: element i of n-tile nt is row l / 4 (+8 for i >= 2), key k0 + 8 nt + 2 (l % 4) + (i & 1)
    float mx[2] = {rs.m[0], rs.m[1]};
    Q35_UNROLL
    for (int nt = 0; nt < n_st; ++nt) {
      Q35_UNROLL
      for (int i = 0; i < 4; ++i) {
        const int h = i / 2, key = k0 + 8 * nt + 2 * (lane % 4) + (i & 1);
        const bool live = key >= b.kb && key < b.ke && key < rs.lim[h];
        const float v = live ? sc[nt].r[i] * rs.unscale[h] : -INFINITY;
        sc[nt].r[i] = v;
        mx[h] = fmaxf(mx[h], v);
      }
    }
    float corr[2], base[2], psum[2] = {0.0f, 0.0f};
    Q35_UNROLL
    for (int h = 0; h < 2; ++h) {
      mx[h] = fmaxf(mx[h], arch::shfl_xor(mx[h], 1));
      mx[h] = fmaxf(mx[h], arch::shfl_xor(mx[h], 2));
      base[h] = mx[h] == -INFINITY ? 0.0f : mx[h];  // all masked so far: every weight is e^-inf = 0
      corr[h] = arch::fast_exp(rs.m[h] - base[h]);
      rs.m[h] = mx[h];
    }
    Q35_UNROLL
    for (int nt = 0; nt < n_st; ++nt) {
      Q35_UNROLL
      for (int i = 0; i < 4; ++i) {
        const float pe = arch::fast_exp(sc[nt].r[i] - base[i / 2]);
        sc[nt].r[i] = pe;
        psum[i / 2] += pe;
      }
    }
    Q35_UNROLL
    for (int h = 0; h < 2; ++h) rs.l[h] = rs.l[h] * corr[h] + psum[h];
    // P as A fragments, per 16 keys kk and part j: element i = score n-tile 2 kk + i / 4, element i % 4
    arch::mma_a_f16_16x16 pa[parts][tile_keys / 16];
    Q35_UNROLL
    for (int kk = 0; kk < tile_keys / 16; ++kk) {
      Q35_UNROLL
      for (int w = 0; w < 4; ++w) {
        const arch::mma_c_f32_16x8& src = sc[2 * kk + w / 2];
        uint16_t a[parts], bb[parts];
        ops::split_float<T>(scaled ? src.r[2 * (w % 2)] * p_scale : src.r[2 * (w % 2)], a);
        ops::split_float<T>(scaled ? src.r[2 * (w % 2) + 1] * p_scale : src.r[2 * (w % 2) + 1], bb);
        Q35_UNROLL
        for (int j = 0; j < parts; ++j) pa[j][kk].r[w] = attn_mma_detail::pack(a[j], bb[j]);
      }
    }
    // o = o corr + P V, pv_dims at a time: B = V [key][dim] through ldmatrix.trans, matrices keys
    // 16 kk + ri (+8 for 1, 3), dims d0 + 16 q (+8 for 2, 3): n-tile 2 q + n = {d[2n], d[2n+1]}
    Q35_UNROLL
    for (int d0 = 0; d0 < warp_dims; d0 += pv_dims) {
      arch::mma_c_f32_16x8 acc[pv_dims / 8] = {};
      Q35_UNROLL
      for (int kk = 0; kk < tile_keys / 16; ++kk) {
        arch::mma_b_f16_16x8 vf[pv_dims / 8];
        Q35_UNROLL
        for (int q = 0; q < pv_dims / 16; ++q) {
          uint32_t d[4];
          arch::ldmatrix_x4_trans(d,
                                  &s.v[st][16 * kk + ri + 8 * (mi % 2)][warp_dims * dw + d0 + 16 * q + 8 * (mi / 2)]);
          vf[2 * q].r[0] = d[0], vf[2 * q].r[1] = d[1];
          vf[2 * q + 1].r[0] = d[2], vf[2 * q + 1].r[1] = d[3];
        }
        Q35_UNROLL
        for (int j = 0; j < parts; ++j) {
          Q35_UNROLL
          for (int n = 0; n < pv_dims / 8; ++n) mma(acc[n], pa[j][kk], vf[n]);
        }
      }
      Q35_UNROLL
      for (int n = 0; n < pv_dims / 8; ++n) {
        Q35_UNROLL
        for (int i = 0; i < 4; ++i) o[d0 / 8 + n].r[i] = o[d0 / 8 + n].r[i] * corr[i / 2] + acc[n].r[i];
      }
    }
  }

  Q35_DEVICE void operator()(const params& p, shared_storage& s) const {
    block_info b;
    b.seq = int(arch::block_idx().y);
    b.tok0 = p.seq_offsets[b.seq];
    const int n_tok = int(p.seq_offsets[b.seq + 1] - b.tok0);
    b.t_first = int(arch::block_idx().x) * p.tokens_per_block;
    if (b.t_first >= n_tok) return;  // the whole block
    const int z = int(arch::block_idx().z);
    const int chunk = z % p.n_chunks;
    b.split = (z / p.n_chunks) % p.n_splits;
    b.kv_head = z / (p.n_splits * p.n_chunks);
    const int group = p.n_heads / p.n_kv_heads;
    b.h_first = b.kv_head * group + chunk * p.heads_per_block;
    b.n_h = std::min(p.heads_per_block, group - chunk * p.heads_per_block);
    b.n_t = std::min(p.tokens_per_block, n_tok - b.t_first);
    b.page_row = p.page_row_offsets[b.seq];
    const int split_keys = attn_split_keys(p, b.seq);
    b.kb = b.split * split_keys;
    b.ke = 0;

    stage_q(p, b, s);
    arch::sync_block();
    int kmax = 0;
    for (int r = 0; r < rows; ++r) kmax = std::max(kmax, s.lim[r]);
    kmax = std::min(kmax, int(p.seq_lens[b.seq]));
    b.ke = std::min(b.kb + split_keys, kmax);

    const int lane = arch::lane_id(), warp = arch::warp_id(), rw = warp % row_warps, dw = warp / row_warps;
    row_state rs;
    int warp_lim = 0;
    for (int r = 16 * rw; r < 16 * rw + 16; ++r) warp_lim = std::max(warp_lim, s.lim[r]);
    const int warp_end = std::min(b.ke, warp_lim);
    Q35_UNROLL
    for (int h = 0; h < 2; ++h) {
      const int r = 16 * rw + lane / 4 + 8 * h;
      rs.m[h] = -INFINITY, rs.l[h] = 0.0f;
      rs.lim[h] = s.lim[r];
      rs.unscale[h] = s.q_unscale[r];
    }
    // element i: row 16 rw + l / 4 (+8 for i >= 2), dim warp_dims dw + 8 n + 2 (l % 4) + (i & 1)
    arch::mma_c_f32_16x8 o[n_ot] = {};

    const int t_begin = b.kb / tile_keys, t_end = b.ke > b.kb ? ceil_div(b.ke, tile_keys) : t_begin;
    if (t_begin < t_end) {
      issue_kv(p, b, t_begin, 0, s);
      arch::cp_async_commit();
    }
    for (int tile = t_begin; tile < t_end; ++tile) {
      const int st = (tile - t_begin) % 2;
      arch::cp_async_wait<0>();
      arch::sync_block();  // tile is complete, and every warp is done with the other stage
      if (tile + 1 < t_end) {
        issue_kv(p, b, tile + 1, st ^ 1, s);
        arch::cp_async_commit();
      }
      if (tile * tile_keys < warp_end) tile_math(s, b, st, tile * tile_keys, rs, o);  // warp-uniform
    }

    // l = the 4 lanes' shares; o / l through shared memory (over q: every warp is done with it)
    Q35_UNROLL
    for (int h = 0; h < 2; ++h) {
      rs.l[h] += arch::shfl_xor(rs.l[h], 1);
      rs.l[h] += arch::shfl_xor(rs.l[h], 2);
    }
    arch::cp_async_wait<0>();
    arch::sync_block();
    Q35_UNROLL
    for (int h = 0; h < 2; ++h) {
      const float l = rs.l[h];
      Q35_UNROLL
      for (int n = 0; n < n_ot; ++n) {
        Q35_UNROLL
        for (int c = 0; c < 2; ++c) {
          const float ov = scaled ? o[n].r[2 * h + c] * p_unscale : o[n].r[2 * h + c];
          s.o[16 * rw + lane / 4 + 8 * h][warp_dims * dw + 8 * n + 2 * (lane % 4) + c] = l > 0.0f ? ov / l : 0.0f;
        }
      }
      if (lane % 4 == 0 && dw == 0) s.lse[16 * rw + lane / 4 + 8 * h] = l > 0.0f ? rs.m[h] + logf(l) : -INFINITY;
    }
    arch::sync_block();
    // out = o * sigmoid(gate), or the partial o and its log-sum-exp: warp w takes rows w, w + warps,
    // ..., lane l dims 4 l + 128 i of each
    const int64_t n_rows = p.n_tokens * p.n_heads;
    for (int r = warp; r < rows; r += threads / warp_size) {
      if (!row_valid(p, b, r)) continue;
      const int64_t row = row_index(p, b, r);
      Q35_UNROLL
      for (int i = 0; i < HeadDim / 128; ++i) {
        const int d = 4 * lane + 128 * i;
        // a shared load (LDS.128); arch::load_16 is a global one (ld.global.nc), which faults here
        vec<float, 4> v = *reinterpret_cast<const vec<float, 4>*>(&s.o[r][d]);
        if (p.n_splits == 1) {
          const vec<float, 4> g = arch::load_16(p.qg + row * 2 * HeadDim + HeadDim + d);
          Q35_UNROLL
          for (int e = 0; e < 4; ++e) v[e] *= arch::sigmoid(g[e]);
          arch::store_16(p.out + row * HeadDim + d, v);
        } else {
          arch::store_16(p.part_o + (b.split * n_rows + row) * HeadDim + d, v);
        }
      }
      if (p.n_splits > 1 && lane == 0) p.part_lse[b.split * n_rows + row] = s.lse[r];
    }
  }
};

}  // namespace q35::kernels
