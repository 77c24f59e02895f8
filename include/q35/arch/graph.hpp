// Streams, events and graphs behind one interface: owned_stream (a stream of its own, so its work can
// be captured, or a side stream whose copies overlap the work of another), owned_event (a point in a
// stream's work that another stream or the host waits for, or polls), and launch_graph: a sequence of
// launches recorded once and replayed (CUDA graphs). The sim records a graph too (sim_capture,
// arch/memory.hpp): kernels with the parameters they had at capture, copies and fills by address, and
// it refuses what would make a replayed graph differ from the same work issued again. Its streams run
// their work lazily (sim::options::lazy_streams), and side streams may also answer event queries with
// "not yet" (options::side_stream_lag), so that a missing wait shows in a test.
#pragma once

#include <algorithm>
#include <functional>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "q35/arch/memory.hpp"
#include "q35/core/status.hpp"

#if !Q35_BACKEND_CUDA
#include "q35/sim/options.hpp"
#endif

namespace q35 {

// work: a stream that runs kernels; side: one for copies that overlap another stream's work (on the
// sim its events may answer "not yet" when the options say so).
enum class stream_role { work, side };

class owned_stream {
 public:
  owned_stream() = default;
  ~owned_stream() { reset(); }
  owned_stream(const owned_stream&) = delete;
  owned_stream& operator=(const owned_stream&) = delete;

  status create(stream_role role = stream_role::work) {
    reset();
#if Q35_BACKEND_CUDA
    (void)role;
    return detail::cuda_status(cudaStreamCreateWithFlags(&s_, cudaStreamNonBlocking), "cudaStreamCreate");
#else
    s_ = new sim_stream;
    const sim::options& o = sim::current_options();
    if (role == stream_role::side) s_->polls = std::max(o.side_stream_lag, 0);
    s_->lazy = o.lazy_streams || s_->polls > 0;
    if (s_->lazy) {
      std::lock_guard<std::recursive_mutex> lock(detail::sim_streams_lock());
      detail::lazy_streams().push_back(s_);
    }
    return status::success();
#endif
  }
  stream_t get() const { return s_; }

 private:
  // A stream destroyed with work pending still completes it (on cuda the device does; on the sim it
  // runs here): owners wait for it before they free what it reads or writes.
  void reset() {
#if Q35_BACKEND_CUDA
    if (s_) cudaStreamDestroy(s_);
#else
    if (s_) {
      if (s_->lazy) {
        std::lock_guard<std::recursive_mutex> lock(detail::sim_streams_lock());
        std::vector<sim_stream*>& r = detail::lazy_streams();
        r.erase(std::find(r.begin(), r.end(), s_));
      }
      s_->run_all();
    }
    delete s_;
#endif
    s_ = nullptr;
  }
  stream_t s_ = nullptr;
};

// A point in a stream's work: record() marks what has been enqueued so far; make_wait() orders
// another stream's later work after it (no host wait); query() tells without waiting whether it has
// completed; synchronize() waits. An event never recorded has completed. Movable, not copyable.
class owned_event {
 public:
  owned_event() = default;
  ~owned_event() { reset(); }
  owned_event(owned_event&& o) noexcept { *this = std::move(o); }
  owned_event& operator=(owned_event&& o) noexcept {
    if (this != &o) {
      reset();
#if Q35_BACKEND_CUDA
      e_ = std::exchange(o.e_, nullptr);
#else
      s_ = std::exchange(o.s_, nullptr), seq_ = o.seq_, polls_ = o.polls_;
#endif
    }
    return *this;
  }
  owned_event(const owned_event&) = delete;
  owned_event& operator=(const owned_event&) = delete;

  status record(stream_t stream) {
#if Q35_BACKEND_CUDA
    if (!e_) Q35_TRY(detail::cuda_status(cudaEventCreateWithFlags(&e_, cudaEventDisableTiming), "cudaEventCreate"));
    return detail::cuda_status(cudaEventRecord(e_, stream), "cudaEventRecord");
#else
    if (detail::active_capture())
      return detail::invalidate_capture("an event record (the sim's graphs have no event nodes)");
    // only a lazy stream has work that is not complete yet
    std::lock_guard<std::recursive_mutex> lock(detail::sim_streams_lock());
    const bool lazy = stream && stream->lazy;
    s_ = lazy ? stream->handle : nullptr;
    seq_ = lazy ? stream->enqueued : 0;
    polls_ = lazy ? stream->polls : 0;
    return status::success();
#endif
  }
  status make_wait(stream_t stream) const {
#if Q35_BACKEND_CUDA
    if (!e_) return status::success();
    return detail::cuda_status(cudaStreamWaitEvent(stream, e_, 0), "cudaStreamWaitEvent");
#else
    if (detail::active_capture())
      return detail::invalidate_capture("an event wait (the sim's graphs have no event nodes)");
    std::lock_guard<std::recursive_mutex> lock(detail::sim_streams_lock());
    if (!s_ || !*s_) return status::success();
    const std::shared_ptr<sim_stream*> h = s_;
    const uint64_t n = seq_;
    if (stream && stream->lazy)
      return stream->submit([h, n] {  // runs under the lock (run_to)
        if (*h) (*h)->run_to(n);
        return status::success();
      });
    (*h)->run_to(n);  // the waiting stream runs its next work at once: the recorded work goes first
    return status::success();
#endif
  }
  status query(bool& done) {
#if Q35_BACKEND_CUDA
    done = true;
    if (!e_) return status::success();
    const cudaError_t rc = cudaEventQuery(e_);
    if (rc == cudaErrorNotReady) {
      done = false;
      return status::success();
    }
    return detail::cuda_status(rc, "cudaEventQuery", status_code::kernel_fault);
#else
    std::lock_guard<std::recursive_mutex> lock(detail::sim_streams_lock());
    done = !s_ || !*s_ || (*s_)->completed >= seq_;
    if (!done && polls_ > 0) {
      --polls_;
      return status::success();
    }
    if (!done) (*s_)->run_to(seq_);
    done = true;
    return status::success();
#endif
  }
  status synchronize() {
#if Q35_BACKEND_CUDA
    if (!e_) return status::success();
    return detail::cuda_status(cudaEventSynchronize(e_), "cudaEventSynchronize", status_code::kernel_fault);
#else
    std::lock_guard<std::recursive_mutex> lock(detail::sim_streams_lock());
    if (s_ && *s_) (*s_)->run_to(seq_);
    return status::success();
#endif
  }

