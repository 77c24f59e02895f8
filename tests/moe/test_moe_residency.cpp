// launch::moe_ffn reading experts through offset tables (moe_weights::maybe_*_offsets), the form an
// expert cache gives them: some experts moved to slots of another allocation in a shuffled order, the
// rest left where the file put them, and the moved experts' original bytes then overwritten with
// garbage. The result must be bit-identical to the run on the untouched layout, on the decode kernels
// (1, 3, 8 tokens) and on the grouped prefill GEMMs (40 tokens), for integer and float formats and a
// merged gate/up tensor; the garbage must change the result of a run that ignores the tables.
#include <doctest/doctest.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "moe/moe_case.hpp"

namespace q35 {
namespace {

using quant::type_id;
constexpr uint32_t id(type_id t) { return uint32_t(t); }

int64_t byte_offset(const void* to, const void* from) {
  return int64_t(reinterpret_cast<uintptr_t>(to)) - int64_t(reinterpret_cast<uintptr_t>(from));
}

// Experts e with e % 3 != 0 move to slots of `store` in the order 'odd ones first, descending'; their
// offsets tables point there. Returns the tables (device) and keeps the store alive.
struct relocated {
  device_buffer<uint8_t> store;
  device_buffer<int64_t> gate, up, down;
};

relocated relocate(test::moe_case& c) {
  const int E = c.spec.n_experts;
  launch::moe_weights& w = c.weights;
  const quant::weight_view* views[3] = {&w.gate_exps, &w.up_exps, &w.down_exps};
  int64_t mat_bytes[3], slot_bytes = 0;
  for (int m = 0; m < 3; ++m) {
    mat_bytes[m] = views[m]->rows * views[m]->row_bytes();
    slot_bytes += (mat_bytes[m] + 255) / 256 * 256;
  }
  std::vector<int> moved;
  for (int e = E - 1; e >= 0; --e)
    if (e % 3 != 0 && e % 2 == 1) moved.push_back(e);
  for (int e = E - 1; e >= 0; --e)
    if (e % 3 != 0 && e % 2 == 0) moved.push_back(e);
  relocated r;
  Q35_REQUIRE_OK(r.store.allocate(size_t(slot_bytes) * moved.size() + 256));
  std::vector<int64_t> off[3];
  for (int m = 0; m < 3; ++m) {
    off[m].resize(size_t(E));
    for (int e = 0; e < E; ++e) off[m][size_t(e)] = int64_t(e) * views[m]->stride_bytes();
  }
  uint8_t* at = r.store.data();
  for (const int e : moved) {
    for (int m = 0; m < 3; ++m) {
      const auto* src = static_cast<const uint8_t*>(views[m]->data) + off[m][size_t(e)];
      Q35_REQUIRE_OK(copy(at, src, size_t(mat_bytes[m]), copy_kind::device_to_device));
      off[m][size_t(e)] = byte_offset(at, views[m]->data);
      at += (mat_bytes[m] + 255) / 256 * 256;
    }
  }
  Q35_REQUIRE_OK(synchronize());
  // the moved experts' original bytes: garbage (a run reading them cannot match)
  for (const int e : moved)
    for (int m = 0; m < 3; ++m) {
      auto* orig =
          const_cast<uint8_t*>(static_cast<const uint8_t*>(views[m]->data)) + int64_t(e) * views[m]->stride_bytes();
      Q35_REQUIRE_OK(fill_bytes(orig, 0x5a, size_t(mat_bytes[m])));
    }
  Q35_REQUIRE_OK(synchronize());
  r.gate = test::to_device(off[0]), r.up = test::to_device(off[1]), r.down = test::to_device(off[2]);
  return r;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

void check_relocated(const test::moe_case_spec& s) {
  test::moe_case c = test::make_moe_case(s);
  const test::moe_run in_place = test::run_moe(c);
  const relocated r = relocate(c);
  const test::moe_run ignoring = test::run_moe(c);  // tables not set: reads the garbage
  CHECK(!same_bits(ignoring.h, in_place.h));
  c.weights.maybe_gate_offsets = r.gate.data(), c.weights.maybe_up_offsets = r.up.data();
  c.weights.maybe_down_offsets = r.down.data();
  const test::moe_run through = test::run_moe(c);
  CHECK(through.error_flag == 0);
  CHECK(same_bits(through.h, in_place.h));
}

}  // namespace

TEST_CASE("moe_ffn: experts read through offset tables equal the in-place layout, bit for bit" * test::needs_device()) {
  for (const int64_t n_tokens : {1, 3, 8, 40}) {  // the decode kernels, then the grouped GEMMs
    CAPTURE(n_tokens);
    test::moe_case_spec s;
    s.n_experts = 16, s.k = 4, s.n_tokens = n_tokens, s.seed = 900 + uint64_t(n_tokens);
    s.type = s.sh_type = id(type_id::q4_k);
    s.down_type = s.sh_down_type = id(type_id::q6_k);
    check_relocated(s);
    s.merged_gate_up = true;  // gate and up rows of one tensor
    check_relocated(s);
    s.merged_gate_up = false;
    s.type = s.down_type = s.sh_type = s.sh_down_type = id(type_id::f16);  // the split-float GEMM
    check_relocated(s);
    s.type = s.down_type = id(type_id::q8_0), s.shared_ff = 0;  // the float decode path, no shared expert
    check_relocated(s);
  }
}

TEST_CASE("moe_ffn: offset tables come all three or none" * test::needs_device()) {
  test::moe_case_spec s;
  s.n_tokens = 2;
  test::moe_case c = test::make_moe_case(s);
  device_buffer<int64_t> t = test::to_device(std::vector<int64_t>(size_t(s.n_experts), 0));
  c.weights.maybe_gate_offsets = t.data(), c.weights.maybe_up_offsets = t.data();
  device_buffer<float> x = test::to_device(c.x), h = test::to_device(c.h0);
  device_buffer<int> flag = test::to_device(std::vector<int>{0});
  launch::ffn_layer_args a;
  a.shape = test::shape_of(s);
  a.x = x.data(), a.h = h.data(), a.n_tokens = s.n_tokens, a.error_flag = flag.data();
  device_buffer<uint8_t> ws = test::poisoned<uint8_t>(launch::moe_workspace_bytes(a.shape, s.n_tokens));
  a.workspace = ws.data(), a.workspace_bytes = ws.bytes();
  const status st = launch::moe_ffn(a, c.weights);
  CHECK(!st.ok());
  CHECK(st.to_string().find("expert offset tables: 2 of gate, up and down are given; give all three or none") !=
        std::string::npos);
}

}  // namespace q35
