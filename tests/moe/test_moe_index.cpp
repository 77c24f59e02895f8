// moe_ffn with experts reached through per-expert matrix indexes (moe_weights::maybe_index, an expert
// cache): experts scattered over arenas in shuffled order, gate/up and down with different indexes,
// give the packed tensors' outputs bit for bit on the decode kernels (with and without adaptive top-k);
// on the grouped path, staged into packed experts (only the selected ones, a window at a time) first,
// except those in the index's in-place range (device slots), which the grouped GEMMs read in place.
#include <doctest/doctest.h>

#include <algorithm>
#include <array>
#include <numeric>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "moe/moe_case.hpp"

namespace q35 {
namespace {

struct scattered {
  device_buffer<uint8_t> gu, dn;
  device_buffer<int32_t> index_gu, index_dn;
  launch::moe_weights w;
};

// c's routed experts copied into two arenas of E + 5 matrices each, expert e's gate+up at matrix
// pg[e] (gate rows then up rows), its down at pd[e]: two independent shuffles.
scattered scatter(const test::moe_case& c, uint32_t seed) {
  const launch::moe_weights& w = c.weights;
  const int E = int(w.gate_exps.n_mats);
  const int64_t gate_bytes = w.gate_exps.rows * w.gate_exps.row_bytes();
  const int64_t gu_stride = 2 * gate_bytes, dn_stride = w.down_exps.rows * w.down_exps.row_bytes();
  const int V = E + 5;
  std::mt19937 rng(seed);
  std::vector<int32_t> pg(static_cast<size_t>(V)), pd(static_cast<size_t>(V));
  std::iota(pg.begin(), pg.end(), 0), std::iota(pd.begin(), pd.end(), 0);
  std::shuffle(pg.begin(), pg.end(), rng), std::shuffle(pd.begin(), pd.end(), rng);
  pg.resize(size_t(E)), pd.resize(size_t(E));
  scattered s;
  Q35_REQUIRE_OK(s.gu.allocate(size_t(V) * size_t(gu_stride)));
  Q35_REQUIRE_OK(s.dn.allocate(size_t(V) * size_t(dn_stride)));
  Q35_REQUIRE_OK(fill_bytes(s.gu.data(), 0x7f, s.gu.bytes()));  // unused matrices: garbage
  Q35_REQUIRE_OK(fill_bytes(s.dn.data(), 0x7f, s.dn.bytes()));
  const auto* g = static_cast<const uint8_t*>(w.gate_exps.data);
  const auto* u = static_cast<const uint8_t*>(w.up_exps.data);
  const auto* d = static_cast<const uint8_t*>(w.down_exps.data);
  for (int e = 0; e < E; ++e) {
    uint8_t* to = s.gu.data() + pg[size_t(e)] * gu_stride;
    Q35_REQUIRE_OK(copy(to, g + e * w.gate_exps.stride_bytes(), size_t(gate_bytes), copy_kind::device_to_device));
    Q35_REQUIRE_OK(
        copy(to + gate_bytes, u + e * w.up_exps.stride_bytes(), size_t(gate_bytes), copy_kind::device_to_device));
    Q35_REQUIRE_OK(copy(s.dn.data() + pd[size_t(e)] * dn_stride, d + e * w.down_exps.stride_bytes(), size_t(dn_stride),
                        copy_kind::device_to_device));
  }
  s.index_gu = test::to_device(pg), s.index_dn = test::to_device(pd);
  s.w = w;
  s.w.gate_exps = {s.gu.data(), w.gate_exps.type, w.gate_exps.cols, w.gate_exps.rows, E, gu_stride};
  s.w.up_exps = {s.gu.data() + gate_bytes, w.up_exps.type, w.up_exps.cols, w.up_exps.rows, E, gu_stride};
  s.w.down_exps = {s.dn.data(), w.down_exps.type, w.down_exps.cols, w.down_exps.rows, E, dn_stride};
  s.w.maybe_index = {s.index_gu.data(), s.index_dn.data(), V};
  return s;
}

test::moe_run run(const test::moe_case& c, const launch::moe_weights& w, const ops::route_options& route = {}) {
  const test::moe_case_spec& s = c.spec;
  device_buffer<float> x = test::to_device(c.x), h = test::to_device(c.h0);
  device_buffer<int> flag = test::to_device(std::vector<int>{0});
  launch::ffn_layer_args a;
  a.shape = test::shape_of(s), a.route = route;
  a.x = x.data(), a.h = h.data(), a.n_tokens = s.n_tokens, a.error_flag = flag.data();
  device_buffer<uint8_t> ws = test::poisoned<uint8_t>(launch::moe_workspace_bytes(a.shape, s.n_tokens));
  a.workspace = ws.data(), a.workspace_bytes = ws.bytes();
  Q35_REQUIRE_OK(launch::moe_ffn(a, w));
  return {test::to_host(h), test::to_host(flag)[0]};
}

// n bytes of device memory at p, on the host.
std::vector<uint8_t> bytes_of(const void* p, size_t n) {
  std::vector<uint8_t> out(n);
  Q35_REQUIRE_OK(copy(out.data(), p, n, copy_kind::device_to_host));
  return out;
}

}  // namespace

TEST_CASE("moe_ffn through an expert index: scattered experts give the packed outputs bit for bit" *
          test::needs_device()) {
  for (const uint32_t type :
       {uint32_t(quant::type_id::q4_k), uint32_t(quant::type_id::q6_k), uint32_t(quant::type_id::q8_0)}) {
    for (const int64_t n_tokens : {int64_t(1), int64_t(8)}) {
      CAPTURE(type);
      CAPTURE(n_tokens);
      test::moe_case_spec s;
      s.n_experts = 16, s.k = 4, s.n_tokens = n_tokens, s.seed = 5100 + uint64_t(n_tokens) + type;
      s.type = type, s.down_type = uint32_t(quant::type_id::q6_k);
      const test::moe_case c = test::make_moe_case(s);
      const scattered sc = scatter(c, uint32_t(type + n_tokens));
      const test::moe_run want = run(c, c.weights), got = run(c, sc.w);
      CHECK(want.error_flag == 0);
      CHECK(got.error_flag == 0);
      CHECK(got.h == want.h);
      test::check_moe(c, got);  // and within the float64 reference's bound
      ops::route_options adaptive;
      adaptive.adaptive = true;
      adaptive.adaptive_k.entropy_below[0] = 2.5f, adaptive.adaptive_k.entropy_below[1] = 2.7f;
      adaptive.adaptive_k.k_values[0] = 1, adaptive.adaptive_k.k_values[1] = 2, adaptive.adaptive_k.k_values[2] = 4;
      CHECK(run(c, sc.w, adaptive).h == run(c, c.weights, adaptive).h);
    }
  }
}

// The grouped path (more than 8 tokens) stages the experts the call selected into the staging area a
// window at a time and runs each window's packed GEMM on it: outputs bit-identical to the packed
// tensors' for windows of 1 expert (each window overwrites the last), of 5 (not dividing 32) and of
// all 32 (one pass), with gate/up and down matrices of different strides; and so with experts read
// in place (an in-place range covering some gate+up and other down matrices, or all of them).
TEST_CASE("moe_ffn through an expert index: the grouped path stages windows of experts" * test::needs_device()) {
  for (const uint32_t type : {uint32_t(quant::type_id::q4_k), uint32_t(quant::type_id::q8_0)}) {
    CAPTURE(type);
    test::moe_case_spec s;
    s.n_experts = 32, s.k = 2, s.n_tokens = 12, s.seed = 5300 + type;
    s.type = type, s.down_type = uint32_t(quant::type_id::q6_k);
    const test::moe_case c = test::make_moe_case(s);
    scattered sc = scatter(c, 11 + type);
    const test::moe_run want = run(c, c.weights);
    // in-place ranges (of the 37 matrices of each arena): none, some experts' gate+up and others' down,
    // every matrix (nothing staged)
    const std::vector<std::array<int32_t, 4>> ranges = {{0, 0, 0, 0}, {3, 20, 11, 37}, {0, 37, 0, 37}};
    for (const int window : {1, 5, 32}) {
      for (const auto& r : ranges) {
        CAPTURE(window);
        CAPTURE(r[0]);
        CAPTURE(r[2]);
        const size_t bytes = launch::moe_staging_bytes(sc.w, window);
        CHECK(bytes == size_t(window) * size_t(std::max(sc.w.gate_exps.stride_bytes(), sc.w.down_exps.stride_bytes())));
        device_buffer<uint8_t> staging = test::poisoned<uint8_t>(bytes);
        sc.w.maybe_index.maybe_staging = staging.data(), sc.w.maybe_index.staging_bytes = bytes;
        sc.w.maybe_index.in_place_gu_begin = r[0], sc.w.maybe_index.in_place_gu_end = r[1];
        sc.w.maybe_index.in_place_dn_begin = r[2], sc.w.maybe_index.in_place_dn_end = r[3];
        const test::moe_run got = run(c, sc.w);
        CHECK(got.error_flag == 0);
        CHECK(got.h == want.h);
        test::check_moe(c, got);
      }
    }
  }
}

// One window's copy (moe_stage_kernel through launch::detail::moe_stage_window): the window's selected
// experts (offsets with pairs), and only those, land at their place in the window, gate+up or down
// matrices as asked, unless their index lies in the in-place range; the rest of the area keeps its
// poison; the packed views name the window; expert_at gives each selected expert's bytes from the
// window: its place there, or its matrix in the arena for one read in place.
TEST_CASE("moe_ffn through an expert index: a staging window copies only its selected experts" * test::needs_device()) {
  test::moe_case_spec s;
  s.n_experts = 16, s.k = 2, s.n_tokens = 12, s.seed = 5400;
  s.type = uint32_t(quant::type_id::q4_k), s.down_type = uint32_t(quant::type_id::q6_k);
  const test::moe_case c = test::make_moe_case(s);
  const scattered sc = scatter(c, 17);
  const launch::moe_weights& w = c.weights;
  const int64_t gate_bytes = w.gate_exps.rows * w.gate_exps.row_bytes();
  const int64_t gu_stride = 2 * gate_bytes, dn_stride = w.down_exps.rows * w.down_exps.row_bytes();
  // experts 3, 4, 7, 9 and 12 have pairs; the window is experts [4, 10)
  const std::vector<int> pairs = {0, 0, 0, 2, 1, 0, 0, 3, 0, 1, 0, 0, 4, 0, 0, 0};
  std::vector<int32_t> offsets(1, 0);
  for (const int p : pairs) offsets.push_back(offsets.back() + p);
  device_buffer<int32_t> d_offsets = test::to_device(offsets);
  device_buffer<int> flag = test::to_device(std::vector<int>{0});
  const int begin = 4, n = 6;
  const std::vector<uint8_t> g = bytes_of(w.gate_exps.data, size_t(s.n_experts) * size_t(gate_bytes));
  const std::vector<uint8_t> u = bytes_of(w.up_exps.data, size_t(s.n_experts) * size_t(gate_bytes));
  const std::vector<uint8_t> d = bytes_of(w.down_exps.data, size_t(s.n_experts) * size_t(dn_stride));
  const std::vector<int32_t> index_gu = test::to_host(sc.index_gu), index_dn = test::to_host(sc.index_dn);
  for (const bool in_place : {false, true})
    for (const bool gate_up : {true, false}) {
      CAPTURE(in_place);
      CAPTURE(gate_up);
      const int64_t stride = gate_up ? gu_stride : dn_stride;
      const std::vector<int32_t>& index = gate_up ? index_gu : index_dn;
      const size_t bytes = size_t(n + 1) * size_t(gu_stride);  // room past the window: must stay poisoned
      device_buffer<uint8_t> staging = test::poisoned<uint8_t>(bytes);
      launch::moe_weights iw = sc.w;
      iw.maybe_index.maybe_staging = staging.data(), iw.maybe_index.staging_bytes = bytes;
      // in place: the matrices at the index of expert 7 and above (of the window's selected 4, 7 and 9,
      // the ones whose index lies there)
      const int32_t cut = index[7], lo = in_place ? cut : 0, hi = in_place ? sc.w.maybe_index.n_virtual : 0;
      (gate_up ? iw.maybe_index.in_place_gu_begin : iw.maybe_index.in_place_dn_begin) = lo;
      (gate_up ? iw.maybe_index.in_place_gu_end : iw.maybe_index.in_place_dn_end) = hi;
      const auto read_in_place = [&](int e) { return index[size_t(e)] >= lo && index[size_t(e)] < hi; };
      device_buffer<int64_t> expert_at = test::poisoned<int64_t>(size_t(s.n_experts));
      quant::weight_view packed, packed_up;
      Q35_REQUIRE_OK(launch::detail::moe_stage_window(iw, d_offsets.data(), begin, n, gate_up, expert_at.data(),
                                                      flag.data(), packed, packed_up, nullptr));
      Q35_REQUIRE_OK(synchronize(nullptr));
      CHECK(test::to_host(flag)[0] == 0);
      const std::vector<int64_t> at_host = test::to_host(expert_at);
      const uint8_t* arena = gate_up ? sc.gu.data() : sc.dn.data();
      for (const int e : {4, 7, 9}) {
        CAPTURE(e);
        const int64_t want = read_in_place(e) ? int64_t(reinterpret_cast<uintptr_t>(arena + index[size_t(e)] * stride) -
                                                        reinterpret_cast<uintptr_t>(staging.data()))
                                              : (e - begin) * stride;
        CHECK(at_host[size_t(e)] == want);
      }
      if (in_place) CHECK(read_in_place(7));
      CHECK(packed.data == staging.data());
      CHECK(packed.n_mats == n);
      CHECK(packed.stride_bytes() == stride);
      if (gate_up) CHECK(static_cast<const uint8_t*>(packed_up.data) == staging.data() + gate_bytes);
      const std::vector<uint8_t> st = test::to_host(staging);
      const std::vector<uint8_t> poison = test::to_host(test::poisoned<uint8_t>(bytes));
      int n_copied = 0, bad = 0;
      for (int i = 0; i * stride + stride <= int64_t(bytes); ++i) {
        const int e = begin + i;
        const uint8_t* at = st.data() + size_t(i) * size_t(stride);
        if (i < n && pairs[size_t(e)] > 0 && !read_in_place(e)) {
          ++n_copied;
          if (gate_up) {
            bad += !std::equal(at, at + gate_bytes, g.begin() + e * gate_bytes);
            bad += !std::equal(at + gate_bytes, at + gu_stride, u.begin() + e * gate_bytes);
          } else {
            bad += !std::equal(at, at + dn_stride, d.begin() + e * dn_stride);
          }
        } else {
          bad += !std::equal(at, at + stride, poison.begin() + i * stride);
        }
      }
      CHECK(bad == 0);
      // experts 4, 7 and 9, less those read in place
      CHECK(n_copied == 3 - int(read_in_place(4)) - int(read_in_place(7)) - int(read_in_place(9)));
    }
}

TEST_CASE("moe_ffn through an expert index: a missing staging area and a bad index are refused" *
          test::needs_device()) {
  test::moe_case_spec s;
  s.n_experts = 8, s.k = 2, s.n_tokens = 9, s.seed = 5200;
  const test::moe_case c = test::make_moe_case(s);
  scattered sc = scatter(c, 3);
  device_buffer<float> x = test::to_device(c.x), h = test::to_device(c.h0);
  device_buffer<int> flag = test::to_device(std::vector<int>{0});
  launch::ffn_layer_args a;
  a.shape = test::shape_of(s), a.x = x.data(), a.h = h.data(), a.n_tokens = 9, a.error_flag = flag.data();
  device_buffer<uint8_t> ws = test::poisoned<uint8_t>(launch::moe_workspace_bytes(a.shape, 9));
  a.workspace = ws.data(), a.workspace_bytes = ws.bytes();
  const std::string need = std::to_string(launch::moe_staging_bytes(sc.w, 1)) + " needed for one expert (" +
                           std::to_string(launch::moe_staging_bytes(sc.w)) + " stage all 8 at once)";
  CHECK(launch::moe_ffn(a, sc.w).message().find("0 bytes (256-byte aligned) given, " + need) != std::string::npos);
  device_buffer<uint8_t> staging;
  Q35_REQUIRE_OK(staging.allocate(launch::moe_staging_bytes(sc.w, 1)));
  sc.w.maybe_index.maybe_staging = staging.data(), sc.w.maybe_index.staging_bytes = staging.bytes() - 1;
  CHECK(launch::moe_ffn(a, sc.w).message().find(need) != std::string::npos);
  sc.w.maybe_index.staging_bytes = staging.bytes();
  launch::moe_weights split = sc.w;  // up matrices outside the gate's stride: not one merged expert
  split.up_exps.data = static_cast<const uint8_t*>(sc.w.gate_exps.data) + sc.w.gate_exps.stride_bytes();
  CHECK(launch::moe_ffn(a, split).message().find("which must hold both matrices") != std::string::npos);
  for (const auto& [b, e] : {std::pair{-1, 3}, std::pair{4, 3}, std::pair{0, 14}}) {  // n_virtual = 13
    launch::moe_weights bad = sc.w;
    bad.maybe_index.in_place_dn_begin = b, bad.maybe_index.in_place_dn_end = e;
    CHECK(launch::moe_ffn(a, bad).message().find("the in-place range of down [" + std::to_string(b) + ", " +
                                                 std::to_string(e) + ") is not within [0, n_virtual = 13]") !=
          std::string::npos);
  }
  a.n_tokens = 2;
  sc.w.maybe_index.n_virtual = 0;
  CHECK(launch::moe_ffn(a, sc.w).message().find("n_virtual = 0") != std::string::npos);
}

}  // namespace q35
