// ops: the pieces of paged attention one key stream (L lanes sharing each key row) works with: a KV row
// chunk loaded as floats, and the online-softmax state of R query rows with its update and merge.
#pragma once

#include <cmath>
#include <cstddef>
#include <utility>

#include "q35/arch/math.hpp"
#include "q35/arch/shuffle.hpp"
#include "q35/arch/thread.hpp"
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

namespace detail {

// One pair exchange of the transposed reduction: keep one of (lo, hi), send the other to the lane
// `Off` away, add what it sends back. Takes values, not lvalues: a conditional address would put the
// caller's array in local memory.
template <int L, int Off>
Q35_DEVICE float exchange_half(float lo, float hi, bool upper) {
  const float send = upper ? lo : hi;
  const float keep = upper ? hi : lo;
  return keep + arch::shfl_xor(send, Off, L);
}

// Steps of the reduce-scatter with Half values exchanged at lane offset Off, then the next ones.
// Index sequences rather than loops: every index into v is a constant whether or not loops unroll.
template <int L, int Half, int Off, int N, size_t... I>
Q35_DEVICE void scatter_steps(float (&v)[N], int lane, std::index_sequence<I...>) {
  const bool upper = (lane & Off) != 0;
  ((v[I] = exchange_half<L, Off>(v[I], v[I + Half], upper)), ...);
  if constexpr (Half > 1) scatter_steps<L, Half / 2, Off / 2>(v, lane, std::make_index_sequence<Half / 2>{});
}

template <int L, int N, size_t... I>
Q35_DEVICE void gather_all(float (&v)[N], float sum, std::index_sequence<I...>) {
  ((v[I] = arch::shfl_idx(sum, int(I) * (L / N), L)), ...);
}

}  // namespace detail

// Sums each of the N values over the L lanes of a segment and leaves all N sums in every lane of it,
// in (N - 1) + log2(L / N) + N shuffles instead of the N log2(L) of N butterflies: a transposed
// reduce-scatter (at the step with lane offset o, a lane keeps the half of its values selected by
// its o bit and adds the partner's copy of that half), the rest of the butterfly on the one value
// left (index j = lane / (L / N)), then an all-gather from lanes j * (L / N). Every lane receives the
// same bits for sum j. All lanes of the warp must call it.
template <int L, int N>
Q35_DEVICE void segment_sum_all(float (&v)[N]) {
  static_assert(N >= 1 && N <= L && (N & (N - 1)) == 0 && L <= warp_size && (L & (L - 1)) == 0,
                "N and L: powers of two, N <= L <= 32");
  const int lane = arch::lane_id() & (L - 1);
  if constexpr (N > 1) detail::scatter_steps<L, N / 2, L / 2>(v, lane, std::make_index_sequence<N / 2>{});
  float sum = v[0];
  Q35_UNROLL
  for (int off = L / N / 2; off > 0; off /= 2) sum += arch::shfl_xor(sum, off, L);
  detail::gather_all<L>(v, sum, std::make_index_sequence<N>{});
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
