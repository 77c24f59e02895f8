// arch/math.hpp against float64 references (and its special values); arch/vector_load.hpp round trips,
// and the sim's report of a read-only or L2 (global) load from shared memory.
#include <cmath>
#include <limits>

#include "q35/arch/fence.hpp"
#include "q35/arch/math.hpp"
#include "q35/arch/thread.hpp"
#include "q35/arch/vector_load.hpp"
#include "q35/core/numeric.hpp"
#include "q35/launch/launch.hpp"
#include "test_util.hpp"

namespace arch_test_math_and_loads {

using namespace q35;

// out[i, 0..3] = exp, sigmoid, silu, softplus of x[i]
struct math_kernel {
  struct params {
    const float* x;  // [n]
    float* out;      // [n, 4]
    int n;
  };
  struct shared_storage {};
  static constexpr int threads = 128;
  static dim3 grid(const params& p) { return dim3(unsigned(ceil_div(p.n, threads))); }
  Q35_DEVICE void operator()(const params& p, shared_storage&) const {
    const int64_t i = arch::block_rank() * threads + arch::thread_rank();
    if (i >= p.n) return;
    const float x = p.x[i];
    p.out[i * 4 + 0] = arch::fast_exp(x);
    p.out[i * 4 + 1] = arch::sigmoid(x);
    p.out[i * 4 + 2] = arch::silu(x);
    p.out[i * 4 + 3] = arch::softplus(x);
  }
};

TEST_CASE("arch: fast exp/sigmoid/silu/softplus agree with float64 and on special values" * test::needs_device()) {
  std::vector<float> x = test::random_floats(3000, 11, -30.0f, 30.0f);
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> special = {0.0f,   -0.0f,  inf,     -inf,  std::nanf(""), 88.0f,
                                      -88.0f, 100.0f, -100.0f, 20.0f, 20.5f};
  x.insert(x.end(), special.begin(), special.end());
  const int n = int(x.size());
  auto d_x = test::to_device(x);
  auto d_out = test::poisoned<float>(size_t(n) * 4);
  Q35_REQUIRE_OK(launch::launch<math_kernel>({d_x.data(), d_out.data(), n}));
  auto out = test::to_host(d_out);
  // ex2.approx and the exp2(x*log2e) rounding: a few ulp, i.e. relative 1e-6 in float.
  const double rel = 2e-6;
  for (int i = 0; i < n; ++i) {
    const double v = x[size_t(i)];
    CAPTURE(v);
    const double ref[4] = {std::exp(v), 1.0 / (1.0 + std::exp(-v)),
                           std::isinf(v) && v < 0 ? 0.0 : v / (1.0 + std::exp(-v)),
                           v > 20.0 ? v : std::log1p(std::exp(v))};
    for (int f = 0; f < 4; ++f) {
      CAPTURE(f);
      const float got = out[size_t(i * 4 + f)];
      if (std::isnan(v)) {
        CHECK(std::isnan(got));
      } else if (std::isinf(ref[f]) || ref[f] > 3.4e38) {
        CHECK(got == float(ref[f] > 0 ? inf : -inf));
      } else {
        // exp underflows to 0 below ~-87 (float); compare absolutely there.
        CHECK(std::fabs(got - ref[f]) <= rel * std::fabs(ref[f]) + 1e-37);
      }
    }
  }
  // silu(-inf) is -0, not NaN; softplus(+inf) = inf; sigmoid(+-inf) = 1, 0.
  CHECK(out[size_t((3000 + 3) * 4 + 2)] == 0.0f);
  CHECK(std::isinf(out[size_t((3000 + 2) * 4 + 3)]));
  CHECK(out[size_t((3000 + 2) * 4 + 1)] == 1.0f);
  CHECK(out[size_t((3000 + 3) * 4 + 1)] == 0.0f);
}

// y = 2 * x through 16-byte loads (both load paths) and stores, for float and half.
template <class T>
struct scale_copy_kernel {
  struct params {
    const T* x;  // [n_vec * elems_per_16_bytes<T>], 16-byte aligned
    T* y;
    int64_t n_vec;
  };
  struct shared_storage {};
  static constexpr int threads = 64;
  static dim3 grid(const params& p) { return dim3(unsigned(ceil_div<int64_t>(p.n_vec, threads))); }
  Q35_DEVICE void operator()(const params& p, shared_storage&) const {
    constexpr int n = elems_per_16_bytes<T>;
    const int64_t i = arch::block_rank() * threads + arch::thread_rank();
    if (i >= p.n_vec) return;
    auto a = (i % 2) ? arch::load_16(p.x + i * n) : arch::load_16_stream(p.x + i * n);
    for (int e = 0; e < n; ++e) a[e] = from_float<T>(2.0f * to_float(a[e]));
    arch::store_16(p.y + i * n, a);
  }
};

TEST_CASE_TEMPLATE("arch: 16-byte vector loads and stores round-trip" * test::needs_device(), T, float, q35::half) {
  constexpr int per = elems_per_16_bytes<T>;
  const int64_t n_vec = 1000;
  auto xf = test::random_floats(size_t(n_vec * per), 12);
  std::vector<T> x(xf.size());
  for (size_t i = 0; i < x.size(); ++i) x[i] = from_float<T>(xf[i]);
  auto d_x = test::to_device(x);
  auto d_y = test::poisoned<T>(x.size());
  Q35_REQUIRE_OK(launch::launch<scale_copy_kernel<T>>({d_x.data(), d_y.data(), n_vec}));
  auto y = test::to_host(d_y);
  for (size_t i = 0; i < x.size(); ++i) REQUIRE(to_float(y[i]) == 2.0f * to_float(x[i]));
}

#if Q35_BACKEND_SIM
// Thread 0 reads a word through one of the read-only (ld.global.nc) loads, from shared memory (mode 0-3:
// load_4, load_8, load_16, load_16_stream), from global memory (mode 4, the control) or from a global
// address that is not 16-byte aligned (mode 5, load_16); or through load_coherent (ld.global.cg) from
// shared memory (mode 6) or global memory (mode 7, the control).
struct shared_read_kernel {
  struct params {
    const uint32_t* global;  // [4], 16-byte aligned
    uint32_t* out;
    int mode;
  };
  struct shared_storage {
    alignas(16) uint32_t words[4];
  };
  static constexpr int threads = 32;
  static dim3 grid(const params&) { return dim3(1); }
  Q35_DEVICE void operator()(const params& p, shared_storage& s) const {
    if (arch::thread_rank() != 0) return;
    for (int i = 0; i < 4; ++i) s.words[i] = 7;
    const uint32_t* from = p.mode == 4 ? p.global : s.words;
    uint32_t v = 0;
    if (p.mode == 0) v = arch::load_4(from);
    if (p.mode == 1) v = arch::load_8(from)[0];
    if (p.mode == 2) v = arch::load_16(from)[0];
    if (p.mode == 3 || p.mode == 4) v = arch::load_16_stream(from)[0];
    if (p.mode == 5) v = arch::load_16(p.global + 1)[0];
    if (p.mode == 6 || p.mode == 7) v = arch::load_coherent(p.mode == 6 ? s.words : p.global);
    *p.out = v;
  }
};

TEST_CASE("arch: the sim reports a read-only or L2 global load from shared memory, and a misaligned one") {
  auto global = test::to_device(std::vector<uint32_t>{5, 5, 5, 5});
  auto out = test::poisoned<uint32_t>(1);
  const char* const bits[] = {"32-bit", "64-bit", "128-bit", "128-bit"};
  for (int mode = 0; mode < 4; ++mode) {
    const status s = launch::launch<shared_read_kernel>({global.data(), out.data(), mode});
    REQUIRE_FALSE(s.ok());
    INFO(s.message());
    CHECK(s.code() == status_code::kernel_fault);
    CHECK(s.message().find("[warp 0 lane 0]") != std::string::npos);
    CHECK(s.message().find(std::string(bits[mode]) + " read-only (global) load from shared memory") !=
          std::string::npos);
  }
  const status s = launch::launch<shared_read_kernel>({global.data(), out.data(), 5});
  REQUIRE_FALSE(s.ok());
  INFO(s.message());
  CHECK(s.code() == status_code::kernel_fault);
  CHECK(s.message().find("[warp 0 lane 0]: 128-bit access at an address that is not 16-byte aligned") !=
        std::string::npos);
  Q35_REQUIRE_OK(launch::launch<shared_read_kernel>({global.data(), out.data(), 4}));
  CHECK(test::to_host(out)[0] == 5u);
  const status c = launch::launch<shared_read_kernel>({global.data(), out.data(), 6});
  REQUIRE_FALSE(c.ok());
  INFO(c.message());
  CHECK(c.code() == status_code::kernel_fault);
  CHECK(c.message().find("[warp 0 lane 0]: ld.global.cg (load_coherent) from shared memory") != std::string::npos);
  Q35_REQUIRE_OK(fill_bytes(out.data(), 0xff, out.bytes()));
  Q35_REQUIRE_OK(launch::launch<shared_read_kernel>({global.data(), out.data(), 7}));
  CHECK(test::to_host(out)[0] == 5u);
}
#endif

}  // namespace arch_test_math_and_loads