 private:
  void reset() {
#if Q35_BACKEND_CUDA
    if (e_) cudaEventDestroy(e_);
    e_ = nullptr;
#else
    s_ = nullptr;
#endif
  }
#if Q35_BACKEND_CUDA
  cudaEvent_t e_ = nullptr;
#else
  std::shared_ptr<sim_stream*> s_;  // the lazy stream it was recorded on (null once it ended), or null: complete
  uint64_t seq_ = 0;                // that stream's operations before it
  int polls_ = 0;                   // queries left that report "not yet"
#endif
};

class launch_graph {
 public:
  launch_graph() = default;
  ~launch_graph() { reset(); }
  launch_graph(const launch_graph&) = delete;
  launch_graph& operator=(const launch_graph&) = delete;

  bool ready() const { return ready_; }

  // Records what `record()` (a callable returning status) launches on `stream`, without running it.
  template <class Record>
  status capture(stream_t stream, Record&& record) {
    reset();
#if Q35_BACKEND_CUDA
    Q35_TRY(detail::cuda_status(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal),
                                "cudaStreamBeginCapture"));
    const status recorded = record();
    cudaGraph_t g = nullptr;
    const cudaError_t end = cudaStreamEndCapture(stream, &g);
    if (!recorded.ok()) {
      // the capture's own error (invalidated by what failed) is not this call's to report: clear it,
      // so that the caller's eager fallback does not find it as its first launch's "last error"
      if (end != cudaSuccess) (void)cudaGetLastError();
      if (g) cudaGraphDestroy(g);
      return recorded;
    }
    Q35_TRY(detail::cuda_status(end, "cudaStreamEndCapture"));
    graph_ = g;
    Q35_TRY(detail::cuda_status(cudaGraphInstantiate(&exec_, graph_, 0), "cudaGraphInstantiate"));
    ready_ = true;
    return status::success();
#else
    if (!stream) return error(status_code::invalid_argument, "launch_graph: the null stream cannot be captured");
    if (detail::active_capture()) return error(status_code::invalid_argument, "launch_graph: a capture is in progress");
    stream->run_all();
    sim_capture cap;
    cap.stream = stream;
    cap.fault_at = std::exchange(detail::next_capture_fault(), -1);
    struct scope {  // ends the capture however record() leaves
      sim_stream* s;
      ~scope() { s->capture = nullptr, detail::active_capture() = nullptr; }
    } ending{stream};
    stream->capture = &cap, detail::active_capture() = &cap;
    const status recorded = record();
    if (!recorded.ok()) return recorded;
    if (!cap.invalid.empty()) return error(status_code::launch_failed, "sim: capture invalidated by " + cap.invalid);
    ops_ = std::move(cap.ops);
    ready_ = true;
    return status::success();
#endif
  }

  // Runs the recorded launches on `stream` (asynchronous).
  status replay(stream_t stream) {
#if !Q35_BACKEND_CUDA
    if (detail::active_capture()) return detail::invalidate_capture("a graph replay");
#endif
    if (!ready_) return error(status_code::invalid_argument, "launch_graph: nothing captured");
#if Q35_BACKEND_CUDA
    return detail::cuda_status(cudaGraphLaunch(exec_, stream), "cudaGraphLaunch");
#else
    for (const auto& op : ops_) Q35_TRY(stream ? stream->submit(op) : op());
    return status::success();
#endif
  }

  void reset() {
#if Q35_BACKEND_CUDA
    if (exec_) cudaGraphExecDestroy(exec_);
    if (graph_) cudaGraphDestroy(graph_);
    exec_ = nullptr;
    graph_ = nullptr;
#else
    ops_.clear();
#endif
    ready_ = false;
  }

 private:
#if Q35_BACKEND_CUDA
  cudaGraph_t graph_ = nullptr;
  cudaGraphExec_t exec_ = nullptr;
#else
  std::vector<std::function<status()> > ops_;  // the recorded operations, in stream order
#endif
  bool ready_ = false;
};

}  // namespace q35
