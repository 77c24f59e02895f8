// One Gated DeltaNet test layer: random weights (f32 or a GGUF block format for the projections),
// their float64 copies, a state pool, and a runner that feeds a batch of sequences through
// launch::gdn_layer and checks every output against the float64 reference with its error bound.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <map>
#include <vector>

#include "kernels/weights.hpp"
#include "q35/kv/recurrent_state.hpp"
#include "q35/launch/gdn.hpp"
#include "q35/quant/formats.hpp"
#include "reference/gdn_reference.hpp"
#include "test_util.hpp"

namespace q35::test {

// A sequence of one batch: its slot and its tokens' layer inputs [n][n_embd].
struct gdn_seq {
  int slot;
  std::vector<float> x;
};

// Outcome of one checked call: elements outside value +- bound, and the largest |error| / bound.
struct gdn_check {
  int64_t bad = 0;
  double worst_ratio = 0;
};

template <class F = quant::f32_format>
struct gdn_case {
  launch::gdn_shape shape;
  ref::gdn_dims dims;
  ref::gdn_weights w64;
  std::vector<uint8_t> wqkv, wgate, wbeta, walpha, wout;  // GGUF bytes of F
  std::vector<float> conv, dt_bias, a, norm;
  device_buffer<uint8_t> d_qkv, d_gate, d_beta, d_alpha, d_out;
  device_buffer<float> d_conv, d_dt_bias, d_a, d_norm;
  kv::recurrent_state_pool pool;
  std::map<int, ref::gdn_state> ref_states;  // slot -> float64 state
  uint64_t seed;

  gdn_case(int n_k, int n_v, int head_dim, int n_embd, int n_slots, uint64_t seed_) : seed(seed_) {
    shape = {n_embd, n_k, n_v, head_dim, head_dim, 4, 1e-6f};
    dims.n_embd = n_embd, dims.n_k = n_k, dims.n_v = n_v, dims.dk = head_dim, dims.dv = head_dim;
    dims.conv_kernel = 4, dims.eps = 1e-6;
    const int64_t cd = shape.conv_dim(), vd = shape.value_dim();
    // Projection weights with elements ~U(-1, 1) (weights.hpp), scaled below through x and the
    // reference so that projections are O(1): x ~ U(-1, 1) / sqrt(n_embd) is the caller's choice.
    wqkv = random_weights<F>(cd, n_embd, seed);
    wgate = random_weights<F>(vd, n_embd, seed + 1);
    wbeta = random_weights<F>(n_v, n_embd, seed + 2);
    walpha = random_weights<F>(n_v, n_embd, seed + 3);
    wout = random_weights<F>(n_embd, vd, seed + 4);
    const auto deq = [](const std::vector<uint8_t>& b, int64_t n) {
      const std::vector<float> f = reference_weights<F>(b, n);
      return std::vector<double>(f.begin(), f.end());
    };
    w64.qkv = deq(wqkv, cd * n_embd), w64.gate = deq(wgate, vd * n_embd);
    w64.beta = deq(wbeta, int64_t(n_v) * n_embd), w64.alpha = deq(walpha, int64_t(n_v) * n_embd);
    w64.out = deq(wout, int64_t(n_embd) * vd);
    conv = random_floats(size_t(cd * 4), seed + 5, -0.6f, 0.6f);
    dt_bias = random_floats(size_t(n_v), seed + 6, -1.0f, 1.0f);
    // a = -exp(A_log), A_log ~ U(-3, 0.5): decays from ~0.95 to ~0.1 per token
    a = random_floats(size_t(n_v), seed + 7, -3.0f, 0.5f);
    for (auto& v : a) v = -std::exp(v);
    norm = random_floats(size_t(head_dim), seed + 8, 0.5f, 1.5f);
    w64.conv.assign(conv.begin(), conv.end()), w64.dt_bias.assign(dt_bias.begin(), dt_bias.end());
    w64.a.assign(a.begin(), a.end()), w64.norm.assign(norm.begin(), norm.end());
    d_qkv = to_device(wqkv), d_gate = to_device(wgate), d_beta = to_device(wbeta), d_alpha = to_device(walpha);
    d_out = to_device(wout), d_conv = to_device(conv), d_dt_bias = to_device(dt_bias), d_a = to_device(a);
    d_norm = to_device(norm);
    kv::gdn_state_shape ss{1, n_slots, n_k, n_v, head_dim, head_dim, 4};
    Q35_REQUIRE_OK(pool.allocate(ss));
  }

  quant::weight_view view(const device_buffer<uint8_t>& b, int64_t rows, int64_t cols) const {
    quant::weight_view v;
    v.data = b.data(), v.type = uint32_t(F::id), v.rows = rows, v.cols = cols;
    return v;
  }
  launch::gdn_layer_weights weights() const {
    launch::gdn_layer_weights w;
    w.qkv = view(d_qkv, shape.conv_dim(), shape.n_embd), w.gate = view(d_gate, shape.value_dim(), shape.n_embd);
    w.beta = view(d_beta, shape.n_v_heads, shape.n_embd), w.alpha = view(d_alpha, shape.n_v_heads, shape.n_embd);
    w.out = view(d_out, shape.n_embd, shape.value_dim());
    w.conv1d = d_conv.data(), w.dt_bias = d_dt_bias.data(), w.a = d_a.data(), w.norm = d_norm.data();
    return w;
  }

