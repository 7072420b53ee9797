// RMSNorm: one block of kThreads per row, a fixed-order block reduction of the squares.
// NOTE: 1024 threads, not 256: a decode step normalises single 4096-wide rows, where the
// block's serial share of the row (its latency) is what costs.
#include "common.cuh"

namespace agentq::kernels::cuda {

namespace {

constexpr int kThreads = 1024;

__global__ void __launch_bounds__(kThreads) rms_norm_kernel(const float* __restrict__ x, const float* __restrict__ w,
                                                       float* y, int32_t n, float eps) {
  __shared__ float scratch[32];
  const float* xr = x + int64_t(blockIdx.x) * n;  // [n]
  float* yr = y + int64_t(blockIdx.x) * n;        // [n]
  float ss = 0.0f;
  for (int32_t i = threadIdx.x; i < n; i += blockDim.x) ss = fmaf(xr[i], xr[i], ss);
  ss = detail::block_sum(ss, scratch);
  const float inv = rsqrtf(ss / float(n) + eps);
  for (int32_t i = threadIdx.x; i < n; i += blockDim.x) yr[i] = (xr[i] * inv) * w[i];
}

}  // namespace

void rms_norm(const float* x, const float* w, float* y, int32_t n_rows, int32_t n, float eps, stream_t s) {
  if (n_rows <= 0) return;
  rms_norm_kernel<<<n_rows, kThreads, 0, detail::as_stream(s)>>>(x, w, y, n, eps);
  AGENTQ_CUDA_CHECK_LAUNCH();
}

}  // namespace agentq::kernels::cuda
