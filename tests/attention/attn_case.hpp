// A batch of sequences run through a paged KV pool: random projections per token, history appended in
// earlier calls, one step (append + decode or prefill) checked against the float64 reference.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <string>
#include <vector>

#include "q35/kv/kv_pool.hpp"
#include "q35/kv/page_table.hpp"
#include "q35/launch/attention.hpp"
#include "reference/attention_reference.hpp"
#include "test_util.hpp"

namespace q35::test {

inline double kv_unit_roundoff(kv::kv_type t) {
  return t == kv::kv_type::f32 ? 0.0 : t == kv::kv_type::f16 ? std::ldexp(1.0, -11) : std::ldexp(1.0, -8);
}

// Dims per lane of the attention kernel's key stream (for the score-error bound).
inline int attn_lane_elems(kv::kv_type t, int head_dim) {
  const int lanes = std::min(32, head_dim * int(kv::kv_type_bytes(t)) / 16);
  return head_dim / lanes;
}

// One sequence: the projections of all its tokens (those already cached and the new ones).
struct attn_seq {
  int id = -1;            // allocator id
  int64_t len = 0;        // tokens whose K/V are in the cache
  std::vector<float> qg;  // [tokens][n_heads][2 D]
  std::vector<float> k;   // [tokens][n_kv_heads][D]
  std::vector<float> v;   // [tokens][n_kv_heads][D]
};

class attn_case {
 public:
  ref::attn_ref_shape shape;
  launch::attn_shape lshape;
  kv::kv_type type;
  kv::kv_pool pool;
  kv::page_allocator alloc;
  std::vector<attn_seq> seqs;
  std::vector<float> q_norm, k_norm;
  device_buffer<float> d_q_norm, d_k_norm;
  uint64_t seed;
  bool last_step_mma = false;  // the last step ran attn_prefill_mma_kernel (prefill over f16 / bf16 KV)

  attn_case(int n_kv_heads, int group, int head_dim, int rope_dim, kv::kv_type t, int page_tokens, int64_t n_pages,
            uint64_t seed_)
      : type(t), seed(seed_) {
    shape = {n_kv_heads * group, n_kv_heads, head_dim, rope_dim, 1e7, 1e-6};
    lshape.n_heads = shape.n_heads, lshape.n_kv_heads = n_kv_heads, lshape.head_dim = head_dim;
    lshape.value_dim = head_dim, lshape.rope_dim = rope_dim, lshape.rope_theta = 1e7f, lshape.rms_eps = 1e-6f;
    Q35_REQUIRE_OK(pool.allocate({1, n_kv_heads, head_dim, head_dim, page_tokens, n_pages, t}));
    alloc.reset(n_pages, page_tokens);
    q_norm = random_floats(size_t(head_dim), seed * 7 + 1, 0.5f, 1.5f);
    k_norm = random_floats(size_t(head_dim), seed * 7 + 2, 0.5f, 1.5f);
    d_q_norm = to_device(q_norm);
    d_k_norm = to_device(k_norm);
  }

  // Appends n random tokens' projections to sequence i (a new sequence when i == seqs.size()).
  void grow(size_t i, int64_t n) {
    if (i == seqs.size()) {
      seqs.emplace_back();
      seqs[i].id = alloc.add_sequence();
    }
    attn_seq& s = seqs[i];
    const uint64_t sd = seed * 1000003 + i * 7919 + s.qg.size();
    const int D = shape.head_dim;
    auto add = [&](std::vector<float>& dst, size_t count, uint64_t salt, float lo, float hi) {
      auto r = random_floats(count, sd + salt, lo, hi);
      dst.insert(dst.end(), r.begin(), r.end());
    };
    add(s.qg, size_t(n * shape.n_heads * 2 * D), 1, -1.0f, 1.0f);
    add(s.k, size_t(n * shape.n_kv_heads * D), 2, -1.0f, 1.0f);
    add(s.v, size_t(n * shape.n_kv_heads * D), 3, -1.0f, 1.0f);
    // gates in [-3, 3]: sigmoid far from saturation on both sides
    for (int64_t t = int64_t(s.qg.size()) / (shape.n_heads * 2 * D) - n;
         t < int64_t(s.qg.size()) / (shape.n_heads * 2 * D); ++t)
      for (int h = 0; h < shape.n_heads; ++h)
        for (int d = 0; d < D; ++d) s.qg[size_t((t * shape.n_heads + h) * 2 * D + D + d)] *= 3.0f;
  }

  int64_t total_tokens(size_t i) const { return int64_t(seqs[i].k.size()) / (shape.n_kv_heads * shape.head_dim); }

  int split_keys = 0;  // attn_batch::split_keys of every step (0: sized from the batch)
  int seq_splits = 0;  // attn_batch::seq_splits of every step
  int split_rows = 0;  // attn_batch::split_rows of every step (the workspace is sized for it)

  struct step_result {
    status st;
    std::vector<float> out;  // [new tokens of the batch][n_heads][D]
  };

