// SwiGLU: out = silu(gate) * up, elementwise.
#include "common.cuh"

namespace agentq::kernels::cuda {

namespace {

__global__ void swiglu_kernel(const float* gate, const float* up, float* out, int64_t n) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const float g = gate[i];
    out[i] = g / (1.0f + expf(-g)) * up[i];
  }
}

}  // namespace

void swiglu(const float* gate, const float* up, float* out, int64_t n, stream_t s) {
  if (n <= 0) return;
  const unsigned blocks = detail::ceil_div(n, 256) < 65535u ? detail::ceil_div(n, 256) : 65535u;
  swiglu_kernel<<<blocks, 256, 0, detail::as_stream(s)>>>(gate, up, out, n);
  AGENTQ_CUDA_CHECK_LAUNCH();
}

}  // namespace agentq::kernels::cuda