  // Random layer inputs for n tokens (O(1) projections: x ~ U(-1, 1) * 2 / sqrt(n_embd)).
  std::vector<float> inputs(int n, uint64_t s) const {
    const float r = 2.0f / std::sqrt(float(shape.n_embd));
    return random_floats(size_t(n) * size_t(shape.n_embd), s, -r, r);
  }

  // Runs one batch through gdn_layer on the device (h starts as h0) and returns h.
  std::vector<float> run_device(const std::vector<gdn_seq>& seqs, const std::vector<float>& h0,
                                launch::gdn_core_mode mode) {
    std::vector<int32_t> offsets{0}, slots;
    std::vector<float> x;
    int longest = 0;
    for (const auto& s : seqs) {
      const int n = int(s.x.size() / size_t(shape.n_embd));
      offsets.push_back(offsets.back() + n);
      slots.push_back(s.slot);
      x.insert(x.end(), s.x.begin(), s.x.end());
      longest = std::max(longest, n);
    }
    const int64_t n_tokens = offsets.back();
    auto d_off = to_device(offsets);
    auto d_slots = slots.empty() ? device_buffer<int32_t>{} : to_device(slots);
    auto d_x = x.empty() ? device_buffer<float>{} : to_device(x);
    auto d_h = h0.empty() ? device_buffer<float>{} : to_device(h0);
    device_buffer<uint8_t> ws;
    Q35_REQUIRE_OK(ws.allocate(launch::gdn_layer_workspace_bytes(shape, n_tokens)));
    Q35_REQUIRE_OK(fill_bytes(ws.data(), 0xff, ws.bytes()));  // scratch read before written shows as NaN
    launch::gdn_layer_args la;
    la.shape = shape, la.w = weights();
    la.batch = {d_off.data(), d_slots.data(), int(seqs.size()), n_tokens, longest, offsets.data(), slots.data()};
    la.state = pool.layer(0), la.x = d_x.data(), la.h = d_h.data();
    la.workspace = ws.data(), la.workspace_bytes = ws.bytes(), la.mode = mode;
    Q35_REQUIRE_OK(launch::gdn_layer(la));
    return h0.empty() ? std::vector<float>{} : to_host(d_h);
  }

  // The float64 expectation of the same batch run in `mode` (advances the reference states; the bound
  // follows the form of the core that ran) and the comparison.
  gdn_check check(const std::vector<gdn_seq>& seqs, const std::vector<float>& h0, const std::vector<float>& h,
                  launch::gdn_core_mode mode, bool interleaved = false) {
    ref::gdn_dims d = dims;
    d.interleaved = interleaved;
    gdn_check r;
    size_t row = 0, n_tokens = 0;
    int longest = 0;
    for (const auto& s : seqs) {
      n_tokens += s.x.size() / size_t(shape.n_embd);
      longest = std::max(longest, int(s.x.size() / size_t(shape.n_embd)));
    }
    d.chunked_mma = launch::detail::gdn_use_chunked(mode, longest);
    // block formats may take the GEMV's 16-bit activation path for decode-sized calls
    const bool act16 = F::id != quant::type_id::f32 && n_tokens <= size_t(launch::gemv_max_tokens);
    for (const auto& s : seqs) {
      auto it = ref_states.try_emplace(s.slot, dims).first;
      const size_t n = s.x.size() / size_t(shape.n_embd);
      for (size_t t = 0; t < n; ++t, ++row) {
        const ref::bounded o = ref::gdn_layer_token(d, w64, it->second, s.x.data() + t * size_t(shape.n_embd), act16);
        for (int c = 0; c < shape.n_embd; ++c) {
          const size_t at = row * size_t(shape.n_embd) + size_t(c);
          const double want = double(h0[at]) + o.v[size_t(c)];
          const double tol = o.e[size_t(c)] + ref::gdn_u * std::fabs(want);
          const double err = std::fabs(double(h[at]) - want);
          if (!(err <= tol)) ++r.bad;
          r.worst_ratio = std::max(r.worst_ratio, std::isfinite(err) ? err / tol : 1e30);
        }
      }
    }
    return r;
  }

  // Device run + check: every output within its bound.
  gdn_check run(const std::vector<gdn_seq>& seqs, launch::gdn_core_mode mode) {
    size_t n = 0;
    for (const auto& s : seqs) n += s.x.size();
    const std::vector<float> h0 = random_floats(n, seed + 99 + n, -2.0f, 2.0f);
    const std::vector<float> h = run_device(seqs, h0, mode);
    return check(seqs, h0, h, mode);
  }

  void reset_slot(int slot) {
    Q35_REQUIRE_OK(pool.reset(slot));
    ref_states.erase(slot);
  }
};

}  // namespace q35::test