  // Runs append (+ attention unless append_only) for the tokens len .. len + n_new[b] - 1 of
  // sequences `batch`; their projections must exist (grow). Returns the attention output.
  step_result step(const std::vector<size_t>& batch, const std::vector<int64_t>& n_new, bool prefill, int n_splits,
                   bool append_only = false) {
    const int D = shape.head_dim, H = shape.n_heads, KV = shape.n_kv_heads;
    std::vector<int32_t> seq_offsets{0}, positions;
    std::vector<float> qg, k, v;
    std::vector<int> ids;
    int max_tokens = 0;
    int64_t max_len = 0;
    for (size_t b = 0; b < batch.size(); ++b) {
      attn_seq& s = seqs[batch[b]];
      const int64_t n = n_new[b];
      for (int64_t t = s.len; t < s.len + n; ++t) {
        positions.push_back(int32_t(t));
        qg.insert(qg.end(), s.qg.begin() + t * H * 2 * D, s.qg.begin() + (t + 1) * H * 2 * D);
        k.insert(k.end(), s.k.begin() + t * KV * D, s.k.begin() + (t + 1) * KV * D);
        v.insert(v.end(), s.v.begin() + t * KV * D, s.v.begin() + (t + 1) * KV * D);
      }
      seq_offsets.push_back(int32_t(positions.size()));
      const status r = alloc.reserve(s.id, s.len + n);
      if (!r.ok()) return {r, {}};
      ids.push_back(s.id);
      max_tokens = std::max(max_tokens, int(n));
      max_len = std::max(max_len, s.len + n);
    }
    kv::page_table_host pt;
    Q35_REQUIRE_OK(pt.build(alloc, ids));
    const int64_t n_tokens = int64_t(positions.size());
    auto d_off = to_device(seq_offsets), d_pos = to_device(positions);
    auto d_rows = to_device(pt.row_offsets), d_lens = to_device(pt.seq_lens);
    auto d_pages = to_device(pt.page_indices.empty() ? std::vector<int32_t>{0} : pt.page_indices);
    auto d_qg = to_device(qg.empty() ? std::vector<float>{0} : qg);
    auto d_k = to_device(k.empty() ? std::vector<float>{0} : k), d_v = to_device(v.empty() ? std::vector<float>{0} : v);
    auto d_out = poisoned<float>(std::max<size_t>(1, size_t(n_tokens * H * D)));
    device_buffer<unsigned char> ws;
    Q35_REQUIRE_OK(ws.allocate(
        launch::attn_split_workspace_bytes(lshape, split_rows ? split_rows : launch::attn_split_row_budget)));
    Q35_REQUIRE_OK(fill_bytes(ws.data(), 0xff, ws.bytes()));

    launch::attn_batch bt;
    bt.seq_offsets = d_off.data(), bt.positions = d_pos.data(), bt.page_row_offsets = d_rows.data();
    bt.page_indices = d_pages.data(), bt.seq_lens = d_lens.data();
    bt.n_seqs = int(batch.size()), bt.n_tokens = n_tokens, bt.max_seq_tokens = max_tokens, bt.max_seq_len = max_len;
    bt.n_splits = n_splits, bt.split_keys = split_keys, bt.seq_splits = seq_splits, bt.split_rows = split_rows;
    launch::attn_append_args ap{lshape,     bt,         pool.layer(0),   d_qg.data(),
                                d_k.data(), d_v.data(), d_q_norm.data(), d_k_norm.data()};
    const launch::attn_core_args c{lshape, bt, pool.layer(0), d_qg.data(), d_out.data(), ws.data(), ws.bytes()};
    const status r = [&] {
      Q35_TRY(launch::attention_append(ap));
      if (append_only) return status::success();
      return prefill ? launch::attention_prefill(c) : launch::attention_decode(c);
    }();
    if (!r.ok()) return {r, {}};
    last_step_mma = prefill && !append_only && type != kv::kv_type::f32;
    for (size_t b = 0; b < batch.size(); ++b) seqs[batch[b]].len += n_new[b];
    return {status::success(), append_only ? std::vector<float>{} : to_host(d_out)};
  }

