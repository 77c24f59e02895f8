// Float64 host reference of Qwen3.5 gated full attention (spec §2.1, after the projections) and the
// error bound each kernel output is checked against.
//
// Bound, per output element, derived from what the kernels round (u = 2^-24, u_kv = the KV element's
// unit roundoff: 0 for f32, 2^-11 f16, 2^-8 bf16):
// * q and k after the norm and RoPE: the norm's sum of squares runs through a chain of D/32 + 6 fp32
//   additions, 1/sqrt and the two products add ~4u, RoPE three roundings plus the GPU's __sincosf
//   (2^-21.4 absolute ~ 8u) applied to |x_i| + |x_{i+h}|: |dq_d| <= c_qk u qmag_d with c_qk = D/64 + 20
//   and qmag_d = |x_d| + |x_partner| (post-norm, pre-rotation) on rotated dims, |x_d| elsewhere; k the
//   same plus u_kv kmag_d from its storage, q one more rounding (the 1/sqrt(D) scale).
// * scores: the dot is a chain of E products per lane and log2(L) <= 5 butterfly levels
//   ((E + 7) u sum|q k|), so |ds_j| <= eps_j = scale sum_d qmag_d kmag_d (2 c_qk u + u_kv + (E + 8) u).
// * softmax weights: scores off by <= eps change each normalised weight by a factor in [e^-2eps, e^2eps];
//   the exps (exp2 of x log2e: (|x| + 3) u each, arguments telescoping to twice the score range R) and
//   the online rescaling (<= U + 4 roundings per 4-key step of a stream, <= 1.5 u per key) add
//   dw = u (4 R + 1.5 n_keys + 64), doubled for the normalisation by l.
// * o_d = sum_j p_j v_jd: |do_d| <= (2 (e^2eps - 1 + dw) + u_kv) sum_j p_j |v_jd|; the gate product
//   and sigmoid (fast exp and reciprocal) add 6u |o sigma|.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

namespace q35::ref {

struct attn_ref_shape {
  int n_heads = 0, n_kv_heads = 0, head_dim = 0, rope_dim = 0;
  double rope_theta = 0, eps = 0;
};

// rms(x) * w then NEOX RoPE at pos over the first rope_dim dims, in float64; mag[d] receives the
// magnitude used by the bound (|x_d| + |x_partner| on rotated dims, |x_d| elsewhere, post-norm).
inline void norm_rope(const float* x, const float* w, const attn_ref_shape& s, int64_t pos, double* out, double* mag) {
  const int D = s.head_dim, half = s.rope_dim / 2;
  double ss = 0;
  for (int d = 0; d < D; ++d) ss += double(x[d]) * double(x[d]);
  const double inv = 1.0 / std::sqrt(ss / D + s.eps);
  std::vector<double> y(static_cast<size_t>(D));
  for (int d = 0; d < D; ++d) y[size_t(d)] = double(x[d]) * inv * double(w[d]);
  for (int d = 0; d < D; ++d) {
    out[d] = y[size_t(d)];
    mag[d] = std::fabs(y[size_t(d)]);
  }
  for (int i = 0; i < half; ++i) {
    // theta_i = pos * base^(-2i / rope_dim)
    const double th = double(pos) * std::pow(s.rope_theta, -2.0 * i / s.rope_dim);
    const double c = std::cos(th), sn = std::sin(th);
    const double a = y[size_t(i)], b = y[size_t(i + half)];
    out[i] = a * c - b * sn;
    out[i + half] = b * c + a * sn;
    mag[i] = mag[i + half] = std::fabs(a) + std::fabs(b);
  }
}

// The float64 K (post-norm, post-RoPE) and V of the tokens of one sequence, plus bound magnitudes.
struct ref_kv {
  std::vector<double> k, kmag, v;  // [n_tokens][n_kv_heads][D]
};

// Expected value and tolerance of one output element.
struct attn_expect {
  double value, tol;
};

// Output of one query row (token at position pos, q head h) over keys 0..pos of kv:
// out[d] = sigmoid(gate_d) * sum_j softmax_j(q . k_j / sqrt(D)) v_jd.
// q: the row's q projection (pre-norm); gate: its gate half; u_kv: the KV element's unit roundoff;
// e_lane: dims per lane of the kernel's key stream.
inline std::vector<attn_expect> attend_row(const float* q_proj, const float* gate, const float* q_norm,
                                           const ref_kv& kv, const attn_ref_shape& s, int h, int64_t pos, double u_kv,
                                           int e_lane) {
  const int D = s.head_dim;
  const int kvh = h / (s.n_heads / s.n_kv_heads);
  const double u = std::ldexp(1.0, -24);
  std::vector<double> q(static_cast<size_t>(D)), qmag(static_cast<size_t>(D));
  norm_rope(q_proj, q_norm, s, pos, q.data(), qmag.data());
  const double scale = 1.0 / std::sqrt(double(D));
  const double c_qk = D / 64.0 + 20.0;
  const int64_t n = pos + 1;
  std::vector<double> sc(static_cast<size_t>(n));
  double eps = 0, mx = -INFINITY, mn = INFINITY;
  for (int64_t j = 0; j < n; ++j) {
    const double* k = kv.k.data() + (j * s.n_kv_heads + kvh) * D;
    const double* km = kv.kmag.data() + (j * s.n_kv_heads + kvh) * D;
    double dot = 0, a = 0;
    for (int d = 0; d < D; ++d) {
      dot += q[size_t(d)] * k[d];
      a += qmag[size_t(d)] * km[d];
    }
    sc[size_t(j)] = dot * scale;
    eps = std::max(eps, scale * a * (2 * c_qk * u + u_kv + (e_lane + 8) * u));
    mx = std::max(mx, sc[size_t(j)]);
    mn = std::min(mn, sc[size_t(j)]);
  }
  double z = 0;
  for (auto& x : sc) z += (x = std::exp(x - mx));
  const double dw = std::expm1(2 * eps) + u * (4 * (mx - mn) + 1.5 * double(n) + 64);
  std::vector<attn_expect> out(static_cast<size_t>(D));
  for (int d = 0; d < D; ++d) {
    double o = 0, a = 0;
    for (int64_t j = 0; j < n; ++j) {
      const double p = sc[size_t(j)] / z, v = kv.v[size_t((j * s.n_kv_heads + kvh) * D + d)];
      o += p * v;
      a += p * std::fabs(v);
    }
    const double sg = 1.0 / (1.0 + std::exp(-double(gate[d])));
    const double tol_o = (2 * dw + u_kv) * a;
    out[size_t(d)] = {o * sg, tol_o * sg + 6 * u * std::fabs(o * sg) + 1e-30};
  }
  return out;
}

}  // namespace q35::ref
