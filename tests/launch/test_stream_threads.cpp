// arch/memory.hpp and arch/graph.hpp from several host threads at once, as an engine that drives one
// decoder per thread uses them: each thread issues work on its own stream and waits for it while
// another thread allocates and frees. CUDA's streams and cudaFree are thread safe; so must the sim's
// be, whose free runs every lazy stream's queued work (as cudaFree waits for the whole device), on the
// freeing thread, while the streams' owners keep queueing onto them. Under TSan
// (scripts/sanitize.sh) a stream queue touched without the sim's lock is reported as a race; in a plain
// build it corrupts the queue or loses work, which the value checks below see.
#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "fill_kernel.hpp"
#include "q35/arch/graph.hpp"
#include "q35/launch/launch.hpp"
#include "test_util.hpp"

namespace launch_test_stream_threads {

using namespace q35;

using launch_test::fill_kernel;

// One owner thread's work: per round, a fill, a kernel, a device-to-device copy and a download into
// pinned memory on its stream, then a wait (an event or the stream), then the values. Returns what
// went wrong, or an empty string.
std::string owner_rounds(int id, int rounds) {
  constexpr int n = 200;
  owned_stream s;
  if (status st = s.create(); !st.ok()) return st.message();
  device_buffer<float> a, b;
  pinned_buffer<float> host;
  if (status st = a.allocate(n); !st.ok()) return st.message();
  if (status st = b.allocate(n); !st.ok()) return st.message();
  if (status st = host.allocate(n); !st.ok()) return st.message();
  owned_event done;
  for (int r = 0; r < rounds; ++r) {
    const float value = float(id * 1000 + r);
    const auto issue_and_wait = [&]() -> status {
      Q35_TRY(fill_bytes(a.data(), 0, n * sizeof(float), s.get()));
      Q35_TRY(launch::launch<fill_kernel>({a.data(), n - 1, value}, s.get()));
      Q35_TRY(copy(b.data(), a.data(), n * sizeof(float), copy_kind::device_to_device, s.get()));
      Q35_TRY(copy(host.data(), b.data(), n * sizeof(float), copy_kind::device_to_host, s.get()));
      if (r % 2 == 1) return synchronize(s.get());
      Q35_TRY(done.record(s.get()));
      return done.synchronize();
    };
    if (const status st = issue_and_wait(); !st.ok())
      return "owner " + std::to_string(id) + ", round " + std::to_string(r) + ": " + st.message();
    for (int i = 0; i < n; ++i)
      if (host[i] != (i < n - 1 ? value : 0.0f))
        return "owner " + std::to_string(id) + ", round " + std::to_string(r) + ": host[" + std::to_string(i) +
               "] = " + std::to_string(host[i]) + ", expected " + std::to_string(i < n - 1 ? value : 0.0f);
  }
  return {};
}

TEST_CASE("streams: several host threads issue and wait on their own streams while another frees" *
          test::needs_device()) {
#if !Q35_BACKEND_CUDA
  sim::options o = sim::current_options();
  o.lazy_streams = true;  // the default; named here because the test is about the lazy queues
  sim::scoped_options scoped(o);
#endif
  constexpr int owners = 3, rounds = 60;
  std::vector<std::string> failures(owners);
  std::atomic<int> finished{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < owners; ++t)
    threads.emplace_back([&, t] {
      failures[t] = owner_rounds(t, rounds);
      ++finished;
    });
  // the churn: allocations and frees until every owner is done (each free waits for all streams)
  int frees = 0;
  std::string churn_failure;
  while (finished.load() < owners) {
    device_buffer<float> tmp;
    if (status st = tmp.allocate(64); !st.ok()) {
      churn_failure = st.message();
      break;
    }
    pinned_buffer<float> pinned_tmp;
    if (status st = pinned_tmp.allocate(64); !st.ok()) {
      churn_failure = st.message();
      break;
    }
    ++frees;
  }
  for (std::thread& t : threads) t.join();
  CHECK(churn_failure == "");
  for (int t = 0; t < owners; ++t) CHECK_MESSAGE(failures[t] == "", failures[t]);
  CHECK(frees > 0);
}

}  // namespace launch_test_stream_threads
