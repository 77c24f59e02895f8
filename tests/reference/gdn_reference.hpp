// Float64 host reference of a whole Gated DeltaNet layer (spec §2.2), token by token, with a
// first-order running error bound carried next to every value: what an fp32 implementation that
// rounds each operation (u = 2^-24 per rounding, sums of n terms in any order within (n + 1) u sum|terms|,
// fast exp/sigmoid/silu within 4 u relative) may differ by. Tests compare against value +- err.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "q35/ops/mma_split.hpp"

namespace q35::ref {

inline constexpr double gdn_u = 1.0 / 16777216.0;  // 2^-24: one fp32 rounding

struct gdn_dims {
  int n_embd = 0, n_k = 0, n_v = 0, dk = 0, dv = 0, conv_kernel = 0;
  double eps = 1e-6;
  // v-head j uses k-head j mod n_k (GGUF tiled order); true: j / (n_v / n_k), the HF/Qwen3-Next
  // order, only to show that the tests tell the two apart
  bool interleaved = false;
  // How the core's products round. false: the sequential fp32 recurrence (an n-term dot within
  // (n + 1) u, the state update 2 u per token). true: the chunked kernels' split tensor-core
  // products (ops/mma_split.hpp: an n-column product within mma_split_coef(n) u sum|terms|): u = S^T k
  // is a d_k product (V_new = W - U S), o = S^T q chains d_k + chunk columns (q' S + Aqk V_new), and
  // a token's rank-1 state update is one term of a product over the chunk's rows (V_new^T K').
  bool chunked_mma = false;
  double dot_coef(int n) const { return chunked_mma ? ops::mma_split_coef(n) : double(n + 1); }
  double update_coef() const { return chunked_mma ? ops::mma_split_coef(chunk_rows) : 2.0; }
  static constexpr int chunk_rows = 64;  // kernels::gdn_chunk_size
  int64_t conv_dim() const { return 2 * int64_t(n_k) * dk + int64_t(n_v) * dv; }
  int64_t value_dim() const { return int64_t(n_v) * dv; }
  int k_head_of(int j) const { return interleaved ? j / (n_v / n_k) : j % n_k; }
};

// Weights as the kernels see them (dequantized), in float64. Matrices are [rows][cols].
struct gdn_weights {
  std::vector<double> qkv;    // [conv_dim][n_embd]
  std::vector<double> gate;   // [value_dim][n_embd]
  std::vector<double> beta;   // [n_v][n_embd]
  std::vector<double> alpha;  // [n_v][n_embd]
  std::vector<double> out;    // [n_embd][value_dim]
  std::vector<double> conv;   // [conv_dim][conv_kernel]
  std::vector<double> dt_bias, a, norm;
};

// One sequence's state: values and their error bounds.
struct gdn_state {
  std::vector<double> conv, conv_err;  // [conv_kernel - 1][conv_dim] raw inputs, oldest first
  std::vector<double> s;               // [n_v][dk][dv]: S_j[key][value]
  std::vector<double> s_err;           // [n_v][dv]: 2-norm error bound of each column S_j[:, c]
  explicit gdn_state(const gdn_dims& d = {})
      : conv(size_t((d.conv_kernel - 1) * d.conv_dim()), 0.0),
        conv_err(conv.size(), 0.0),
        s(size_t(d.n_v) * size_t(d.dk) * size_t(d.dv), 0.0),
        s_err(size_t(d.n_v) * size_t(d.dv), 0.0) {}
};

// A value with its error bound.
struct bounded {
  std::vector<double> v, e;
  explicit bounded(size_t n = 0) : v(n, 0.0), e(n, 0.0) {}
};

// Half the step of the GEMV engine's 16-bit activations (quant/act16.hpp): an element of a group of
// 32 is within (0.5 + 2^-9) max|group| / 32767 of its quantized value.
inline std::vector<double> gdn_act16_error(const double* x, const double* xe, int64_t cols) {
  std::vector<double> e(static_cast<size_t>(cols), 0.0);
  for (int64_t g = 0; g < cols; g += 32) {
    double m = 0;
    for (int64_t c = g; c < std::min<int64_t>(g + 32, cols); ++c) m = std::max(m, std::fabs(x[c]) + (xe ? xe[c] : 0));
    for (int64_t c = g; c < std::min<int64_t>(g + 32, cols); ++c) e[size_t(c)] = (0.5 + 1.0 / 512) * m / 32767.0;
  }
  return e;
}

// y = W x for a row x (with error bound xe, or exact when null), with the fp32 dot bound
// (cols + 1) u sum |w x| and, when act16, the engine's 16-bit activation rounding sum |w| dx.
inline bounded gdn_project(const std::vector<double>& w, int64_t rows, int64_t cols, const double* x, const double* xe,
                           bool act16) {
  const std::vector<double> qe = act16 ? gdn_act16_error(x, xe, cols) : std::vector<double>(size_t(cols), 0.0);
  bounded y{size_t(rows)};
  for (int64_t r = 0; r < rows; ++r) {
    double s = 0, a = 0, e = 0;
    for (int64_t c = 0; c < cols; ++c) {
      const double wv = w[size_t(r * cols + c)];
      s += wv * x[c];
      a += std::fabs(wv * x[c]);
      e += std::fabs(wv) * ((xe ? xe[c] : 0.0) + qe[size_t(c)]);
    }
    y.v[size_t(r)] = s;
    y.e[size_t(r)] = e + double(cols + 1) * gdn_u * a;
  }
  return y;
}
inline bounded gdn_project(const std::vector<double>& w, int64_t rows, int64_t cols, const float* x, bool act16) {
  const std::vector<double> xd(x, x + cols);
  return gdn_project(w, rows, cols, xd.data(), nullptr, act16);
}

inline double gdn_silu(double x) { return x / (1.0 + std::exp(-x)); }
inline double gdn_sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }
inline double gdn_softplus(double x) { return x > 20.0 ? x : std::log1p(std::exp(x)); }

