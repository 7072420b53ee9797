// Paged attention for prefill: causal, GQA, flash-attention style tiling in fp32.
// A block takes kTileQ query rows of one head of one sequence and walks the keys in
// tiles of 32 (one key per lane), keeping an online softmax per row in registers.
// attention_options: a sliding window masks keys t - p >= window (and skips the tiles wholly
// before the tile's first window, so a windowed layer visits the tiles of its window only),
// soft-capping turns each score, a sink joins each row's final normalisation as one more logit
// with no value row. With windowed KV (attention_options::pages) a block's rows come from this
// layer's page of it; a key of the first tile before the window may lie in a block whose page is
// gone (-1): it reads zeros (masked anyway).
// NOTE: fp32 CUDA cores, not tensor cores: correct and simple first; an mma/wgmma
// version is the next step for long prompts.
#include "common.cuh"

namespace agentq::kernels::cuda {

namespace {

constexpr int kWarps = 4;
constexpr int kRowsPerWarp = 4;
constexpr int kTileQ = kWarps * kRowsPerWarp;  // 16 query rows per block
constexpr int kTileK = 32;                     // keys per tile (one per lane)
constexpr int kMaxDimPerLane = attention_max_head_dim / 32;

size_t prefill_smem_bytes(int32_t head_dim) {
  // q: [kTileQ][head_dim]  k: [kTileK][head_dim + 1] (padded: lane-strided rows hit distinct banks)  v: [kTileK][head_dim]
  return sizeof(float) * (size_t(kTileQ) * head_dim + size_t(kTileK) * (head_dim + 1) + size_t(kTileK) * head_dim);
}

__global__ void __launch_bounds__(kWarps * 32)
    attention_prefill_kernel(const float* __restrict__ q, const float* __restrict__ k_cache,
                             const float* __restrict__ v_cache, const int32_t* __restrict__ block_tables,
                             int32_t max_blocks, const int32_t* __restrict__ q_start,
                             const int32_t* __restrict__ n_past, int32_t n_head, int32_t n_head_kv, int32_t head_dim,
                             int32_t block_size, float scale, int32_t window, float softcap,
                             const float* __restrict__ sinks, kv_page_map pages, float* __restrict__ out) {
  extern __shared__ float smem[];
  float* sq = smem;                                   // [kTileQ][head_dim]
  float* sk = sq + kTileQ * head_dim;                 // [kTileK][head_dim + 1]
  float* sv = sk + kTileK * (head_dim + 1);           // [kTileK][head_dim]
  const int32_t h = blockIdx.y, s = blockIdx.z;
  const int32_t row0 = q_start[s], n_q = q_start[s + 1] - row0;
  const int32_t qi0 = blockIdx.x * kTileQ;  // first query of this tile, within the sequence
  if (qi0 >= n_q) return;
  const int32_t n_q_tile = min(kTileQ, n_q - qi0);
  const int32_t past = n_past[s];
  const int32_t n_keys = past + qi0 + n_q_tile;  // keys [0, n_keys) are visible to some row of the tile
  const int32_t row = n_head_kv * head_dim;
  const int64_t kv_off = int64_t(h / (n_head / n_head_kv)) * head_dim;
  const int32_t* table = block_tables + int64_t(s) * max_blocks;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;

  for (int32_t i = threadIdx.x; i < kTileQ * head_dim; i += blockDim.x) {
    const int32_t r = i / head_dim, d = i % head_dim;
    sq[i] = r < n_q_tile ? q[(int64_t(row0 + qi0 + r) * n_head + h) * head_dim + d] * scale : 0.0f;
  }

  float m[kRowsPerWarp], l[kRowsPerWarp], acc[kRowsPerWarp][kMaxDimPerLane];
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) {
    m[r] = -INFINITY;
    l[r] = 0.0f;
#pragma unroll
    for (int j = 0; j < kMaxDimPerLane; ++j) acc[r][j] = 0.0f;
  }