  // Writes the K/V of sequence i's tokens len .. n-1 straight into their pages from the host, as the
  // append kernel would store them (K = T(rope(rms(k) * w)) rounded once, V = T(v)): a long history
  // without running the append kernel over it on the sim.
  void fill_direct(size_t i, int64_t n) {
    attn_seq& s = seqs[i];
    Q35_REQUIRE_OK(alloc.reserve(s.id, n));
    const kv::kv_layer_view view = pool.layer(0);
    const int D = shape.head_dim, KV = shape.n_kv_heads, P = view.page_tokens;
    const size_t eb = kv::kv_type_bytes(type);
    const size_t region = size_t(view.n_pages) * size_t(KV * P * D) * eb;
    std::vector<unsigned char> hk(region), hv(region);
    Q35_REQUIRE_OK(copy(hk.data(), view.k, region, copy_kind::device_to_host));
    Q35_REQUIRE_OK(copy(hv.data(), view.v, region, copy_kind::device_to_host));
    Q35_REQUIRE_OK(synchronize());
    std::vector<double> k(static_cast<size_t>(D)), mag(static_cast<size_t>(D));
    const auto put = [&](unsigned char* dst, float x) {
      if (type == kv::kv_type::f32) {
        std::memcpy(dst, &x, 4);
      } else {
        const uint16_t b =
            type == kv::kv_type::f16 ? q35::detail::float_to_half_bits(x) : q35::detail::float_to_bf16_bits(x);
        std::memcpy(dst, &b, 2);
      }
    };
    for (int64_t t = s.len; t < n; ++t) {
      const int64_t page = alloc.pages(s.id)[size_t(t / P)];
      for (int h = 0; h < KV; ++h) {
        const size_t o = size_t((t * KV + h) * D);
        ref::norm_rope(s.k.data() + o, k_norm.data(), shape, t, k.data(), mag.data());
        const size_t at = size_t(((page * KV + h) * P + t % P) * D) * eb;
        for (int d = 0; d < D; ++d) {
          put(hk.data() + at + size_t(d) * eb, float(k[size_t(d)]));
          put(hv.data() + at + size_t(d) * eb, s.v[o + size_t(d)]);
        }
      }
    }
    Q35_REQUIRE_OK(copy(view.k, hk.data(), region, copy_kind::host_to_device));
    Q35_REQUIRE_OK(copy(view.v, hv.data(), region, copy_kind::host_to_device));
    Q35_REQUIRE_OK(synchronize());
    s.len = n;
  }

  // The float64 K/V of sequence i's first n tokens.
  ref::ref_kv reference_kv(size_t i, int64_t n) const {
    const int D = shape.head_dim, KV = shape.n_kv_heads;
    ref::ref_kv r;
    r.k.resize(size_t(n * KV * D)), r.kmag.resize(r.k.size()), r.v.resize(r.k.size());
    for (int64_t t = 0; t < n; ++t)
      for (int h = 0; h < KV; ++h) {
        const size_t o = size_t((t * KV + h) * D);
        ref::norm_rope(seqs[i].k.data() + o, k_norm.data(), shape, t, r.k.data() + o, r.kmag.data() + o);
        for (int d = 0; d < D; ++d) r.v[o + size_t(d)] = double(seqs[i].v[o + size_t(d)]);
      }
    return r;
  }

  // Checks out (the result of step over `batch` with n_new tokens each) against float64; returns the
  // number of bad elements.
  int64_t check(const std::vector<float>& out, const std::vector<size_t>& batch, const std::vector<int64_t>& n_new) {
    // the fp32 dot's score bound is not attn_prefill_mma_kernel's (attn_mma_check.hpp, check_step)
    REQUIRE_MESSAGE(!last_step_mma, "the last step ran attn_prefill_mma_kernel: check it with check_step");
    const int D = shape.head_dim, H = shape.n_heads;
    int64_t row = 0, bad = 0;
    double worst = 0;
    for (size_t b = 0; b < batch.size(); ++b) {
      const attn_seq& s = seqs[batch[b]];
      const ref::ref_kv kv = reference_kv(batch[b], s.len);
      for (int64_t t = s.len - n_new[b]; t < s.len; ++t, ++row)
        for (int h = 0; h < H; ++h) {
          const float* qp = s.qg.data() + (t * H + h) * 2 * D;
          const auto want = ref::attend_row(qp, qp + D, q_norm.data(), kv, shape, h, t, kv_unit_roundoff(type),
                                            attn_lane_elems(type, D));
          for (int d = 0; d < D; ++d) {
            const double got = out[size_t((row * H + h) * D + d)];
            const double err = std::fabs(got - want[size_t(d)].value);
            worst = std::max(worst, err / want[size_t(d)].tol);
            if (!(err <= want[size_t(d)].tol)) {
              if (bad == 0) INFO_first(b, t, h, d, got, want[size_t(d)]);
              ++bad;
            }
          }
        }
    }
    MESSAGE("worst error / tolerance = " << worst);
    return bad;
  }

 private:
  static void INFO_first(size_t b, int64_t t, int h, int d, double got, const ref::attn_expect& w) {
    MESSAGE("first bad: seq " << b << " token " << t << " head " << h << " dim " << d << ": got " << got << ", want "
                              << w.value << " +- " << w.tol);
  }
};

// Prefills sequence 0 of c in `chunks` (one split each; prefill also for a 1-token chunk, so the
// same kernel instance serves every chunk) and returns the outputs joined in token order.
inline std::vector<float> prefill_in_chunks(attn_case& c, std::initializer_list<int64_t> chunks) {
  std::vector<float> joined;
  for (const int64_t n : chunks) {
    auto r = c.step({0}, {n}, true, 1);
    Q35_REQUIRE_OK(r.st);
    joined.insert(joined.end(), r.out.begin(), r.out.end());
  }
  return joined;
}

// Elements of a and b whose float values differ (both the same size).
inline int64_t count_differences(const std::vector<float>& a, const std::vector<float>& b) {
  REQUIRE(a.size() == b.size());
  int64_t diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff += a[i] != b[i];
  return diff;
}

}  // namespace q35::test
