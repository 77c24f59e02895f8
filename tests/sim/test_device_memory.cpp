// arch/memory.hpp on the sim: allocation sizes that overflow size_t are a status, not a small buffer;
// new device and pinned memory holds sim::options::fill, as CUDA leaves it undefined.
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "q35/arch/memory.hpp"
#include "test_util.hpp"

namespace sim_test_device_memory {

using namespace q35;

TEST_CASE("device_buffer::allocate rejects n * sizeof(T) overflow and keeps no buffer" * test::needs_device()) {
  device_buffer<float> b;
  Q35_REQUIRE_OK(b.allocate(16));
  const size_t n = SIZE_MAX / sizeof(float) + 1;  // n * 4 wraps to 0 without the check
  const status s = b.allocate(n);
  CHECK(s.code() == status_code::out_of_memory);
  CHECK(s.message() == "device_buffer::allocate: " + std::to_string(n) + " elements of 4 bytes overflow size_t");
  CHECK(b.data() == nullptr);
  CHECK(b.size() == 0);
}

#if Q35_BACKEND_SIM
TEST_CASE("sim: device_alloc rejects a size whose 256-byte rounding overflows") {
  void* p = reinterpret_cast<void*>(uintptr_t(1));
  const status s = device_alloc(&p, SIZE_MAX - 10);
  CHECK(s.code() == status_code::out_of_memory);
  CHECK(p == nullptr);
}

// Every byte of a new allocation is options::fill (0xff by default: NaN as floats), whatever the
// allocator had there before (the block is freed dirty and allocated again); none leaves it alone.
TEST_CASE("sim: device and pinned allocations start filled with options::fill") {
  constexpr size_t bytes = 1 << 16;
  const auto filled_with = [&](auto alloc, auto release, int b) {
    void* p = nullptr;
    REQUIRE(alloc(&p, bytes).ok());
    const std::vector<unsigned char> want(bytes, static_cast<unsigned char>(b));
    const bool ok = std::memcmp(p, want.data(), bytes) == 0;
    std::memset(p, 0x5a, bytes);  // dirty, so the next allocation of this size is not fresh pages
    release(p);
    return ok;
  };
  const auto dev_alloc = [](void** p, size_t n) { return device_alloc(p, n); };
  const auto pin_alloc = [](void** p, size_t n) { return host_pinned_alloc(p, n); };
  for (int b : {0xff, 0x3c, 0x00}) {
    sim::options o = sim::current_options();
    o.fill = b;
    sim::scoped_options so(o);
    CHECK(filled_with(dev_alloc, device_free, b));
    CHECK(filled_with(pin_alloc, host_pinned_free, b));
  }
  float x = 0;
  void* p = nullptr;
  {
    sim::options o = sim::current_options();
    o.fill = 0xff;
    sim::scoped_options so(o);
    REQUIRE(device_alloc(&p, sizeof(float)).ok());
  }
  std::memcpy(&x, p, sizeof x);
  CHECK(x != x);  // NaN: a float read before any write cannot pass for a value
  device_free(p);
}
#endif

}  // namespace sim_test_device_memory
