// arch/shuffle.hpp: every shuffle mode at every logical width and offset, votes, against a host
// model of the CUDA semantics; 8-byte and 12-byte payloads.
#include <cstdint>

#include "q35/arch/shuffle.hpp"
#include "q35/arch/thread.hpp"
#include "q35/launch/launch.hpp"
#include "test_util.hpp"

namespace arch_test_shuffle {

using namespace q35;

enum mode : int { m_idx, m_up, m_down, m_xor };

// Each lane contributes value(lane) = lane * 7 + 3 and records the shuffle result.
struct shuffle_kernel {
  struct params {
    int mode, width, arg;
    int* out;  // [32]
  };
  struct shared_storage {};
  static constexpr int threads = 32;
  static dim3 grid(const params&) { return dim3(1); }
  Q35_DEVICE void operator()(const params& p, shared_storage&) const {
    const int lane = arch::lane_id();
    const int v = lane * 7 + 3;
    int r = 0;
    switch (p.mode) {
      case m_idx:
        r = arch::shfl_idx(v, p.arg + lane / 3, p.width);
        break;  // per-lane source
      case m_up:
        r = arch::shfl_up(v, p.arg, p.width);
        break;
      case m_down:
        r = arch::shfl_down(v, p.arg, p.width);
        break;
      default:
        r = arch::shfl_xor(v, p.arg, p.width);
        break;
    }
    p.out[lane] = r;
  }
};

// Host model written from the CUDA programming guide's description of __shfl*_sync.
int reference(int mode, int width, int arg, int lane) {
  const int seg = lane / width * width;
  int src = lane;
  switch (mode) {
    case m_idx:
      src = seg + (arg + lane / 3) % width;
      break;
    case m_up:
      src = lane - seg >= arg ? lane - arg : lane;
      break;
    case m_down:
      src = lane - seg + arg < width ? lane + arg : lane;
      break;
    default:
      src = (lane ^ arg) < seg + width ? lane ^ arg : lane;
      break;
  }
  return src * 7 + 3;
}

TEST_CASE("arch: shfl idx/up/down/xor at every width and offset match the CUDA semantics" * test::needs_device()) {
  auto out = test::poisoned<int>(32);
  for (int mode = m_idx; mode <= m_xor; ++mode) {
    for (int width = 1; width <= 32; width *= 2) {
      for (int arg = 0; arg < 32; ++arg) {
        CAPTURE(mode);
        CAPTURE(width);
        CAPTURE(arg);
        Q35_REQUIRE_OK(launch::launch<shuffle_kernel>({mode, width, arg, out.data()}));
        auto h = test::to_host(out);
        for (int lane = 0; lane < 32; ++lane) REQUIRE(h[size_t(lane)] == reference(mode, width, arg, lane));
      }
    }
  }
}

struct wide_payload {
  double d;
  int32_t i;
  float f;
};

// Shuffles 8- and 16-byte payloads and votes on a predicate of the lane.
struct payload_vote_kernel {
  struct params {
    double* doubles;      // [32]
    wide_payload* wides;  // [32]
    uint32_t* votes;      // [32, 3]: ballot, any, all
    uint32_t pred_lanes;  // bit l: lane l's predicate
  };
  struct shared_storage {};
  static constexpr int threads = 32;
  static dim3 grid(const params&) { return dim3(1); }
  Q35_DEVICE void operator()(const params& p, shared_storage&) const {
    const int lane = arch::lane_id();
    p.doubles[lane] = arch::shfl_down(1e300 * (lane + 1), 3);
    p.wides[lane] = arch::shfl_xor(wide_payload{lane * 0.5, -lane, float(lane) * 2.0f}, 5);
    const bool pred = (p.pred_lanes >> lane) & 1u;
    p.votes[lane * 3 + 0] = arch::ballot(pred);
    p.votes[lane * 3 + 1] = arch::any(pred);
    p.votes[lane * 3 + 2] = arch::all(pred);
  }
};

TEST_CASE("arch: multi-word shuffles and ballot/any/all" * test::needs_device()) {
  for (uint32_t pred : {0u, 1u << 17, 0xffffffffu, 0x0f0f1234u}) {
    auto d = test::poisoned<double>(32);
    auto w = test::poisoned<wide_payload>(32);
    auto v = test::poisoned<uint32_t>(96);
    Q35_REQUIRE_OK(launch::launch<payload_vote_kernel>({d.data(), w.data(), v.data(), pred}));
    auto hd = test::to_host(d);
    auto hw = test::to_host(w);
    auto hv = test::to_host(v);
    for (int lane = 0; lane < 32; ++lane) {
      const int src_d = lane + 3 < 32 ? lane + 3 : lane;
      CHECK(hd[size_t(lane)] == 1e300 * (src_d + 1));
      const int src_w = lane ^ 5;
      CHECK(hw[size_t(lane)].d == src_w * 0.5);
      CHECK(hw[size_t(lane)].i == -src_w);
      CHECK(hw[size_t(lane)].f == float(src_w) * 2.0f);
      CHECK(hv[size_t(lane * 3)] == pred);
      CHECK(hv[size_t(lane * 3 + 1)] == (pred != 0));
      CHECK(hv[size_t(lane * 3 + 2)] == (pred == 0xffffffffu));
    }
  }
}

// Two half-warps run independent collectives with disjoint masks.
struct half_warp_kernel {
  struct params {
    int* out;  // [32]
  };
  struct shared_storage {};
  static constexpr int threads = 32;
  static dim3 grid(const params&) { return dim3(1); }
  Q35_DEVICE void operator()(const params& p, shared_storage&) const {
    const int lane = arch::lane_id();
    if (lane < 16) {
      p.out[lane] = arch::shfl_idx(lane * 10, 3, 32, 0x0000ffffu);
    } else {
      p.out[lane] = int(arch::ballot(lane % 2 == 0, 0xffff0000u) >> 16);
    }
  }
};

TEST_CASE("arch: collectives with partial, disjoint masks" * test::needs_device()) {
  test::for_each_order([] {
    auto out = test::poisoned<int>(32);
    Q35_REQUIRE_OK(launch::launch<half_warp_kernel>({out.data()}));
    auto h = test::to_host(out);
    for (int lane = 0; lane < 16; ++lane) CHECK(h[size_t(lane)] == 30);
    for (int lane = 16; lane < 32; ++lane) CHECK(h[size_t(lane)] == 0x5555);
  });
}

}  // namespace arch_test_shuffle
