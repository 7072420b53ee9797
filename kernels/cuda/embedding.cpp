// Reference embedding gather for embedding.cu: dequantise one table row per id.
#include "agentq/kernels_cuda.h"

namespace agentq::kernels::ref {

void embedding(weight_type type, const void* table, const int32_t* ids, int32_t n_ids, int32_t n_embd, float* out) {
  const size_t rb = cuda::row_bytes(type, n_embd);
  for (int32_t i = 0; i < n_ids; ++i)
    dequantize(type, static_cast<const uint8_t*>(table) + size_t(ids[i]) * rb, out + int64_t(i) * n_embd, n_embd);
}

}  // namespace agentq::kernels::ref
