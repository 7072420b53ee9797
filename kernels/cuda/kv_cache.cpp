// Reference paged KV write for kv_cache.cu: token t lands in block
// block_tables[tok_seq[t]][pos[t] / block_size] (its page with windowed KV), slot pos[t] % block_size.
#include <cstring>

#include "agentq/kernels_cuda.h"

namespace agentq::kernels::ref {

void kv_write(const float* k_new, const float* v_new, const int32_t* pos, const int32_t* tok_seq,
              const int32_t* block_tables, int32_t max_blocks, int32_t n_tokens, int32_t row, int32_t block_size,
              float* k_cache, float* v_cache, const cuda::kv_page_map& pages) {
  for (int32_t t = 0; t < n_tokens; ++t) {
    const int32_t block = cuda::kv_page(pages, block_tables[int64_t(tok_seq[t]) * max_blocks + pos[t] / block_size]);
    const int64_t dst = (int64_t(block) * block_size + pos[t] % block_size) * row;
    std::memcpy(k_cache + dst, k_new + int64_t(t) * row, size_t(row) * 4);
    std::memcpy(v_cache + dst, v_new + int64_t(t) * row, size_t(row) * 4);
  }
}

}  // namespace agentq::kernels::ref
