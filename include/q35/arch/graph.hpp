// Streams and graphs behind one interface: owned_stream (a stream of its own, so its work can be
// captured), and launch_graph: a sequence of launches recorded once and replayed (CUDA graphs). The
// sim runs every launch synchronously, so it has no graphs: capture() reports `unsupported` and callers
// run their launches directly.
#pragma once

#include <utility>

#include "q35/arch/memory.hpp"
#include "q35/core/status.hpp"

namespace q35 {

class owned_stream {
 public:
  owned_stream() = default;
  ~owned_stream() { reset(); }
  owned_stream(const owned_stream&) = delete;
  owned_stream& operator=(const owned_stream&) = delete;

  status create() {
    reset();
#if Q35_BACKEND_CUDA
    return detail::cuda_status(cudaStreamCreateWithFlags(&s_, cudaStreamNonBlocking), "cudaStreamCreate");
#else
    return status::success();
#endif
  }
  stream_t get() const { return s_; }

 private:
  void reset() {
#if Q35_BACKEND_CUDA
    if (s_) cudaStreamDestroy(s_);
#endif
    s_ = nullptr;
  }
  stream_t s_ = nullptr;
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
    (void)stream;
    (void)record;
    return error(status_code::unsupported, "the sim backend has no graphs");
#endif
  }

  // Runs the recorded launches on `stream` (asynchronous).
  status replay(stream_t stream) {
    if (!ready_) return error(status_code::invalid_argument, "launch_graph: nothing captured");
#if Q35_BACKEND_CUDA
    return detail::cuda_status(cudaGraphLaunch(exec_, stream), "cudaGraphLaunch");
#else
    (void)stream;
    return status::success();
#endif
  }

  void reset() {
#if Q35_BACKEND_CUDA
    if (exec_) cudaGraphExecDestroy(exec_);
    if (graph_) cudaGraphDestroy(graph_);
    exec_ = nullptr;
    graph_ = nullptr;
#endif
    ready_ = false;
  }

 private:
#if Q35_BACKEND_CUDA
  cudaGraph_t graph_ = nullptr;
  cudaGraphExec_t exec_ = nullptr;
#endif
  bool ready_ = false;
};

}  // namespace q35
