// core/dispatch.hpp: run-time value to compile-time constant, with a clear error for other values.
#include "q35/core/dispatch.hpp"
#include "test_util.hpp"

namespace core_test_dispatch {

using namespace q35;

TEST_CASE("dispatch: calls f with the matching constant and propagates its status") {
  int seen = 0;
  Q35_REQUIRE_OK(dispatch<1, 2, 4, 8>(4, [&](auto n) {
    static_assert(decltype(n)::value == 1 || decltype(n)::value == 2 || decltype(n)::value == 4 ||
                  decltype(n)::value == 8);
    seen = decltype(n)::value;
  }));
  CHECK(seen == 4);
  status s = dispatch<16, 32>(int64_t(32), [](auto n) -> status {
    if (decltype(n)::value == 32) return error(status_code::unsupported, "thirty-two");
    return status::success();
  });
  CHECK(s.code() == status_code::unsupported);
  CHECK(s.message() == "thirty-two");
}

TEST_CASE("dispatch: an unsupported value names itself and the supported set") {
  status s = dispatch<64, 128, 256>(60, [](auto) {});
  REQUIRE_FALSE(s.ok());
  CHECK(s.code() == status_code::invalid_argument);
  CHECK(s.message() == "value 60 is not supported here (supported: 64 128 256)");
}

}  // namespace core_test_dispatch
