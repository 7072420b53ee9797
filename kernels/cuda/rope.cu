// Rotary position embedding in place, one thread per rotated pair (rope.cuh).
#include "rope.cuh"

namespace agentq::kernels::cuda {

namespace {

__global__ void rope_kernel(float* x, const int32_t* __restrict__ pos, int32_t n_tokens, int32_t n_head,
                            int32_t head_dim, int32_t n_rot, float base, float scale, bool neox,
                            const float* __restrict__ freq_factors) {
  const int32_t half = n_rot / 2;
  const int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;  // over [n_tokens][n_head][half]
  if (idx >= int64_t(n_tokens) * n_head * half) return;
  const int32_t i = int32_t(idx % half);
  const int64_t th = idx / half;  // token * n_head + head
  const int32_t t = int32_t(th / n_head);
  int32_t i0, i1;
  detail::rope_pair(x + th * head_dim, i, pos[t], n_rot, base, scale, neox, freq_factors, &i0, &i1);
}

}  // namespace

void rope(float* x, const int32_t* pos, int32_t n_tokens, int32_t n_head, int32_t head_dim, int32_t n_rot,
          float base, float scale, bool neox, const float* freq_factors, stream_t s) {
  const int64_t n = int64_t(n_tokens) * n_head * (n_rot / 2);
  if (n <= 0) return;
  rope_kernel<<<detail::ceil_div(n, 256), 256, 0, detail::as_stream(s)>>>(x, pos, n_tokens, n_head, head_dim, n_rot,
                                                                          base, scale, neox, freq_factors);
  AGENTQ_CUDA_CHECK_LAUNCH();
}

}  // namespace agentq::kernels::cuda
