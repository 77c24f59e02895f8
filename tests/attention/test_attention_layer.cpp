// launch::attention_layer (projections, append, attention, gate, out-projection residual) on one
// sequence: a 20-token prompt (GEMM projections), a decode step, a 5-token chunk (GEMV projections).
//
// Tolerance: the q/gate/k/v projections are recomputed here with the same launch::matmul calls (the
// GEMV/GEMM engines are deterministic and tested in tests/kernels), so the attention output o is
// checked through the float64 reference from those fp32 projections with its bound tol_o
// (tests/reference/attention_reference.hpp). The out-projection then adds, per output r,
//   sum_c |W_rc| tol_o_c                      (o's error carried through W)
//   (cols + 9) u (sum_c |W_rc o_c| + that)    (the fp32 dot, GEMM chain depth cols + 1, Higham)
//   u (|h0| + |h|)                            (the residual add)
#include <cmath>
#include <cstdint>
#include <vector>

#include "q35/kv/kv_pool.hpp"
#include "q35/kv/page_table.hpp"
#include "q35/launch/attention.hpp"
#include "q35/launch/matmul.hpp"
#include "reference/attention_reference.hpp"
#include "test_util.hpp"

namespace {

using namespace q35;

struct layer_fixture {
  static constexpr int E = 256, H = 4, KV = 2, D = 128, R = 32;
  launch::attn_shape shape{E, H, KV, D, D, R, 1e7f, 1e-6f};
  ref::attn_ref_shape rshape{H, KV, D, R, 1e7, 1e-6};
  std::vector<float> wq, wk, wv, wo, q_norm, k_norm;
  device_buffer<float> dwq, dwk, dwv, dwo, dqn, dkn;
  kv::kv_pool pool;
  kv::page_allocator alloc{64, 16};
  int seq = alloc.add_sequence();
  std::vector<float> hist_k, hist_v;  // fp32 projections of every token so far
  uint64_t seed = 7;

  static std::vector<float> weights(size_t n, uint64_t s) {
    auto w = test::random_floats(n, s);
    for (auto& x : w) x *= 0.1f;
    return w;
  }
  static quant::weight_view view(const device_buffer<float>& b, int64_t rows, int64_t cols) {
    quant::weight_view v;
    v.data = b.data(), v.type = 0, v.rows = rows, v.cols = cols;  // ggml f32
    return v;
  }
  layer_fixture() {
    wq = weights(size_t(2 * H * D * E), 1), wk = weights(size_t(KV * D * E), 2), wv = weights(size_t(KV * D * E), 3);
    wo = weights(size_t(E * H * D), 4);
    q_norm = test::random_floats(D, 5, 0.5f, 1.5f), k_norm = test::random_floats(D, 6, 0.5f, 1.5f);
    dwq = test::to_device(wq), dwk = test::to_device(wk), dwv = test::to_device(wv), dwo = test::to_device(wo);
    dqn = test::to_device(q_norm), dkn = test::to_device(k_norm);
    Q35_REQUIRE_OK(pool.allocate({1, KV, D, D, 16, 64, kv::kv_type::f32}));
  }
  launch::attn_layer_weights w() const {
    return {view(dwq, 2 * H * D, E), view(dwk, KV * D, E), view(dwv, KV * D, E),
            view(dwo, E, H * D),     dqn.data(),           dkn.data()};
  }

  // y = W x through launch::matmul, as attention_layer runs it.
  std::vector<float> project(const device_buffer<float>& dw, int64_t rows, const device_buffer<float>& dx, int64_t n) {
    auto dy = test::poisoned<float>(size_t(n * rows));
    device_buffer<unsigned char> ws;
    Q35_REQUIRE_OK(ws.allocate(std::max<size_t>(1, launch::matmul_workspace_bytes(E, n, rows))));
    launch::matmul_args m;
    m.w = view(dw, rows, E), m.x = dx.data(), m.y = dy.data(), m.n_tokens = n;
    m.maybe_workspace = ws.data(), m.workspace_bytes = ws.bytes();
    Q35_REQUIRE_OK(launch::matmul(m));
    return test::to_host(dy);
  }

