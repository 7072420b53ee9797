// Elementwise helpers of the forward pass: residual add, bias add, row gather.
#include <algorithm>

#include "common.cuh"

namespace agentq::kernels::cuda {

namespace {

__global__ void add_kernel(float* x, const float* __restrict__ y, int64_t n) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    x[i] += y[i];
}

__global__ void add_rows_kernel(float* x, const float* __restrict__ b, int32_t n) {
  float* xr = x + int64_t(blockIdx.x) * n;
  for (int32_t i = threadIdx.x; i < n; i += blockDim.x) xr[i] += b[i];
}

__global__ void gather_rows_kernel(const float* __restrict__ src, const int32_t* __restrict__ rows, int32_t n,
                                   float* __restrict__ dst) {
  const float* s = src + int64_t(rows[blockIdx.x]) * n;
  float* d = dst + int64_t(blockIdx.x) * n;
  for (int32_t i = threadIdx.x; i < n; i += blockDim.x) d[i] = s[i];
}

}  // namespace

void add(float* x, const float* y, int64_t n, stream_t s) {
  if (n <= 0) return;
  add_kernel<<<std::min<unsigned>(detail::ceil_div(n, 256), 65535u), 256, 0, detail::as_stream(s)>>>(x, y, n);
  AGENTQ_CUDA_CHECK_LAUNCH();
}

void add_rows(float* x, const float* b, int32_t n_rows, int32_t n, stream_t s) {
  if (n_rows <= 0) return;
  add_rows_kernel<<<n_rows, 256, 0, detail::as_stream(s)>>>(x, b, n);
  AGENTQ_CUDA_CHECK_LAUNCH();
}

void gather_rows(const float* src, const int32_t* rows, int32_t n_rows, int32_t n, float* dst, stream_t s) {
  if (n_rows <= 0) return;
  gather_rows_kernel<<<n_rows, 256, 0, detail::as_stream(s)>>>(src, rows, n, dst);
  AGENTQ_CUDA_CHECK_LAUNCH();
}

}  // namespace agentq::kernels::cuda
