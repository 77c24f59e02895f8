// Float64 host reference of the MoE FFN (spec §2.3) and of the dense SwiGLU FFN, with the error
// bound of each output derived from what the fp32 kernels round (see expect() in gemv_reference.hpp
// for the single-dot bounds this propagates).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <vector>

#include "reference/gemv_reference.hpp"

namespace q35::ref {

// Dequantized weights of one MoE layer (row-major, GGUF ne reversed).
struct moe_ref_weights {
  int n_embd = 0, n_experts = 0, k = 0, expert_ff = 0, shared_ff = 0;  // shared_ff 0: no shared expert
  std::vector<float> router;                                           // [E][n_embd]
  std::vector<float> shexp_inp;                                        // [n_embd]
  std::vector<float> gate, up;                                         // [E][expert_ff][n_embd]
  std::vector<float> down;                                             // [E][n_embd][expert_ff]
  std::vector<float> sh_gate, sh_up;                                   // [shared_ff][n_embd]
  std::vector<float> sh_down;                                          // [n_embd][shared_ff]
  // The parts P (weight_parts) of the weights whose dots read 16-bit activations (the decode
  // kernels' integer path, launch::detail::moe_decode_paths_of); empty: fp32 activations.
  std::vector<float> gate_parts, up_parts, down_parts, sh_gate_parts, sh_up_parts, sh_down_parts;
};

// Length of the longest fp32 addition chain of one dot product of `cols` terms (fp32_dot_bound):
// a function of the kernel that computes it.
struct moe_ref_depths {
  int64_t (*router)(int64_t cols);  // router logits
  int64_t (*expert)(int64_t cols);  // routed experts' gate/up and down dots
  int64_t (*shared)(int64_t cols);  // shared expert's gate/up and down dots
};

// The GEMV engine's dots (ops::gemv_engine: the decode MoE kernels, launch::matmul's GEMV): float
// path: a worker adds 4 partial sums (of 4 products, 3 additions) per unit over ceil(units / lanes)
// units, lanes = the largest power of two <= 32 dividing the units, then <= 5 xor-tree steps and <= 3
// split-K partials; integer path: one fp32 addition per 32-element group, <= cols / 32 per worker,
// then the same trees. The larger of the two.
inline int64_t engine_depth(int64_t cols) {
  const int64_t units = cols / 16;
  int64_t lanes = 1;
  while (lanes < 32 && units % (2 * lanes) == 0) lanes *= 2;
  return std::max(4 * ((units + lanes - 1) / lanes) + 3, cols / 32) + 8;
}
// The router (ops::gemv_engine, float path): cols / 32 products per lane at most, 5 butterfly steps and <= 4 split-k
// partials.
inline int64_t router_depth(int64_t cols) { return (cols + 31) / 32 + 10; }
// A tiled GEMM that accumulates each output serially over all columns (and the int8 tensor-core
// GEMM, which adds one exact-integer group term per 32 columns: the integer path's bound).
inline int64_t serial_depth(int64_t cols) { return cols + 1; }
// The split-float tensor-core GEMM (kernels/gemm_mma_float.hpp): per m16n8k16 step of 16 columns the
// mma errs by <= 17 2^-24 (|c| + sum |p|) on the sim (round to nearest) and 17 2^-23 on a GPU
// (truncating adds, tests/arch/test_mma.cpp), |c| <= the terms before it; the F16 step's add into
// the total one rounding more; the splits <= 2^-22 |w x| (F16's x) or 2^-23 (F32's dropped
// products): a chain of 18 (sim) or 35 (GPU) per 16 columns, plus 8.
inline int64_t mma_float_depth(int64_t cols) { return (Q35_BACKEND_SIM ? 18 : 35) * ((cols + 15) / 16) + 8; }

struct moe_ref_result {
  std::vector<double> value, tol;  // [n_tokens][n_embd]: h0 + FFN(x), and the allowed |error|
  std::vector<int> ids;            // [n_tokens][k] the selected experts, in rank order
  double min_margin = INFINITY;    // smallest (logit gap at the k-th place - its error bound): > 0 = unambiguous
};

namespace detail {
inline dot_result dot(const float* w, const float* x, int64_t n) {
  double s = 0, a = 0;
  for (int64_t c = 0; c < n; ++c) {
    const double p = double(w[c]) * double(x[c]);
    s += p, a += std::fabs(p);
  }
  return {s, a};
}

// The dot of one row with x, and (act16: x as the GEMV engine's 16-bit activations, delta their
// rounding bound; parts the row's P) the terms of fp32_dot_bound's integer-path bound.
inline dot_result row_dot(const float* w, const float* parts, const float* x, const double* delta, int64_t n) {
  dot_result r = dot(w, x, n);
  if (!parts) return r;
  r.act16 = true;
  for (int64_t c = 0; c < n; ++c) {
    r.parts_abs_sum += std::fabs(double(parts[c])) * (std::fabs(double(x[c])) + delta[c]);
    r.act_err += std::fabs(double(w[c])) * delta[c];
  }
  return r;
}
}  // namespace detail

// Which dots of an expert (or dense FFN) read 16-bit activations (the GEMV engine's integer path),
// given as the weights' parts P (tests/kernels/weights.hpp weight_parts); null: fp32 activations.
struct expert_act16 {
  const float* gate_parts = nullptr;  // [ff][n_embd], with up_parts: gate and up read x quantized
  const float* up_parts = nullptr;
  const float* down_parts = nullptr;  // [n_embd][ff]: down reads the kernel's act quantized
};

namespace detail {
// One SwiGLU expert over x: y = W_d (silu(W_g x) * (W_u x)) with each output's error bound.
// With act16.down_parts the kernel quantizes its own act a' (|a' - a| <= ea): delta_j <= the group's
// max(|a| + ea) (0.5 + 2^-9)(1 + 2^-23) / 32767, carried by |D| and in the fp32 sums by P (|a| + ea + delta).
inline void swiglu_expert(const float* g, const float* u, const float* d, int64_t n_embd, int64_t ff, const float* x,
                          int64_t (*depth)(int64_t), std::vector<double>& y, std::vector<double>& ey,
                          const expert_act16& q = {}) {
  const double unit = std::ldexp(1.0, -24);
  std::vector<double> a(static_cast<size_t>(ff)), ea(static_cast<size_t>(ff));
  const std::vector<double> dx = q.gate_parts ? act16_deltas(x, n_embd) : std::vector<double>();
  for (int64_t j = 0; j < ff; ++j) {
    const dot_result dg =
        row_dot(g + j * n_embd, q.gate_parts ? q.gate_parts + j * n_embd : nullptr, x, dx.data(), n_embd);
    const dot_result du = row_dot(u + j * n_embd, q.up_parts ? q.up_parts + j * n_embd : nullptr, x, dx.data(), n_embd);
    const expected_output e = expect(ops::epilogue::swiglu, dg, &du, 0, depth(n_embd));
    a[size_t(j)] = e.value, ea[size_t(j)] = e.tol;
  }
  std::vector<double> da(static_cast<size_t>(ff), 0.0);
  if (q.down_parts) {
    for (int64_t g0 = 0; g0 < ff; g0 += 32) {
      double amax = 0;
      for (int64_t j = g0; j < g0 + 32; ++j) amax = std::fmax(amax, std::fabs(a[size_t(j)]) + ea[size_t(j)]);
      for (int64_t j = g0; j < g0 + 32; ++j)
        da[size_t(j)] = amax * (0.5 + std::ldexp(1.0, -9)) * (1 + std::ldexp(1.0, -23)) / 32767.0;
    }
  }
  y.assign(size_t(n_embd), 0), ey.assign(size_t(n_embd), 0);
  for (int64_t i = 0; i < n_embd; ++i) {
    // y_i = sum_j D_ij a_j; error: the activations' errors carried by |D_ij| plus the fp32 dot's own
    double s = 0, carried = 0, mag = 0;
    for (int64_t j = 0; j < ff; ++j) {
      const double w = d[i * ff + j];
      s += w * a[size_t(j)];
      carried += std::fabs(w) * (ea[size_t(j)] + da[size_t(j)]);
      const double m = q.down_parts ? std::fabs(double(q.down_parts[i * ff + j])) : std::fabs(w);
      mag += m * (std::fabs(a[size_t(j)]) + ea[size_t(j)] + da[size_t(j)]);
    }
    y[size_t(i)] = s;
    ey[size_t(i)] = carried + double(depth(ff) + (q.down_parts ? 7 : 1)) * unit * mag;
  }
}
}  // namespace detail

// h0 + MoE(x) for n_tokens tokens; x, h0 [n_tokens][n_embd].
inline moe_ref_result moe_ffn(const moe_ref_weights& w, const float* x, const float* h0, int64_t n_tokens,
                              const moe_ref_depths& depth) {
  const double u = std::ldexp(1.0, -24);
  const int n = w.n_embd, E = w.n_experts, k = w.k;
  const int64_t eff = w.expert_ff, sff = w.shared_ff;
  moe_ref_result r;
  r.value.assign(size_t(n_tokens * n), 0), r.tol.assign(size_t(n_tokens * n), 0);
  r.ids.assign(size_t(n_tokens * k), -1);
  for (int64_t t = 0; t < n_tokens; ++t) {
    const float* xt = x + t * n;
    // logits l_e = W_r[e] . x, each within delta_e of the kernel's
    std::vector<double> l(static_cast<size_t>(E)), delta(static_cast<size_t>(E));
    for (int e = 0; e < E; ++e) {
      const dot_result d = detail::dot(w.router.data() + int64_t(e) * n, xt, n);
      l[size_t(e)] = d.value, delta[size_t(e)] = fp32_dot_bound(d, depth.router(n));
    }
    // top-k by logit, lower index on ties
    std::vector<int> order(static_cast<size_t>(E));
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return l[size_t(a)] > l[size_t(b)]; });
    if (k < E) {
      const int last = order[size_t(k - 1)], next = order[size_t(k)];
      r.min_margin =
          std::min(r.min_margin, l[size_t(last)] - l[size_t(next)] - delta[size_t(last)] - delta[size_t(next)]);
    }
    // p = softmax(l); w_j = p_j / max(sum_sel p, 6.1e-5)
    const double m = l[size_t(order[0])];
    double sum = 0;
    for (int e = 0; e < E; ++e) sum += std::exp(l[size_t(e)] - m);
    double sel_sum = 0, max_delta = 0, max_arg = 0;
    for (int j = 0; j < k; ++j) {
      const int e = order[size_t(j)];
      sel_sum += std::exp(l[size_t(e)] - m) / sum;
      max_delta = std::max(max_delta, delta[size_t(e)]);
      max_arg = std::max(max_arg, m - l[size_t(e)]);
    }
    // |d log w_j| <= delta_j + max_s delta_s (the softmax denominator cancels in the renormalisation;
    // 1.1: second-order margin), plus the fp32 roundings: exp's argument (|l - m| u twice), exp2
    // (2 ulp), the softmax sum of E terms over items + 5 steps, the reciprocal, p, the k-term
    // renormalisation sum and the division.
    const int items = (E + 31) / 32;
    const double rel_w = 2.2 * max_delta + (4 * max_arg + 2.0 * items + k + 20) * u;
    const double denom = std::max(sel_sum, double(6.1e-5f));

