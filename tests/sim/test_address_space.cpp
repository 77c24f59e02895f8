// The sim's memory spaces (sim/address_space.hpp): a launch whose parameters point into host memory a GPU
// cannot reach fails, and so does a copy or fill whose device side is not device memory or whose host
// side is; device and pinned memory, and integers that merely look like addresses, pass.
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "../launch/fill_kernel.hpp"
#include "q35/arch/graph.hpp"
#include "q35/arch/memory.hpp"
#include "q35/launch/launch.hpp"
#include "test_util.hpp"

namespace sim_test_address_space {

using namespace q35;
using launch_test::fill_kernel;

#if Q35_BACKEND_SIM
bool has(const status& s, const std::string& text) { return s.message().find(text) != std::string::npos; }

// A kernel whose parameters hold numbers that could pass for addresses, padding, and nested pointers.
struct numbers_kernel {
  struct inner {
    const int* in;  // [1]
    uint64_t seed;
    int k[3];  // a C array: one member
  };
  struct params {
    int32_t a;  // 4 bytes of padding follow
    int64_t n;
    uint64_t seed;
    inner nested;
    std::array<const int*, 2> more;  // [1] each
    int* out;                        // [1]
  };
  struct shared_storage {};
  static constexpr int threads = 32;
  static dim3 grid(const params&) { return dim3(1); }
  Q35_DEVICE void operator()(const params& p, shared_storage&) const {
    if (arch::thread_rank() == 0) *p.out = p.a + int(p.n) + *p.nested.in + *p.more[1] + p.nested.k[2];
  }
};

TEST_CASE("sim: a launch whose parameters point into host memory fails, naming the kernel and the word") {
  std::vector<float> heap(64, 5.0f);
  float stack[64] = {};
  auto big = std::make_unique<float[]>(1 << 20);  // a fresh mapping of its own
  for (float* y : {heap.data(), stack, big.get(), heap.data() + 10}) {
    const status s = launch::launch<fill_kernel>({y, 64, 1.0f});
    REQUIRE_FALSE(s.ok());
    INFO(s.message());
    CHECK(s.code() == status_code::launch_failed);
    CHECK(has(s, "kernel launch_test::fill_kernel: the pointer parameter at byte offset 0 is 0x"));
    CHECK(has(s, "an address in host memory outside every device and pinned allocation"));
  }
  CHECK(heap[0] == 5.0f);  // nothing ran
  CHECK(stack[0] == 0.0f);

  // On a lazy stream the launch is refused when it is issued, not when the stream runs.
  owned_stream stream;
  Q35_REQUIRE_OK(stream.create());
  CHECK(launch::launch<fill_kernel>({heap.data(), 64, 1.0f}, stream.get()).code() == status_code::launch_failed);
  Q35_REQUIRE_OK(synchronize(stream.get()));
  CHECK(heap[0] == 5.0f);
}

TEST_CASE("sim: device memory, pinned memory (zero-copy) and null pass the launch check") {
  auto dev = test::poisoned<float>(64);
  Q35_REQUIRE_OK(launch::launch<fill_kernel>({dev.data(), 64, 2.0f}));
  CHECK(test::to_host(dev)[63] == 2.0f);
  Q35_REQUIRE_OK(launch::launch<fill_kernel>({dev.data() + 32, 32, 3.0f}));  // inside an allocation
  CHECK(test::to_host(dev)[63] == 3.0f);
  pinned_buffer<float> pinned;
  Q35_REQUIRE_OK(pinned.allocate(64));
  Q35_REQUIRE_OK(launch::launch<fill_kernel>({pinned.data(), 64, 4.0f}));
  CHECK(pinned[0] == 4.0f);
  Q35_REQUIRE_OK(launch::launch<fill_kernel>({nullptr, 0, 0.0f}));  // no blocks: nothing to check
}

TEST_CASE("sim: only pointer members are checked: numbers and padding that hold host addresses pass") {
  auto out = test::poisoned<int>(1);
  auto in = test::to_device(std::vector<int>{7});
  int on_stack = 0;
  const auto host = reinterpret_cast<uintptr_t>(&on_stack);
  numbers_kernel::params p;
  std::memcpy(&p, &host, sizeof host);  // the padding after `a` holds the upper half of a host address
  p.a = int32_t(uint32_t(host));        // ... and `a` its lower half: the first word is that address
  p.n = int64_t(host);
  p.seed = host;
  p.nested = {in.data(), host, {1, 2, 3}};
  p.more = {in.data(), in.data()};
  p.out = out.data();
  uint64_t word = 0;
  std::memcpy(&word, &p, sizeof word);
  REQUIRE(word == host);
  Q35_REQUIRE_OK(launch::launch<numbers_kernel>(p));
  CHECK(test::to_host(out)[0] == p.a + int(p.n) + 7 + 7 + 3);

  // pointers in a nested aggregate and in a std::array are checked
  std::vector<int> host_in{7};
  const auto fails_at = [&](size_t offset) {
    const status s = launch::launch<numbers_kernel>(p);
    INFO(s.message());
    CHECK(s.code() == status_code::launch_failed);
    CHECK(has(s, "the pointer parameter at byte offset " + std::to_string(offset) + " is 0x"));
  };
  p.nested.in = host_in.data();
  fails_at(offsetof(numbers_kernel::params, nested));
  p.nested.in = in.data();
  p.more[1] = host_in.data();
  fails_at(offsetof(numbers_kernel::params, more) + sizeof(int*));
}

TEST_CASE("sim: a copy or fill whose device side is not device memory, or host side is, fails") {
  device_buffer<float> dev;
  Q35_REQUIRE_OK(dev.allocate(16));
  pinned_buffer<float> pinned;
  Q35_REQUIRE_OK(pinned.allocate(16));
  std::vector<float> host(16, 1.0f), other(16, 0.0f);
  constexpr size_t n = 16 * sizeof(float);
  const auto fails = [](const status& s, const std::string& text) {
    INFO(s.message());
    CHECK(s.code() == status_code::invalid_argument);
    CHECK(has(s, text));
  };
  using enum copy_kind;
  fails(copy(other.data(), host.data(), n, host_to_device),
        "sim: copy: the destination (64 bytes at 0x");  // an upload into a host array
  fails(copy(other.data(), host.data(), n, host_to_device),
        ") is host memory outside every device allocation; it must be device memory");
  fails(copy(dev.data(), dev.data(), n, host_to_device), "the source (64 bytes at 0x");
  fails(copy(dev.data(), dev.data(), n, host_to_device), ") is device memory; it must be host memory");
  fails(copy(host.data(), other.data(), n, device_to_host), "the source (64 bytes");
  fails(copy(dev.data(), pinned.data(), n, device_to_device), "is pinned host memory, not device memory");
  fails(copy(dev.data() + 8, host.data(), n, host_to_device),
        "runs past the end of its 64-byte device allocation (at byte offset 32)");
  fails(fill_bytes(host.data(), 0, n), "sim: fill: the destination (64 bytes");
  fails(fill_bytes(pinned.data(), 0, n), "is pinned host memory, not device memory");
  fails(fill_bytes(dev.data() + 1, 0, n), "runs past the end");

  // what CUDA accepts: pageable or pinned host memory on the host side, device memory on the other
  Q35_REQUIRE_OK(copy(dev.data(), host.data(), n, host_to_device));
  Q35_REQUIRE_OK(copy(pinned.data(), dev.data(), n, device_to_host));
  CHECK(pinned[15] == 1.0f);
  Q35_REQUIRE_OK(fill_bytes(dev.data(), 0, n / 2));
  Q35_REQUIRE_OK(copy(dev.data() + 8, dev.data(), n / 2, device_to_device));
  Q35_REQUIRE_OK(copy(dev.data(), pinned.data(), n, host_to_device));
  Q35_REQUIRE_OK(copy(other.data(), dev.data(), n, device_to_host));
  CHECK(other[0] == 1.0f);
  CHECK(other[8] == 1.0f);
  CHECK(other[15] == 1.0f);
  Q35_REQUIRE_OK(copy(dev.data(), dev.data(), 0, host_to_device));  // nothing to copy: no check
}

// The expert store's sim layout: one pinned block whose tail is device memory (its GPU build allocates
// the two apart).
TEST_CASE("sim: the tail of a pinned allocation can become device memory, and the free forgets both parts") {
  void* p = nullptr;
  Q35_REQUIRE_OK(host_pinned_alloc(&p, 256));
  auto* b = static_cast<unsigned char*>(p);
  std::vector<unsigned char> host(64, 7);
  CHECK_FALSE(sim_pinned_tail_to_device(b).ok());            // not strictly inside
  CHECK_FALSE(sim_pinned_tail_to_device(host.data()).ok());  // not pinned
  Q35_REQUIRE_OK(sim_pinned_tail_to_device(b + 192));
  CHECK(copy(b + 128, host.data(), 64, copy_kind::host_to_device).code() == status_code::invalid_argument);
  Q35_REQUIRE_OK(copy(b + 192, host.data(), 64, copy_kind::host_to_device));
  Q35_REQUIRE_OK(copy(b + 192, b, 64, copy_kind::host_to_device));  // pinned home -> device slot
  CHECK(copy(b + 160, host.data(), 64, copy_kind::host_to_device).code() == status_code::invalid_argument);
  CHECK(sim::in_space(b, 192, sim::memory_space::pinned));
  CHECK_FALSE(sim::in_space(b, 193, sim::memory_space::pinned));
  host_pinned_free(p);
  CHECK_FALSE(sim::allocation_at(b).has_value());
  CHECK_FALSE(sim::allocation_at(b + 200).has_value());
}
#endif

}  // namespace sim_test_address_space
