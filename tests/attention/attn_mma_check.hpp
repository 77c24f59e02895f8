// The checks of a step that ran attn_prefill_mma_kernel (prefill over f16 / bf16 KV): against the
// float64 reference with the K/V the cache holds (exact in their type, so u_kv = 0) and the kernel's
// own bound (attn_prefill_mma.hpp): its score coefficient c_s in place of the fp32 dot's (E + 8), and
// c_pv u sum_j p_j |v_jd| (+ 2^-40 sum_j |v_jd| for f16's P floor) for the P V products.
// check_step picks this or attn_case::check by the kernel the case's last step ran.
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "attn_case.hpp"
#include "q35/kernels/attn_prefill_mma.hpp"

namespace q35::test {

// The K/V of sequence i's first n tokens read back from the cache (exactly what the kernel reads).
inline ref::ref_kv cache_kv(attn_case& c, size_t i, int64_t n) {
  const kv::kv_layer_view view = c.pool.layer(0);
  const int D = c.shape.head_dim, KV = c.shape.n_kv_heads, P = view.page_tokens;
  const size_t eb = kv::kv_type_bytes(c.type);
  const size_t region = size_t(view.n_pages) * size_t(KV * P * D) * eb;
  std::vector<unsigned char> hk(region), hv(region);
  Q35_REQUIRE_OK(copy(hk.data(), view.k, region, copy_kind::device_to_host));
  Q35_REQUIRE_OK(copy(hv.data(), view.v, region, copy_kind::device_to_host));
  Q35_REQUIRE_OK(synchronize());
  const auto get = [&](const unsigned char* src) {
    uint16_t b;
    std::memcpy(&b, src, 2);
    return double(c.type == kv::kv_type::f16 ? q35::detail::half_bits_to_float(b) : q35::detail::bf16_bits_to_float(b));
  };
  ref::ref_kv r;
  r.k.resize(size_t(n * KV * D)), r.kmag.resize(r.k.size()), r.v.resize(r.k.size());
  for (int64_t t = 0; t < n; ++t) {
    const int64_t page = c.alloc.pages(c.seqs[i].id)[size_t(t / P)];
    for (int h = 0; h < KV; ++h)
      for (int d = 0; d < D; ++d) {
        const size_t at = size_t(((page * KV + h) * P + t % P) * D + d) * eb, o = size_t((t * KV + h) * D + d);
        r.k[o] = get(hk.data() + at);
        r.kmag[o] = std::fabs(r.k[o]);
        r.v[o] = get(hv.data() + at);
      }
  }
  return r;
}

// The kernel's bound constants (see attn_prefill_mma.hpp).
struct mma_bound {
  double c_s, c_pv;
  bool f16;
};
template <class T, int D>
mma_bound bound_of() {
  using k = kernels::attn_prefill_mma_kernel<T, D>;
  const int n_s = k::parts * D / 16, n_pv = k::parts * k::tile_keys / 16, split = k::scaled ? 4 : 0;
  return {34.0 * n_s + 8 + split, 34.0 * n_pv + k::tile_keys / 4 + 7 + split, k::scaled};
}
inline mma_bound bound_of(kv::kv_type t, int D) {
  if (t == kv::kv_type::f16) return D == 128 ? bound_of<half, 128>() : bound_of<half, 256>();
  return D == 128 ? bound_of<bf16, 128>() : bound_of<bf16, 256>();
}

struct check_result {
  int64_t bad = 0;
  double rms_rel = 0;
};

// Checks out (step over `batch` with n_new tokens each) element by element, except the rows listed in
// skip ({sequence position in batch, token, head}).
inline check_result check_mma(attn_case& c, const std::vector<float>& out, const std::vector<size_t>& batch,
                              const std::vector<int64_t>& n_new, const std::vector<std::array<int64_t, 3>>& skip = {}) {
  const int D = c.shape.head_dim, H = c.shape.n_heads;
  const mma_bound bd = bound_of(c.type, D);
  const double u = std::ldexp(1.0, -24);
  check_result res;
  double err2 = 0, want2 = 0, worst = 0;
  int64_t row = 0;
  for (size_t b = 0; b < batch.size(); ++b) {
    const attn_seq& s = c.seqs[batch[b]];
    const ref::ref_kv kv = cache_kv(c, batch[b], s.len);
    ref::ref_kv akv = kv;
    double vmax = 0;
    for (double& v : akv.v) vmax = std::max(vmax, v = std::fabs(v));
    for (int64_t t = s.len - n_new[b]; t < s.len; ++t, ++row)
      for (int h = 0; h < H; ++h) {
        const float* qp = s.qg.data() + (t * H + h) * 2 * D;
        const float* got = out.data() + (row * H + h) * D;
        if (std::find(skip.begin(), skip.end(), std::array<int64_t, 3>{int64_t(b), t, h}) != skip.end()) continue;
        const auto want = ref::attend_row(qp, qp + D, c.q_norm.data(), kv, c.shape, h, t, 0.0, int(bd.c_s) - 8);
        const auto mag = ref::attend_row(qp, qp + D, c.q_norm.data(), akv, c.shape, h, t, 0.0, int(bd.c_s) - 8);
        for (int d = 0; d < D; ++d) {
          const double w = want[size_t(d)].value;
          const double tol = want[size_t(d)].tol + bd.c_pv * u * mag[size_t(d)].value +
                             (bd.f16 ? std::ldexp(1.0, -40) * double(t + 1) * vmax : 0.0);
          const double err = std::fabs(double(got[d]) - w);
          worst = std::max(worst, err / tol);
          err2 += err * err, want2 += w * w;
          if (!(err <= tol)) {
            if (res.bad == 0)
              MESSAGE("first bad: seq " << b << " token " << t << " head " << h << " dim " << d << ": got " << got[d]
                                        << ", want " << w << " +- " << tol);
            ++res.bad;
          }
        }
      }
  }
  res.rms_rel = want2 > 0 ? std::sqrt(err2 / want2) : 0.0;
  MESSAGE("worst error / tolerance = " << worst << ", relative RMS error = " << res.rms_rel);
  return res;
}

// Checks out (the result of c's last step over `batch` with n_new tokens each) with the bound of the
// kernel that step ran; returns the number of bad elements.
inline int64_t check_step(attn_case& c, const std::vector<float>& out, const std::vector<size_t>& batch,
                          const std::vector<int64_t>& n_new) {
  return c.last_step_mma ? check_mma(c, out, batch, n_new).bad : c.check(out, batch, n_new);
}

}  // namespace q35::test
