// launch::gdn validation and the recurrent-state pool's bookkeeping: each bad value is a status
// whose message names it; nothing runs.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "gdn_case.hpp"

namespace {

using namespace q35;

// The status message of a call that must fail with invalid_argument.
std::string refused(const status& s) {
  CHECK(s.code() == status_code::invalid_argument);
  return s.message();
}

bool has(const std::string& msg, const std::string& part) {
  INFO(msg);
  return msg.find(part) != std::string::npos;
}

}  // namespace

TEST_CASE("gdn validate: bad shapes, batches and workspaces name the value" * test::needs_device()) {
  test::gdn_case<> g(2, 4, 64, 64, 2, 1);
  std::vector<int32_t> offsets{0, 3, 5}, slots{0, 1};
  auto d_off = test::to_device(offsets);
  auto d_slots = test::to_device(slots);
  device_buffer<float> x, h;
  Q35_REQUIRE_OK(x.allocate(5 * 64));
  Q35_REQUIRE_OK(h.allocate(5 * 64));
  device_buffer<uint8_t> ws;
  Q35_REQUIRE_OK(ws.allocate(launch::gdn_layer_workspace_bytes(g.shape, 5)));
  launch::gdn_layer_args a;
  a.shape = g.shape, a.w = g.weights(), a.state = g.pool.layer(0), a.x = x.data(), a.h = h.data();
  a.batch = {d_off.data(), d_slots.data(), 2, 5, 3, offsets.data(), slots.data()};
  a.workspace = ws.data(), a.workspace_bytes = ws.bytes();
  Q35_REQUIRE_OK(launch::validate(a));

  auto b = a;
  b.shape.n_v_heads = 5;
  CHECK(has(refused(launch::validate(b)), "n_v_heads = 5 is not a multiple of n_k_heads = 2"));
  b = a, b.shape.k_head_dim = b.shape.v_head_dim = 96;
  CHECK(has(refused(launch::validate(b)), "head dim 96"));
  b = a, b.shape.v_head_dim = 128;
  CHECK(has(refused(launch::validate(b)), "v_head_dim = 128"));
  b = a, b.workspace_bytes -= 1;
  CHECK(has(refused(launch::validate(b)), "workspace"));
  b = a, b.w.out.rows = 63;
  CHECK(has(refused(launch::validate(b)), "ssm_out weight is 63 x 256"));
  b = a, b.w.conv1d = nullptr;
  CHECK(has(refused(launch::validate(b)), "ssm_conv1d"));
  b = a, b.x = nullptr;
  CHECK(has(refused(launch::validate(b)), "x or h is null"));
  std::vector<int32_t> bad_slots{1, 2};
  b = a, b.batch.maybe_host_slots = bad_slots.data();
  CHECK(has(refused(launch::validate(b)), "slots[1] = 2 is outside 0..1"));
  std::vector<int32_t> twice{1, 1};
  b = a, b.batch.maybe_host_slots = twice.data();
  CHECK(has(refused(launch::validate(b)), "slot 1 appears twice"));
  std::vector<int32_t> bad_off{0, 4, 3};
  b = a, b.batch.maybe_host_seq_offsets = bad_off.data();
  CHECK(has(refused(launch::validate(b)), "seq_offsets[2] = 3"));
  b = a, b.batch.max_seq_tokens = 2;
  CHECK(has(refused(launch::validate(b)), "exceeds max_seq_tokens = 2"));
  b = a, b.state = g.pool.layer(1);
  CHECK(has(refused(launch::validate(b)), "state view is empty"));
  b = a, b.batch.n_seqs = 3;
  CHECK(has(refused(launch::validate(b)), "n_seqs = 3 exceeds the pool's 2 slots"));
  // an empty batch is a successful no-op
  b = a, b.batch = {d_off.data(), d_slots.data(), 0, 0, 0, nullptr, nullptr};
  Q35_REQUIRE_OK(launch::gdn_layer(b));
}

TEST_CASE("recurrent_state_pool: layout, reset, copy, snapshot, restore and bad slots" * test::needs_device()) {
  kv::recurrent_state_pool pool;
  CHECK(has(refused(pool.reset(0)), "not allocated"));
  kv::gdn_state_shape s{3, 2, 2, 4, 64, 64, 4};
  CHECK(has(refused(kv::recurrent_state_pool{}.allocate({3, 2, 2, 5, 64, 64, 4})), "n_v_heads = 5"));
  Q35_REQUIRE_OK(pool.allocate(s));
  // conv (K - 1) x n_v x (2 d_k + d_v) + ssm n_v x d_v x d_k floats per layer and slot
  const size_t layer_floats = size_t(3 * 4 * 192 + 4 * 64 * 64);
  CHECK(pool.slot_bytes() == 3 * layer_floats * sizeof(float));
  const kv::gdn_state_view v1 = pool.layer(1);
  CHECK(v1.slot_stride == int64_t(3 * layer_floats));
  CHECK(v1.ssm(0) - v1.conv(0) == 3 * 4 * 192);
  CHECK(reinterpret_cast<uintptr_t>(v1.ssm(1)) % 16 == 0);
  CHECK(pool.layer(3).empty());
  CHECK(pool.layer(-1).empty());

  std::vector<uint8_t> snap;
  Q35_REQUIRE_OK(pool.snapshot(1, snap));
  for (uint8_t byte : snap) REQUIRE(byte == 0);  // allocate() zeroes
  // fill slot 0 with a pattern through restore, copy it to slot 1, read it back, reset
  std::vector<uint8_t> pattern(pool.slot_bytes());
  for (size_t i = 0; i < pattern.size(); ++i) pattern[i] = uint8_t(i * 7 + 1);
  Q35_REQUIRE_OK(pool.restore(0, pattern));
  Q35_REQUIRE_OK(pool.copy(0, 1));
  Q35_REQUIRE_OK(pool.snapshot(1, snap));
  CHECK(snap == pattern);
  Q35_REQUIRE_OK(pool.reset(0));
  Q35_REQUIRE_OK(pool.snapshot(0, snap));
  CHECK(std::all_of(snap.begin(), snap.end(), [](uint8_t b) { return b == 0; }));
  Q35_REQUIRE_OK(pool.snapshot(1, snap));
  CHECK(snap == pattern);  // the other slot is untouched

  CHECK(has(refused(pool.reset(2)), "slot = 2 is outside 0..1"));
  CHECK(has(refused(pool.copy(0, -1)), "dst_slot = -1"));
  CHECK(has(refused(pool.snapshot(5, snap)), "slot = 5"));
  pattern.push_back(0);
  CHECK(has(refused(pool.restore(0, pattern)), "snapshot holds"));
}
