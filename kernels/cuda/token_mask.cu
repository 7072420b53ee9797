// Grammar mask: logits of tokens whose bit is clear become -inf.
#include "common.cuh"

namespace agentq::kernels::cuda {

namespace {

__global__ void token_mask_kernel(float* logits, const uint32_t* __restrict__ mask, int32_t n_vocab, int32_t n_words) {
  const int32_t r = blockIdx.y;
  const int32_t t = blockIdx.x * blockDim.x + threadIdx.x;
  if (t >= n_vocab) return;
  if (!((mask[int64_t(r) * n_words + t / 32] >> (t % 32)) & 1u)) logits[int64_t(r) * n_vocab + t] = -INFINITY;
}

}  // namespace

void apply_token_mask(float* logits, const uint32_t* mask, int32_t n_rows, int32_t n_vocab, stream_t s) {
  if (n_rows <= 0 || n_vocab <= 0) return;
  const dim3 grid(detail::ceil_div(n_vocab, 256), unsigned(n_rows));
  token_mask_kernel<<<grid, 256, 0, detail::as_stream(s)>>>(logits, mask, n_vocab, (n_vocab + 31) / 32);
  AGENTQ_CUDA_CHECK_LAUNCH();
}

}  // namespace agentq::kernels::cuda
