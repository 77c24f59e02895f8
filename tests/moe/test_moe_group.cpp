// launch::moe_group (launch/moe.hpp: pairs grouped by expert: CUB radix sort on CUDA, the q35 counting-sort kernel
// on sim and on request) against a host stable sort: sorted pairs, offsets and tile starts exact.
#include <doctest/doctest.h>

#include <algorithm>
#include <numeric>
#include <random>
#include <vector>

#include "q35/launch/moe.hpp"
#include "test_util.hpp"

namespace q35 {
namespace {

struct grouped {
  std::vector<int32_t> sorted_pairs, offsets, tile_starts;
  int error_flag = 0;
};

grouped run_group(const std::vector<int32_t>& ids, int n_experts, launch::moe_group_backend backend) {
  const int32_t n = int32_t(ids.size());
  device_buffer<int32_t> d_ids = test::to_device(ids.empty() ? std::vector<int32_t>{0} : ids);
  auto sorted = test::poisoned<int32_t>(size_t(std::max(n, 1)));
  auto offsets = test::poisoned<int32_t>(size_t(n_experts + 1));
  auto tiles = test::poisoned<int32_t>(size_t(n_experts + 1));
  device_buffer<int> flag = test::to_device(std::vector<int>{0});
  device_buffer<uint8_t> temp = test::poisoned<uint8_t>(launch::moe_group_temp_bytes(n, n_experts) + 1);
  launch::moe_group_args a;
  a.ids = d_ids.data(), a.sorted_pairs = sorted.data(), a.offsets = offsets.data(), a.tile_starts = tiles.data();
  a.n_pairs = n, a.n_experts = n_experts, a.error_flag = flag.data(), a.temp = temp.data();
  a.temp_bytes = temp.bytes(), a.backend = backend;
  Q35_REQUIRE_OK(launch::moe_group(a));
  grouped g{test::to_host(sorted), test::to_host(offsets), test::to_host(tiles), test::to_host(flag)[0]};
  g.sorted_pairs.resize(size_t(n));
  return g;
}

// Host reference: stable sort of the pair indices by id; empty slots (-1) and invalid ids (outside
// [0, E), which set the flag) in no group.
void check_group(const std::vector<int32_t>& ids, int n_experts, const grouped& g) {
  std::vector<int32_t> want;
  std::vector<int32_t> offsets(size_t(n_experts + 1), 0), tiles(size_t(n_experts + 1), 0);
  bool invalid = false;
  for (int e = 0; e < n_experts; ++e) {
    offsets[size_t(e)] = int32_t(want.size());
    for (int32_t p = 0; p < int32_t(ids.size()); ++p)
      if (ids[size_t(p)] == e) want.push_back(p);
    const int32_t count = int32_t(want.size()) - offsets[size_t(e)];
    tiles[size_t(e + 1)] = tiles[size_t(e)] + (count + kernels::moe_group_tile - 1) / kernels::moe_group_tile;
  }
  offsets[size_t(n_experts)] = int32_t(want.size());
  for (int32_t id : ids) invalid |= (id < 0 || id >= n_experts) && id != ops::router_empty_slot;
  CHECK(g.offsets == offsets);
  CHECK(g.tile_starts == tiles);
  CHECK(std::equal(want.begin(), want.end(), g.sorted_pairs.begin()));
  CHECK(g.error_flag == int(invalid));
}

std::vector<launch::moe_group_backend> backends() {
#if Q35_BACKEND_CUDA
  return {launch::moe_group_backend::automatic, launch::moe_group_backend::q35};
#else
  return {launch::moe_group_backend::automatic};
#endif
}

}  // namespace

TEST_CASE("moe_group: random ids, every expert count, against a host stable sort" * test::needs_device()) {
  for (const auto backend : backends()) {
    for (const int n_experts : {1, 8, 64, 256, 512}) {
      for (const int32_t n_pairs : {0, 1, 31, 800, 4096}) {
        CAPTURE(n_experts);
        CAPTURE(n_pairs);
        std::mt19937 rng(uint32_t(n_experts * 7919 + n_pairs));
        std::vector<int32_t> ids(static_cast<size_t>(n_pairs));
        for (auto& v : ids) v = int32_t(rng() % uint32_t(n_experts));
        check_group(ids, n_experts, run_group(ids, n_experts, backend));
      }
    }
  }
}

TEST_CASE("moe_group: all pairs on one expert; invalid ids set the flag and join no group" * test::needs_device()) {
  for (const auto backend : backends()) {
    std::vector<int32_t> ids(100, 3);
    check_group(ids, 8, run_group(ids, 8, backend));
    ids[10] = -2, ids[50] = 8, ids[70] = 1000;
    check_group(ids, 8, run_group(ids, 8, backend));
  }
}

TEST_CASE("moe_group: empty slots (-1, adaptive top-k) join no group and are not an error" * test::needs_device()) {
  for (const auto backend : backends()) {
    std::vector<int32_t> ids(200);
    for (size_t i = 0; i < ids.size(); ++i) ids[i] = i % 3 == 1 ? ops::router_empty_slot : int32_t(i % 16);
    const grouped g = run_group(ids, 16, backend);
    CHECK(g.error_flag == 0);
    check_group(ids, 16, g);
  }
}

TEST_CASE("moe_group: every thread order" * test::needs_device()) {
  std::vector<int32_t> ids(300);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = int32_t((i * 37) % 16);
  test::for_each_order([&] { check_group(ids, 16, run_group(ids, 16, launch::moe_group_backend::automatic)); });
}

}  // namespace q35