  // The first key any row of the tile sees, rounded down to a tile.
  const int32_t kb0 = window > 0 ? max(0, past + qi0 + 1 - window) / kTileK * kTileK : 0;
  const float inv_cap = softcap != 0.0f ? 1.0f / softcap : 0.0f;
  for (int32_t kb = kb0; kb < n_keys; kb += kTileK) {
    __syncthreads();  // previous tile fully consumed (and sq written, first time)
    for (int32_t i = threadIdx.x; i < kTileK * head_dim; i += blockDim.x) {
      const int32_t c = i / head_dim, d = i % head_dim, p = kb + c;
      float kv = 0.0f, vv = 0.0f;
      const int32_t page = p < n_keys ? kv_page(pages, table[p / block_size]) : -1;
      if (page >= 0) {
        const int64_t base = (int64_t(page) * block_size + p % block_size) * row + kv_off + d;
        kv = k_cache[base];
        vv = v_cache[base];
      }
      sk[c * (head_dim + 1) + d] = kv;
      sv[c * head_dim + d] = vv;
    }
    __syncthreads();
    const int32_t p = kb + lane;  // this lane's key
#pragma unroll
    for (int r = 0; r < kRowsPerWarp; ++r) {
      const int32_t qr = warp * kRowsPerWarp + r;  // row within the tile
      const int32_t q_pos = past + qi0 + qr;
      const bool valid = qr < n_q_tile && p < n_keys && p <= q_pos && (window <= 0 || q_pos - p < window);
      const float* qrow = sq + qr * head_dim;
      const float* krow = sk + lane * (head_dim + 1);
      float dot = 0.0f;
      for (int32_t d = 0; d < head_dim; ++d) dot = fmaf(qrow[d], krow[d], dot);
      const float sc = !valid ? -INFINITY : softcap != 0.0f ? tanhf(dot * inv_cap) * softcap : dot;
      const float new_m = fmaxf(m[r], detail::warp_max(sc));
      if (new_m == -INFINITY) continue;  // nothing visible yet (or a padding row): warp-uniform
      const float pe = valid ? expf(sc - new_m) : 0.0f;
      const float corr = m[r] == -INFINITY ? 0.0f : expf(m[r] - new_m);
      l[r] = fmaf(l[r], corr, detail::warp_sum(pe));
#pragma unroll
      for (int j = 0; j < kMaxDimPerLane; ++j) acc[r][j] *= corr;
      for (int c = 0; c < kTileK; ++c) {
        const float pc = __shfl_sync(0xffffffffu, pe, c);
#pragma unroll
        for (int j = 0; j < kMaxDimPerLane; ++j)
          if (lane + 32 * j < head_dim) acc[r][j] = fmaf(pc, sv[c * head_dim + lane + 32 * j], acc[r][j]);
      }
      m[r] = new_m;
    }
  }

#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) {
    const int32_t qr = warp * kRowsPerWarp + r;
    if (qr >= n_q_tile) continue;
    float* o = out + (int64_t(row0 + qi0 + qr) * n_head + h) * head_dim;
    if (sinks) {  // the sink as one more logit: rescale to the new max, add its share of the denominator
      const float sk = sinks[h], new_m = fmaxf(m[r], sk);
      const float corr = m[r] == -INFINITY ? 0.0f : expf(m[r] - new_m);
      l[r] = fmaf(l[r], corr, expf(sk - new_m));
#pragma unroll
      for (int j = 0; j < kMaxDimPerLane; ++j) acc[r][j] *= corr;
    }
    const float inv_l = l[r] > 0.0f ? 1.0f / l[r] : 0.0f;
#pragma unroll
    for (int j = 0; j < kMaxDimPerLane; ++j)
      if (lane + 32 * j < head_dim) o[lane + 32 * j] = acc[r][j] * inv_l;
  }
}

}  // namespace

void attention_prefill(const float* q, const float* k_cache, const float* v_cache, const int32_t* block_tables,
                       int32_t max_blocks, const int32_t* q_start, const int32_t* n_past, int32_t n_seqs,
                       int32_t max_q, int32_t n_head, int32_t n_head_kv, int32_t head_dim, int32_t block_size,
                       float scale, float* out, stream_t s, const attention_options& opt) {
  if (n_seqs <= 0 || max_q <= 0) return;
  AGENTQ_CUDA_REQUIRE(head_dim > 0 && head_dim <= attention_max_head_dim && n_head % n_head_kv == 0);
  const size_t smem = prefill_smem_bytes(head_dim);
  // Opt in to large dynamic shared memory (head_dim > 128) on the current device, each call
  // that needs it (the attribute is per device; prefill is never inside a captured graph).
  if (smem > 48 * 1024 && !AGENTQ_CUDA_CHECK(cudaFuncSetAttribute(attention_prefill_kernel,
                                                                  cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                                  int(smem))))
    return;
  const dim3 grid(detail::ceil_div(max_q, kTileQ), unsigned(n_head), unsigned(n_seqs));
  attention_prefill_kernel<<<grid, kWarps * 32, smem, detail::as_stream(s)>>>(
      q, k_cache, v_cache, block_tables, max_blocks, q_start, n_past, n_head, n_head_kv, head_dim, block_size, scale,
      opt.window, opt.softcap, opt.sinks, opt.pages, out);
  AGENTQ_CUDA_CHECK_LAUNCH();
}

}  // namespace agentq::kernels::cuda
