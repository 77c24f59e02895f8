// Host cost of the GEMV API: validation that passes allocates nothing (messages are built only on
// the failing path), and a failure still names the bad value. Counts allocations by replacing the
// global operator new for this test binary (it forwards to malloc; counting only inside a scope).
// Sim build only: nvcc treats a replaced operator new as device-capable and rejects its throw; the
// validation code is the same host code in both builds.
#include "q35/core/config.hpp"
#if Q35_BACKEND_SIM
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <new>
#include <vector>

#include "q35/launch/gemv.hpp"
#include "test_util.hpp"

namespace {
std::atomic<int64_t> g_allocations{0};
thread_local bool g_counting = false;
}  // namespace

void* operator new(std::size_t n) {
  if (g_counting) g_allocations.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }

namespace {

using namespace q35;

// Heap allocations made by f() on this thread.
template <class F>
int64_t allocations_in(F&& f) {
  const int64_t before = g_allocations.load();
  g_counting = true;
  f();
  g_counting = false;
  return g_allocations.load() - before;
}

TEST_CASE("gemv: validation that passes allocates nothing on the host") {
  alignas(16) static float x[512];
  static float y[64];
  static quant::block_q4_k w[8];
  static int32_t ids[2];
  static int flag;
  launch::gemv_args<quant::q4_k_format> a;
  a.w = w, a.x = x, a.y = y, a.rows = 2, a.cols = 512, a.n_tokens = 8;
  auto e = a;  // expert mode over a merged gate_up tensor
  e.maybe_w_up = w + 2, e.epilogue = launch::gemv_epilogue::swiglu, e.maybe_expert_ids = ids, e.n_pairs = 2;
  e.n_experts = 2, e.expert_stride_bytes = 4 * 2 * 144, e.maybe_error_flag = &flag;
  const int32_t host_ids[] = {1, 0};
  bool ok = false;
  CHECK(allocations_in([&] {
          ok = launch::validate(a).ok() && launch::validate(e).ok() && launch::validate_expert_ids(host_ids, 2).ok();
        }) == 0);
  CHECK(ok);
  // the failing path still names the value
  a.n_tokens = 9;
  CHECK(launch::validate(a).message() == "gemv q4_K: n_tokens = 9 is outside 1..8 (use launch::matmul for prompts)");
}

}  // namespace
#endif  // Q35_BACKEND_SIM