    std::vector<double> total(static_cast<size_t>(n), 0), err(static_cast<size_t>(n), 0),
        mag(static_cast<size_t>(n), 0);
    std::vector<double> y, ey;
    const auto part = [](const std::vector<float>& p, int64_t at) { return p.empty() ? nullptr : p.data() + at; };
    for (int j = 0; j < k; ++j) {
      const int e = order[size_t(j)];
      r.ids[size_t(t * k + j)] = e;
      const double wj = std::exp(l[size_t(e)] - m) / sum / denom;
      const expert_act16 q{part(w.gate_parts, e * eff * n), part(w.up_parts, e * eff * n),
                           part(w.down_parts, e * n * eff)};
      detail::swiglu_expert(w.gate.data() + e * eff * n, w.up.data() + e * eff * n, w.down.data() + e * n * eff, n, eff,
                            xt, depth.expert, y, ey, q);
      for (int i = 0; i < n; ++i) {
        total[size_t(i)] += wj * y[size_t(i)];
        err[size_t(i)] += wj * ey[size_t(i)] + rel_w * wj * (std::fabs(y[size_t(i)]) + ey[size_t(i)]);
        mag[size_t(i)] += wj * (std::fabs(y[size_t(i)]) + ey[size_t(i)]);
      }
    }
    if (sff > 0) {
      // g = sigmoid(w_sh . x): |g'| <= 1/4 carries the logit's error; fast exp, the argument's
      // rounding, 1 + e and the reciprocal add (|x| / 4 + 3) u at most
      const dot_result ds = detail::dot(w.shexp_inp.data(), xt, n);
      const double g = 1.0 / (1.0 + std::exp(-ds.value));
      const double eg = 0.25 * fp32_dot_bound(ds, depth.router(n)) + (0.25 * std::fabs(ds.value) + 3) * u;
      const expert_act16 q{part(w.sh_gate_parts, 0), part(w.sh_up_parts, 0), part(w.sh_down_parts, 0)};
      detail::swiglu_expert(w.sh_gate.data(), w.sh_up.data(), w.sh_down.data(), n, sff, xt, depth.shared, y, ey, q);
      for (int i = 0; i < n; ++i) {
        total[size_t(i)] += g * y[size_t(i)];
        err[size_t(i)] += g * ey[size_t(i)] + eg * (std::fabs(y[size_t(i)]) + ey[size_t(i)]);
        mag[size_t(i)] += g * (std::fabs(y[size_t(i)]) + ey[size_t(i)]);
      }
    }
    for (int i = 0; i < n; ++i) {
      // h = h0 + total: the k + 1 products and sums of the combination (2 (k + 2) roundings of at
      // most the magnitude sum) and the residual add
      const size_t o = size_t(t * n + i);
      r.value[o] = double(h0[o]) + total[size_t(i)];
      r.tol[o] = err[size_t(i)] + 2.0 * (k + 2) * u * mag[size_t(i)] + u * (std::fabs(r.value[o]) + std::fabs(h0[o]));
    }
  }
  return r;
}

// h0 + W_down (silu(W_gate x) * (W_up x)) for the dense FFN, with bounds (value, tol) per output.
inline void dense_ffn(const std::vector<float>& gate, const std::vector<float>& up, const std::vector<float>& down,
                      int64_t n_embd, int64_t ff, const float* x, const float* h0, int64_t n_tokens,
                      int64_t (*depth)(int64_t), std::vector<double>& value, std::vector<double>& tol,
                      const expert_act16& q = {}) {
  const double u = std::ldexp(1.0, -24);
  value.assign(size_t(n_tokens * n_embd), 0), tol.assign(size_t(n_tokens * n_embd), 0);
  std::vector<double> y, ey;
  for (int64_t t = 0; t < n_tokens; ++t) {
    detail::swiglu_expert(gate.data(), up.data(), down.data(), n_embd, ff, x + t * n_embd, depth, y, ey, q);
    for (int64_t i = 0; i < n_embd; ++i) {
      const size_t o = size_t(t * n_embd + i);
      value[o] = double(h0[o]) + y[size_t(i)];
      tol[o] = ey[size_t(i)] + u * std::fabs(value[o]);
    }
  }
}

}  // namespace q35::ref