  // One call of n new tokens; returns the number of outputs outside their bound.
  int64_t run(int64_t n) {
    const int64_t pos0 = alloc.length(seq);
    const auto x = test::random_floats(size_t(n * E), seed++), h0 = test::random_floats(size_t(n * E), seed++);
    auto dx = test::to_device(x), dh = test::to_device(h0);
    Q35_REQUIRE_OK(alloc.reserve(seq, pos0 + n));
    kv::page_table_host pt;
    Q35_REQUIRE_OK(pt.build(alloc, std::vector<int>{seq}));
    std::vector<int32_t> offs{0, int32_t(n)}, pos;
    for (int64_t t = 0; t < n; ++t) pos.push_back(int32_t(pos0 + t));
    auto d_offs = test::to_device(offs), d_pos = test::to_device(pos), d_rows = test::to_device(pt.row_offsets);
    auto d_pages = test::to_device(pt.page_indices), d_lens = test::to_device(pt.seq_lens);

    launch::attn_layer_args a;
    a.shape = shape, a.w = w(), a.kv = pool.layer(0), a.x = dx.data(), a.h = dh.data();
    a.batch = {d_offs.data(), d_pos.data(), d_rows.data(), d_pages.data(), d_lens.data(), 1, n, int(n), pos0 + n, 0};
    device_buffer<unsigned char> ws;
    Q35_REQUIRE_OK(ws.allocate(launch::attn_layer_workspace_bytes(shape, n, pos0 + n)));
    Q35_REQUIRE_OK(fill_bytes(ws.data(), 0xff, ws.bytes()));
    a.workspace = ws.data(), a.workspace_bytes = ws.bytes();
    Q35_REQUIRE_OK(launch::attention_layer(a));
    const auto h = test::to_host(dh);

    // expected, from the same fp32 projections
    const auto qg = project(dwq, 2 * H * D, dx, n), k = project(dwk, KV * D, dx, n), v = project(dwv, KV * D, dx, n);
    hist_k.insert(hist_k.end(), k.begin(), k.end());
    hist_v.insert(hist_v.end(), v.begin(), v.end());
    ref::ref_kv kv;
    const int64_t len = pos0 + n;
    kv.k.resize(size_t(len * KV * D)), kv.kmag.resize(kv.k.size()), kv.v.resize(kv.k.size());
    for (int64_t t = 0; t < len; ++t)
      for (int g = 0; g < KV; ++g) {
        const size_t o = size_t((t * KV + g) * D);
        ref::norm_rope(hist_k.data() + o, k_norm.data(), rshape, t, kv.k.data() + o, kv.kmag.data() + o);
        for (int d = 0; d < D; ++d) kv.v[o + size_t(d)] = hist_v[o + size_t(d)];
      }
    const double u = std::ldexp(1.0, -24);
    int64_t bad = 0;
    for (int64_t t = 0; t < n; ++t) {
      std::vector<ref::attn_expect> o;
      for (int hd = 0; hd < H; ++hd) {
        const float* qp = qg.data() + (t * H + hd) * 2 * D;
        const auto r = ref::attend_row(qp, qp + D, q_norm.data(), kv, rshape, hd, pos0 + t, 0.0, 4);
        o.insert(o.end(), r.begin(), r.end());
      }
      for (int r = 0; r < E; ++r) {
        double want = h0[size_t(t * E + r)], carried = 0, mag = 0;
        for (int c = 0; c < H * D; ++c) {
          const double wrc = wo[size_t(r * H * D + c)];
          want += wrc * o[size_t(c)].value;
          carried += std::fabs(wrc) * o[size_t(c)].tol;
          mag += std::fabs(wrc * o[size_t(c)].value);
        }
        const double tol =
            carried + (H * D + 9) * u * (mag + carried) + u * (std::fabs(h0[size_t(t * E + r)]) + std::fabs(want));
        const double got = h[size_t(t * E + r)];
        if (!(std::fabs(got - want) <= tol)) {
          if (bad == 0)
            MESSAGE("token " << t << " output " << r << ": got " << got << ", want " << want << " +- " << tol);
          ++bad;
        }
      }
    }
    return bad;
  }
};

TEST_CASE("attention_layer: prompt, decode step and a chunk against float64" * test::needs_device()) {
  layer_fixture f;
  CHECK(f.run(20) == 0);
  CHECK(f.run(1) == 0);
  CHECK(f.run(5) == 0);
}

TEST_CASE("attention_layer: validation names the bad weight and the workspace" * test::needs_device()) {
  layer_fixture f;
  launch::attn_layer_args a;
  a.shape = f.shape, a.w = f.w(), a.kv = f.pool.layer(0);
  a.workspace = reinterpret_cast<void*>(256), a.workspace_bytes = launch::attn_layer_workspace_bytes(f.shape, 0, 0);
  Q35_REQUIRE_OK(launch::validate(a));
  launch::attn_layer_args b = a;
  b.w.k.rows = 100;
  CHECK(launch::validate(b).message().find("weight k is 100 x 256, expected 256 x 256") != std::string::npos);
  b = a, b.w.q_norm = nullptr;
  CHECK(launch::validate(b).message().find("q_norm") != std::string::npos);
  b = a, b.workspace_bytes = 0;
  CHECK(launch::validate(b).message().find("workspace of 0 bytes") != std::string::npos);
  b = a, b.shape.n_embd = 0;
  CHECK(launch::validate(b).code() == status_code::invalid_argument);
}

}  // namespace
