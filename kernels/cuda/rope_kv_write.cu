// RoPE on a token's Q and K heads and the write of its K/V rows into the paged cache, in one
// launch: decode runs it once per layer instead of rope(q), rope(k) and kv_write. One thread
// per work item of a token (a Q pair, a K pair with its two cache writes, or one V element
// and its unrotated K twin), so the bits are those of the three separate ops (rope.cuh).
#include "rope.cuh"

namespace agentq::kernels::cuda {

namespace {

__global__ void rope_kv_write_kernel(float* q, float* k, const float* __restrict__ v, const int32_t* __restrict__ pos,
                                     const int32_t* __restrict__ tok_seq, const int32_t* __restrict__ block_tables,
                                     int32_t max_blocks, int32_t n_head, int32_t n_head_kv, int32_t head_dim,
                                     int32_t n_rot, float base, float scale, bool neox,
                                     const float* __restrict__ freq_factors, int32_t block_size, float* k_cache,
                                     float* v_cache) {
  const int32_t t = blockIdx.x, half = n_rot / 2, row = n_head_kv * head_dim;
  const int32_t n_q = n_head * half, n_k = n_head_kv * half;
  const int32_t item = int32_t(blockIdx.y) * blockDim.x + threadIdx.x;
  if (item >= n_q + n_k + row) return;
  const int32_t p = pos[t];
  const int32_t block = block_tables[int64_t(tok_seq[t]) * max_blocks + p / block_size];
  const int64_t dst = (int64_t(block) * block_size + p % block_size) * row;
  float* kt = k + int64_t(t) * row;
  int32_t i0, i1;
  if (item < n_q) {
    detail::rope_pair(q + (int64_t(t) * n_head + item / half) * head_dim, item % half, p, n_rot, base, scale, neox,
                      freq_factors, &i0, &i1);
  } else if (item < n_q + n_k) {
    const int32_t h = (item - n_q) / half;
    float* kh = kt + h * head_dim;
    detail::rope_pair(kh, (item - n_q) % half, p, n_rot, base, scale, neox, freq_factors, &i0, &i1);
    k_cache[dst + h * head_dim + i0] = kh[i0];
    k_cache[dst + h * head_dim + i1] = kh[i1];
  } else {
    const int32_t j = item - n_q - n_k;
    v_cache[dst + j] = v[int64_t(t) * row + j];
    if (j % head_dim >= n_rot) k_cache[dst + j] = kt[j];
  }
}

// The same work items from a table of angles (rope_pair_table); n_rot 0: no rotation (NoPE), the write only.
__global__ void rope_kv_write_table_kernel(float* q, float* k, const float* __restrict__ v,
                                           const int32_t* __restrict__ pos, const int32_t* __restrict__ tok_seq,
                                           const int32_t* __restrict__ block_tables, int32_t max_blocks,
                                           int32_t n_head, int32_t n_head_kv, int32_t head_dim, int32_t n_rot,
                                           bool neox, const float* __restrict__ inv_freq, float mscale,
                                           int32_t block_size, float* k_cache, float* v_cache, kv_page_map pages) {
  const int32_t t = blockIdx.x, half = n_rot / 2, row = n_head_kv * head_dim;
  const int32_t n_q = n_head * half, n_k = n_head_kv * half;
  const int32_t item = int32_t(blockIdx.y) * blockDim.x + threadIdx.x;
  if (item >= n_q + n_k + row) return;
  const int32_t p = pos[t];
  // windowed KV: this layer's page of the block (a written block always has one)
  const int32_t block = kv_page(pages, block_tables[int64_t(tok_seq[t]) * max_blocks + p / block_size]);
  const int64_t dst = (int64_t(block) * block_size + p % block_size) * row;
  float* kt = k + int64_t(t) * row;
  int32_t i0, i1;
  if (item < n_q) {
    detail::rope_pair_table(q + (int64_t(t) * n_head + item / half) * head_dim, item % half, p, n_rot, neox, inv_freq,
                            mscale, &i0, &i1);
  } else if (item < n_q + n_k) {
    const int32_t h = (item - n_q) / half;
    float* kh = kt + h * head_dim;
    detail::rope_pair_table(kh, (item - n_q) % half, p, n_rot, neox, inv_freq, mscale, &i0, &i1);
    k_cache[dst + h * head_dim + i0] = kh[i0];
    k_cache[dst + h * head_dim + i1] = kh[i1];
  } else {
    const int32_t j = item - n_q - n_k;
    v_cache[dst + j] = v[int64_t(t) * row + j];
    if (j % head_dim >= n_rot) k_cache[dst + j] = kt[j];
  }
}

}  // namespace

void rope_kv_write(float* q, float* k, const float* v, const int32_t* pos, const int32_t* tok_seq,
                   const int32_t* block_tables, int32_t max_blocks, int32_t n_tokens, int32_t n_head,
                   int32_t n_head_kv, int32_t head_dim, int32_t n_rot, float base, float scale, bool neox,
                   const float* freq_factors, int32_t block_size, float* k_cache, float* v_cache, stream_t s) {
  const int64_t items = int64_t(n_head + n_head_kv) * (n_rot / 2) + int64_t(n_head_kv) * head_dim;
  if (n_tokens <= 0 || items <= 0) return;
  rope_kv_write_kernel<<<dim3(unsigned(n_tokens), detail::ceil_div(items, 256)), 256, 0, detail::as_stream(s)>>>(
      q, k, v, pos, tok_seq, block_tables, max_blocks, n_head, n_head_kv, head_dim, n_rot, base, scale, neox,
      freq_factors, block_size, k_cache, v_cache);
  AGENTQ_CUDA_CHECK_LAUNCH();
}

void rope_kv_write_table(float* q, float* k, const float* v, const int32_t* pos, const int32_t* tok_seq,
                         const int32_t* block_tables, int32_t max_blocks, int32_t n_tokens, int32_t n_head,
                         int32_t n_head_kv, int32_t head_dim, int32_t n_rot, bool neox, const float* inv_freq,
                         float mscale, int32_t block_size, float* k_cache, float* v_cache, stream_t s,
                         const kv_page_map& pages) {
  if (!inv_freq) n_rot = 0;  // NoPE: K and V written as they are
  const int64_t items = int64_t(n_head + n_head_kv) * (n_rot / 2) + int64_t(n_head_kv) * head_dim;
  if (n_tokens <= 0 || items <= 0) return;
  rope_kv_write_table_kernel<<<dim3(unsigned(n_tokens), detail::ceil_div(items, 256)), 256, 0, detail::as_stream(s)>>>(
      q, k, v, pos, tok_seq, block_tables, max_blocks, n_head, n_head_kv, head_dim, n_rot, neox, inv_freq, mscale,
      block_size, k_cache, v_cache, pages);
  AGENTQ_CUDA_CHECK_LAUNCH();
}

}  // namespace agentq::kernels::cuda
