// ops: the pieces of paged attention one key stream (L lanes sharing each key row) works with: a KV row
// chunk loaded as floats, and the online-softmax state of R query rows with its update and merge.
#pragma once

#include <cmath>

#include "q35/arch/math.hpp"
#include "q35/arch/vector_load.hpp"
#include "q35/core/config.hpp"
#include "q35/core/numeric.hpp"
#include "q35/core/vec.hpp"

namespace q35::ops {

// E consecutive KV elements at p (16-byte aligned; E * sizeof(T) a multiple of 16) as floats, read
// with L1 no-allocate loads (each K/V row is read once per block).
template <class T, int E>
Q35_DEVICE void load_kv_chunk(const T* p, float (&x)[E]) {
  constexpr int per = elems_per_16_bytes<T>;
  static_assert(E % per == 0, "a lane's chunk must be whole 16-byte vectors");
  Q35_UNROLL
  for (int c = 0; c < E / per; ++c) {
    const vec16<T> v = arch::load_16_stream(p + c * per);
    Q35_UNROLL
    for (int j = 0; j < per; ++j) x[c * per + j] = to_float(v[j]);
  }
}

// Online softmax over keys for R query rows, one lane's E output dims of each:
//   m = max_j s_j,  l = sum_j e^(s_j - m),  o = sum_j e^(s_j - m) v_j
// A row that has seen no key keeps m = -inf, l = 0, o = 0.
template <int R, int E>
struct online_softmax {
  float m[R], l[R], o[R][E];

  Q35_DEVICE void init() {
    Q35_UNROLL
    for (int r = 0; r < R; ++r) {
      m[r] = -INFINITY;
      l[r] = 0.0f;
      Q35_UNROLL
      for (int e = 0; e < E; ++e) o[r][e] = 0.0f;
    }
  }

  // Adds U keys: s[r][u] their scores (-inf where masked), v[u] the lane's dims of their values
  // (finite where s can be finite). m' = max(m, s_u); o = o e^(m - m') + sum_u e^(s_u - m') v_u.
  template <int U>
  Q35_DEVICE void add(const float (&s)[R][U], const float (&v)[U][E]) {
    Q35_UNROLL
    for (int r = 0; r < R; ++r) {
      float mx = m[r];
      Q35_UNROLL
      for (int u = 0; u < U; ++u) mx = fmaxf(mx, s[r][u]);
      const float base = mx == -INFINITY ? 0.0f : mx;  // all masked so far: every weight is e^-inf = 0
      const float corr = arch::fast_exp(m[r] - base);
      float p[U];
      float sum = 0.0f;
      Q35_UNROLL
      for (int u = 0; u < U; ++u) {
        p[u] = arch::fast_exp(s[r][u] - base);
        sum += p[u];
      }
      l[r] = l[r] * corr + sum;
      m[r] = mx;
      Q35_UNROLL
      for (int e = 0; e < E; ++e) {
        float acc = o[r][e] * corr;
        Q35_UNROLL
        for (int u = 0; u < U; ++u) acc += p[u] * v[u][e];
        o[r][e] = acc;
      }
    }
  }
};

// Weight of a partial softmax (m_i, l_i) in a merge: e^(m_i - M), 0 for an empty one; M = max_i m_i.
Q35_DEVICE float merge_weight(float m_i, float m_max) { return m_i == -INFINITY ? 0.0f : arch::fast_exp(m_i - m_max); }

}  // namespace q35::ops