// The core for one token: projections (qkv, z, b, alpha, with error bounds) -> y = the input of ssm_out.
inline bounded gdn_core_token(const gdn_dims& d, const gdn_weights& w, gdn_state& st, const bounded& qkv,
                              const bounded& z, const bounded& b, const bounded& al) {
  const int64_t cd = d.conv_dim();
  const int K = d.conv_kernel;
  const double u = gdn_u;
  // conv + SiLU over [state rows, current input]
  bounded cu{size_t(cd)};
  for (int64_t c = 0; c < cd; ++c) {
    double acc = 0, err = 0, mag = 0;
    for (int k = 0; k < K; ++k) {
      const bool cur = k == K - 1;
      const double x = cur ? qkv.v[size_t(c)] : st.conv[size_t(k * cd + c)];
      const double xe = cur ? qkv.e[size_t(c)] : st.conv_err[size_t(k * cd + c)];
      const double wk = w.conv[size_t(c * K + k)];
      acc += wk * x;
      err += std::fabs(wk) * xe;
      mag += std::fabs(wk * x);
    }
    err += double(K + 1) * u * mag;
    cu.v[size_t(c)] = gdn_silu(acc);
    cu.e[size_t(c)] = 1.1 * err + 4 * u * std::fabs(cu.v[size_t(c)]);  // |silu'| <= 1.1
  }
  for (int k = 0; k + 2 < K; ++k)
    for (int64_t c = 0; c < cd; ++c) {
      st.conv[size_t(k * cd + c)] = st.conv[size_t((k + 1) * cd + c)];
      st.conv_err[size_t(k * cd + c)] = st.conv_err[size_t((k + 1) * cd + c)];
    }
  if (K > 1)
    for (int64_t c = 0; c < cd; ++c) {
      st.conv[size_t((K - 2) * cd + c)] = qkv.v[size_t(c)];
      st.conv_err[size_t((K - 2) * cd + c)] = qkv.e[size_t(c)];
    }
  // x / max(||x||, 1e-6) (q also / sqrt(dk)) per k-head, first order in the input errors
  const auto l2 = [&](int64_t off, double scale, std::vector<double>& v, std::vector<double>& e) {
    double ss = 0, dn = 0;
    for (int i = 0; i < d.dk; ++i) ss += cu.v[size_t(off + i)] * cu.v[size_t(off + i)];
    const double n = std::max(std::sqrt(ss), 1e-6);
    for (int i = 0; i < d.dk; ++i) dn += std::fabs(cu.v[size_t(off + i)]) * cu.e[size_t(off + i)];
    dn = dn / n + double(d.dk + 2) * u * n;
    v.resize(size_t(d.dk));
    e.resize(size_t(d.dk));
    for (int i = 0; i < d.dk; ++i) {
      const double x = cu.v[size_t(off + i)];
      v[size_t(i)] = x / n * scale;
      e[size_t(i)] = (cu.e[size_t(off + i)] + std::fabs(x) * dn / n) / n * scale + 4 * u * std::fabs(v[size_t(i)]);
    }
  };
  bounded y{size_t(d.value_dim())};
  std::vector<double> q, qe, k, ke, o(size_t(d.dv)), oe(size_t(d.dv));
  for (int j = 0; j < d.n_v; ++j) {
    const int h = d.k_head_of(j);
    l2(int64_t(h) * d.dk, 1.0 / std::sqrt(double(d.dk)), q, qe);
    l2(int64_t(d.n_k) * d.dk + int64_t(h) * d.dk, 1.0, k, ke);
    const int64_t voff = 2 * int64_t(d.n_k) * d.dk + int64_t(j) * d.dv;
    // beta = sigmoid(b); g = a softplus(alpha + dt_bias); decay = e^g
    const double beta = gdn_sigmoid(b.v[size_t(j)]);
    const double beta_e = 0.25 * b.e[size_t(j)] + 4 * u * beta;
    const double arg = al.v[size_t(j)] + w.dt_bias[size_t(j)];
    const double g = gdn_softplus(arg) * w.a[size_t(j)];
    const double g_e = std::fabs(w.a[size_t(j)]) * (al.e[size_t(j)] + u * std::fabs(arg)) + 6 * u * std::fabs(g);
    const double decay = std::exp(g);
    const double decay_e = decay * (g_e + 4 * u);
    double* s = st.s.data() + size_t(j) * size_t(d.dk) * size_t(d.dv);
    double* se = st.s_err.data() + size_t(j) * size_t(d.dv);
    double qn = 0, qen = 0, ken = 0;  // ||q||, ||dq||, ||dk|| (2-norms)
    for (int i = 0; i < d.dk; ++i) {
      qn += q[size_t(i)] * q[size_t(i)];
      qen += qe[size_t(i)] * qe[size_t(i)];
      ken += ke[size_t(i)] * ke[size_t(i)];
    }
    qn = std::sqrt(qn), qen = std::sqrt(qen), ken = std::sqrt(ken);
    for (int c = 0; c < d.dv; ++c) {
      // S <- decay S;  u = S^T k
      double uv = 0, um = 0, s0n = 0, s1n = 0;
      for (int i = 0; i < d.dk; ++i) {
        const size_t at = size_t(i) * size_t(d.dv) + size_t(c);
        s0n += s[at] * s[at];
        s[at] *= decay;
        s1n += s[at] * s[at];
        uv += s[at] * k[size_t(i)];
        um += std::fabs(s[at] * k[size_t(i)]);
      }
      s0n = std::sqrt(s0n), s1n = std::sqrt(s1n);
      // u's error from this step's roundings and k's error (S's own error is propagated below)
      const double ue = d.dot_coef(d.dk) * u * um + s1n * ken;
      // delta = beta (v - u)
      const double v = cu.v[size_t(voff + c)], ve = cu.e[size_t(voff + c)];
      const double delta = beta * (v - uv);
      const double delta_e = beta * (ve + ue) + beta_e * std::fabs(v - uv) + 3 * u * std::fabs(delta);
      // S <- S + k delta;  o = S^T q
      double ov = 0, om = 0, s2n = 0;
      for (int i = 0; i < d.dk; ++i) {
        const size_t at = size_t(i) * size_t(d.dv) + size_t(c);
        s[at] += k[size_t(i)] * delta;
        s2n += s[at] * s[at];
        ov += s[at] * q[size_t(i)];
        om += std::fabs(s[at] * q[size_t(i)]);
      }
      s2n = std::sqrt(s2n);
      // Column error in the 2-norm: the old error passes through decay (I - beta k k^T), whose norm
      // is <= decay for ||k|| = 1 and 0 < beta < 1; then this step's roundings and input errors.
      se[c] = decay * se[c] + (u * s1n + decay_e * s0n) + delta_e + std::fabs(delta) * ken + 2 * u * s1n +
              d.update_coef() * u * std::fabs(delta);
      o[size_t(c)] = ov;
      oe[size_t(c)] = qn * se[c] + s2n * qen + d.dot_coef(d.chunked_mma ? d.dk + d.chunk_rows : d.dk) * u * om;
    }
    // y = o / sqrt(mean(o^2) + eps) * norm * silu(z)
    double ss = 0, sse = 0;
    for (int c = 0; c < d.dv; ++c) {
      ss += o[size_t(c)] * o[size_t(c)];
      sse += 2 * std::fabs(o[size_t(c)]) * oe[size_t(c)];
    }
    const double ms = ss / d.dv + d.eps;
    const double r = std::sqrt(ms);
    const double r_e = (sse / d.dv + double(d.dv + 2) * u * ms) / (2 * r) + 2 * u * r;
    for (int c = 0; c < d.dv; ++c) {
      const size_t at = size_t(j) * size_t(d.dv) + size_t(c);
      const double zs = gdn_silu(z.v[at]);
      const double zs_e = 1.1 * z.e[at] + 4 * u * std::fabs(zs);
      const double nrm = w.norm[size_t(c)];
      const double on = o[size_t(c)] / r;
      const double on_e = oe[size_t(c)] / r + std::fabs(o[size_t(c)]) * r_e / (r * r);
      y.v[at] = on * nrm * zs;
      y.e[at] = std::fabs(nrm) * (on_e * std::fabs(zs) + std::fabs(on) * zs_e) + 5 * u * std::fabs(y.v[at]);
    }
  }
  return y;
}

// The whole layer for one token: t = ssm_out(core(projections(x))), with error bounds (h += t is
// the caller's; it adds one rounding u |h|). act16: the projections may round their activations to
// 16 bits (the GEMV engine's integer path for block formats, up to gemv_max_tokens tokens).
inline bounded gdn_layer_token(const gdn_dims& d, const gdn_weights& w, gdn_state& st, const float* x, bool act16) {
  const bounded qkv = gdn_project(w.qkv, d.conv_dim(), d.n_embd, x, act16);
  const bounded z = gdn_project(w.gate, d.value_dim(), d.n_embd, x, act16);
  const bounded b = gdn_project(w.beta, d.n_v, d.n_embd, x, act16);
  const bounded al = gdn_project(w.alpha, d.n_v, d.n_embd, x, act16);
  const bounded y = gdn_core_token(d, w, st, qkv, z, b, al);
  return gdn_project(w.out, d.n_embd, d.value_dim(), y.v.data(), y.e.data(), act16);
}

}  // namespace q35::ref
