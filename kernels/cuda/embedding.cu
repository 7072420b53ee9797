// Embedding gather: one block per id, dequantising its table row to fp32.
#include "common.cuh"

namespace agentq::kernels::cuda {

namespace {

__global__ void embedding_kernel(weight_type type, const uint8_t* __restrict__ table, size_t row_bytes,
                                 const int32_t* __restrict__ ids, int32_t n_embd, float* __restrict__ out) {
  const uint8_t* row = table + size_t(ids[blockIdx.x]) * row_bytes;  // [row_bytes]
  float* o = out + int64_t(blockIdx.x) * n_embd;                     // [n_embd]
  for (int32_t i = threadIdx.x; i < n_embd; i += blockDim.x) o[i] = detail::dequant_elem(type, row, i);
}

}  // namespace

void embedding(weight_type type, const void* table, const int32_t* ids, int32_t n_ids, int32_t n_embd, float* out,
               stream_t s) {
  if (n_ids <= 0) return;
  embedding_kernel<<<n_ids, 256, 0, detail::as_stream(s)>>>(type, static_cast<const uint8_t*>(table),
                                                             row_bytes(type, n_embd), ids, n_embd, out);
  AGENTQ_CUDA_CHECK_LAUNCH();
}

}  // namespace agentq::kernels::cuda
