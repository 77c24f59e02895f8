// kv::kv_pool, kv::page_allocator and kv::page_table_host: host-side bookkeeping, exhaustion as a
// status, copy-on-fork of the partial last page, the CSR table, and the pool's layer views.
#include <cstdint>
#include <cstring>
#include <set>
#include <vector>

#include "q35/kv/kv_pool.hpp"
#include "q35/kv/page_table.hpp"
#include "test_util.hpp"

namespace {

using namespace q35;

TEST_CASE("page_allocator: reserve takes whole pages, free returns them, ids and pages are reused") {
  kv::page_allocator a(8, 16);
  const int s0 = a.add_sequence(), s1 = a.add_sequence();
  CHECK(s0 != s1);
  Q35_REQUIRE_OK(a.reserve(s0, 1));
  CHECK(a.pages(s0).size() == 1);
  Q35_REQUIRE_OK(a.reserve(s0, 16));
  CHECK(a.pages(s0).size() == 1);
  Q35_REQUIRE_OK(a.reserve(s0, 17));
  CHECK(a.pages(s0).size() == 2);
  CHECK(a.length(s0) == 17);
  Q35_REQUIRE_OK(a.reserve(s1, 48));
  CHECK(a.free_pages() == 3);
  std::set<int32_t> used(a.pages(s0).begin(), a.pages(s0).end());
  used.insert(a.pages(s1).begin(), a.pages(s1).end());
  CHECK(used.size() == 5);                                           // no page handed out twice
  CHECK(a.reserve(s0, 10).code() == status_code::invalid_argument);  // shrinking is not an append
  a.free(s1);
  CHECK(a.free_pages() == 6);
  CHECK_FALSE(a.valid(s1));
  CHECK(a.reserve(s1, 1).code() == status_code::invalid_argument);
  const int s2 = a.add_sequence();
  CHECK(s2 == s1);
  CHECK(a.length(s2) == 0);
}

TEST_CASE("page_allocator: running out of pages is a status and changes nothing") {
  kv::page_allocator a(4, 16);
  const int s = a.add_sequence();
  Q35_REQUIRE_OK(a.reserve(s, 40));
  const auto before = a.pages(s);
  const status r = a.reserve(s, 65);
  CHECK(r.code() == status_code::out_of_memory);
  CHECK(r.message().find("out of pages") != std::string::npos);
  CHECK(a.length(s) == 40);
  CHECK(a.pages(s) == before);
  CHECK(a.free_pages() == 1);
  Q35_REQUIRE_OK(a.reserve(s, 64));
  int dst = -1;
  CHECK(a.fork(s, dst).ok());  // full pages only: nothing to copy, no page needed
  Q35_REQUIRE_OK(a.reserve(s, 64));
  const int t = a.add_sequence();
  Q35_REQUIRE_OK(a.reserve(t, 0));
  CHECK(a.reserve(t, 1).code() == status_code::out_of_memory);
}

TEST_CASE("page_allocator: fork shares full pages, copies the partial last page, frees by reference count") {
  kv::page_allocator a(10, 16);
  const int s = a.add_sequence();
  Q35_REQUIRE_OK(a.reserve(s, 40));  // pages: 2 full + 1 partial
  int d = -1;
  Q35_REQUIRE_OK(a.fork(s, d));
  CHECK(a.length(d) == 40);
  const auto ps = a.pages(s), pd = a.pages(d);
  REQUIRE(pd.size() == 3);
  CHECK(ps[0] == pd[0]);
  CHECK(ps[1] == pd[1]);
  CHECK(ps[2] != pd[2]);
  const auto copies = a.take_pending_copies();
  REQUIRE(copies.size() == 1);
  CHECK(copies[0].src == ps[2]);
  CHECK(copies[0].dst == pd[2]);
  CHECK(a.take_pending_copies().empty());
  CHECK(a.free_pages() == 6);
  a.free(s);  // the shared pages stay with d
  CHECK(a.free_pages() == 7);
  a.free(d);
  CHECK(a.free_pages() == 10);
  // a fork with no free page for its partial page fails and changes nothing
  kv::page_allocator b(2, 16);
  const int x = b.add_sequence();
  Q35_REQUIRE_OK(b.reserve(x, 20));
  int y = -1;
  CHECK(b.fork(x, y).code() == status_code::out_of_memory);
  CHECK(b.free_pages() == 0);
  CHECK(b.take_pending_copies().empty());
}

TEST_CASE("page_table_host: CSR rows, page indices, last-page lengths") {
  kv::page_allocator a(16, 4);
  const int s0 = a.add_sequence(), s1 = a.add_sequence(), s2 = a.add_sequence();
  Q35_REQUIRE_OK(a.reserve(s0, 9));
  Q35_REQUIRE_OK(a.reserve(s1, 4));
  Q35_REQUIRE_OK(a.reserve(s2, 0));
  kv::page_table_host t;
  const std::vector<int> batch{s1, s2, s0};
  Q35_REQUIRE_OK(t.build(a, batch));
  CHECK(t.row_offsets == std::vector<int32_t>{0, 1, 1, 4});
  CHECK(t.seq_lens == std::vector<int32_t>{4, 0, 9});
  CHECK(t.last_page_len == std::vector<int32_t>{4, 0, 1});
  std::vector<int32_t> want = a.pages(s1);
  want.insert(want.end(), a.pages(s0).begin(), a.pages(s0).end());
  CHECK(t.page_indices == want);
  CHECK(t.build(a, std::vector<int>{7}).code() == status_code::invalid_argument);
}

TEST_CASE("kv_pool: one allocation, per-layer views, page copies in every layer, shape errors named" *
          test::needs_device()) {
  kv::kv_pool pool;
  kv::kv_pool_shape s{3, 2, 128, 128, 16, 5, kv::kv_type::f16};
  Q35_REQUIRE_OK(pool.allocate(s));
  const size_t page = size_t(2 * 16 * 128) * 2;
  CHECK(pool.bytes() == 3 * 2 * 5 * page);
  const kv::kv_layer_view l0 = pool.layer(0), l2 = pool.layer(2);
  CHECK(static_cast<unsigned char*>(l0.v) - static_cast<unsigned char*>(l0.k) == ptrdiff_t(5 * page));
  CHECK(static_cast<unsigned char*>(l2.k) - static_cast<unsigned char*>(l0.k) == ptrdiff_t(2 * 2 * 5 * page));
  CHECK(l2.page_tokens == 16);
  CHECK(l2.type == kv::kv_type::f16);
  CHECK(pool.layer(3).empty());
  CHECK(pool.layer(-1).empty());
  // fill every layer's page 1 with a pattern, copy it to page 4
  for (int l = 0; l < 3; ++l) {
    std::vector<unsigned char> pat(page, uint8_t(l + 1));
    Q35_REQUIRE_OK(
        copy(static_cast<unsigned char*>(pool.layer(l).k) + page, pat.data(), page, copy_kind::host_to_device));
    std::vector<unsigned char> vp(page, uint8_t(l + 11));
    Q35_REQUIRE_OK(
        copy(static_cast<unsigned char*>(pool.layer(l).v) + page, vp.data(), page, copy_kind::host_to_device));
  }
  Q35_REQUIRE_OK(pool.copy_pages({{1, 4}}));
  Q35_REQUIRE_OK(synchronize());
  for (int l = 0; l < 3; ++l) {
    std::vector<unsigned char> k(page), v(page);
    Q35_REQUIRE_OK(
        copy(k.data(), static_cast<unsigned char*>(pool.layer(l).k) + 4 * page, page, copy_kind::device_to_host));
    Q35_REQUIRE_OK(
        copy(v.data(), static_cast<unsigned char*>(pool.layer(l).v) + 4 * page, page, copy_kind::device_to_host));
    Q35_REQUIRE_OK(synchronize());
    CHECK(k == std::vector<unsigned char>(page, uint8_t(l + 1)));
    CHECK(v == std::vector<unsigned char>(page, uint8_t(l + 11)));
  }
  CHECK(pool.copy_pages({{1, 5}}).code() == status_code::invalid_argument);

  kv::kv_pool bad;
  kv::kv_pool_shape b = s;
  b.page_tokens = 12;
  CHECK(bad.allocate(b).message().find("page_tokens = 12") != std::string::npos);
  b = s, b.n_pages = 0;
  CHECK(bad.allocate(b).message().find("n_pages = 0") != std::string::npos);
  b = s, b.head_dim = 4;
  CHECK(bad.allocate(b).code() == status_code::invalid_argument);
  CHECK(kv::kv_type_bytes(kv::kv_type::bf16) == 2);
  CHECK(kv::kv_type_bytes(kv::kv_type::f32) == 4);
}

}  // namespace
