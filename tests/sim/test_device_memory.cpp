// arch/memory.hpp on the sim: allocation sizes that overflow size_t are a status, not a small buffer.
#include <cstdint>
#include <string>

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
#endif

}  // namespace sim_test_device_memory
