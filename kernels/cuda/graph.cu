// CUDA graph capture/replay for a decode step: capture the step's launches once,
// replay them each step (updating in place when only kernel arguments changed).
#include "common.cuh"

namespace agentq::kernels::cuda {

graph::~graph() { reset(); }

void graph::reset() {
  if (exec_) AGENTQ_CUDA_CHECK(cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(exec_)));
  if (graph_) AGENTQ_CUDA_CHECK(cudaGraphDestroy(static_cast<cudaGraph_t>(graph_)));
  exec_ = nullptr;
  graph_ = nullptr;
}

bool graph::begin_capture(stream_t s) {
  if (!s) return false;  // the legacy default stream cannot be captured
  stream_ = s;
  return AGENTQ_CUDA_CHECK(cudaStreamBeginCapture(detail::as_stream(s), cudaStreamCaptureModeThreadLocal));
}

bool graph::end_capture() {
  cudaGraph_t g = nullptr;
  if (!AGENTQ_CUDA_CHECK(cudaStreamEndCapture(detail::as_stream(stream_), &g))) return false;
  if (exec_) {
    cudaGraphExecUpdateResultInfo info{};
    if (cudaGraphExecUpdate(static_cast<cudaGraphExec_t>(exec_), g, &info) == cudaSuccess) {
      if (graph_) AGENTQ_CUDA_CHECK(cudaGraphDestroy(static_cast<cudaGraph_t>(graph_)));
      graph_ = g;
      return true;
    }
    (void)cudaGetLastError();  // topology changed: instantiate afresh
  }
  cudaGraphExec_t e = nullptr;
  if (!AGENTQ_CUDA_CHECK(cudaGraphInstantiate(&e, g, 0))) {
    AGENTQ_CUDA_CHECK(cudaGraphDestroy(g));
    return false;
  }
  reset();
  graph_ = g;
  exec_ = e;
  return true;
}

bool graph::replay(stream_t s) {
  if (!exec_) return false;
  return AGENTQ_CUDA_CHECK(cudaGraphLaunch(static_cast<cudaGraphExec_t>(exec_), detail::as_stream(s)));
}

}  // namespace agentq::kernels::cuda
