// Paged attention for decode: one query token per sequence, K/V read through the
// block table. Split-K over fixed attention_partition-token partitions (grid z),
// then a second kernel combines each head's partials in partition order. A warp keeps
// kGroup tokens' K/V rows in flight. attention_options: a sliding window starts the sequence's
// reads at its first visible key and the grid covers only the partitions from the one holding it
// (attention_first_part: z counts from there, so blocks before the window are never visited, and
// a windowed layer's grid is attention_window_parts, not the history), soft-capping turns each
// score, and a sink joins the final combine as one more logit with no value row. With windowed KV
// (attention_options::pages) a block's rows are read from this layer's page of it.
#include "common.cuh"

namespace agentq::kernels::cuda {

namespace {

constexpr int kWarps = 4;
constexpr int kGroup = 4;  // tokens per warp in flight
constexpr int kMaxDimPerLane = attention_max_head_dim / 32;

// workspace record per (seq, head, partition): acc[head_dim], m, l
__device__ __forceinline__ int64_t part_offset(int32_t s, int32_t h, int32_t part, int32_t n_head, int32_t max_parts,
                                               int32_t head_dim) {
  return ((int64_t(s) * n_head + h) * max_parts + part) * (head_dim + 2);
}

__global__ void __launch_bounds__(kWarps * 32)
    attention_decode_partial(const float* __restrict__ q, const float* __restrict__ k_cache,
                             const float* __restrict__ v_cache, const int32_t* __restrict__ block_tables,
                             int32_t max_blocks, const int32_t* __restrict__ seq_lens, int32_t n_head,
                             int32_t n_head_kv, int32_t head_dim, int32_t block_size, float scale, int32_t max_parts,
                             int32_t window, float softcap, const float* __restrict__ sinks, kv_page_map pages,
                             float* __restrict__ ws, float* __restrict__ out) {
  const int32_t h = blockIdx.x, s = blockIdx.y;
  const int32_t len = seq_lens[s];
  const int32_t first = window > 0 ? max(0, len - window) : 0;  // the first visible key
  // NOTE: z is relative to the first partition holding a visible key; records are stored by that
  // relative index too (the reduce counts the same way), partitions keep absolute boundaries.
  const int32_t part = blockIdx.z, abs_part = attention_first_part(len, window, attention_partition) + part;
  int32_t p0 = abs_part * attention_partition;
  if (p0 >= len) {
    if (out)  // one partition and an empty sequence: what the reduce writes (acc 0 * inv_l 0)
      for (int32_t d = threadIdx.x; d < head_dim; d += blockDim.x) out[(int64_t(s) * n_head + h) * head_dim + d] = 0.0f;
    return;
  }
  const int32_t p1 = min(len, p0 + attention_partition);
  if (p1 <= first) {  // wholly before the window: an empty record (the reduce skips it)
    if (threadIdx.x == 0) ws[part_offset(s, h, part, n_head, max_parts, head_dim) + head_dim] = -INFINITY;
    return;
  }
  p0 = max(p0, first);
  const float inv_cap = softcap != 0.0f ? 1.0f / softcap : 0.0f;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int32_t row = n_head_kv * head_dim;
  const int64_t kv_off = int64_t(h / (n_head / n_head_kv)) * head_dim;
  const int32_t* table = block_tables + int64_t(s) * max_blocks;

  float qr[kMaxDimPerLane], acc[kMaxDimPerLane];
  const float* qh = q + (int64_t(s) * n_head + h) * head_dim;
#pragma unroll
  for (int j = 0; j < kMaxDimPerLane; ++j) {
    qr[j] = lane + 32 * j < head_dim ? qh[lane + 32 * j] : 0.0f;
    acc[j] = 0.0f;
  }
  float m = -INFINITY, l = 0.0f;
  // NOTE: a warp takes its next kGroup tokens (kWarps apart) at once: their K and V rows are
  // loaded and their dot products reduced together (kGroup x the loads in flight: one token
  // at a time was latency-bound), then the online-softmax updates run token by token in the
  // same order as before, so the bits do not depend on the grouping.
  for (int32_t pg = p0 + warp; pg < p1; pg += kWarps * kGroup) {
    float kv_k[kGroup][kMaxDimPerLane], kv_v[kGroup][kMaxDimPerLane], dot[kGroup];
#pragma unroll
    for (int g = 0; g < kGroup; ++g) {
      const int32_t p = min(pg + g * kWarps, p1 - 1);  // past the end: a valid row, not used
      const int64_t base = (int64_t(kv_page(pages, table[p / block_size])) * block_size + p % block_size) * row + kv_off;
#pragma unroll
      for (int j = 0; j < kMaxDimPerLane; ++j) {
        const bool in = lane + 32 * j < head_dim;
        kv_k[g][j] = in ? k_cache[base + lane + 32 * j] : 0.0f;
        kv_v[g][j] = in ? v_cache[base + lane + 32 * j] : 0.0f;
      }
    }
#pragma unroll
    for (int g = 0; g < kGroup; ++g) {
      float d = 0.0f;
#pragma unroll
      for (int j = 0; j < kMaxDimPerLane; ++j)
        if (lane + 32 * j < head_dim) d = fmaf(qr[j], kv_k[g][j], d);
      dot[g] = d;
    }
#pragma unroll
    for (int g = 0; g < kGroup; ++g) dot[g] = detail::warp_sum(dot[g]) * scale;
    if (softcap != 0.0f)
#pragma unroll
      for (int g = 0; g < kGroup; ++g) dot[g] = tanhf(dot[g] * inv_cap) * softcap;
#pragma unroll
    for (int g = 0; g < kGroup; ++g) {
      if (pg + g * kWarps >= p1) break;
      const float new_m = fmaxf(m, dot[g]);
      const float corr = m == -INFINITY ? 0.0f : expf(m - new_m);
      const float e = expf(dot[g] - new_m);
      l = fmaf(l, corr, e);
#pragma unroll
      for (int j = 0; j < kMaxDimPerLane; ++j)
        if (lane + 32 * j < head_dim) acc[j] = fmaf(acc[j], corr, e * kv_v[g][j]);
      m = new_m;
    }
  }

  // Combine the warps in warp order.
  __shared__ float sm_m[kWarps], sm_l[kWarps];
  __shared__ float sm_acc[kWarps][attention_max_head_dim];
  if (lane == 0) {
    sm_m[warp] = m;
    sm_l[warp] = l;
  }
#pragma unroll
  for (int j = 0; j < kMaxDimPerLane; ++j)
    if (lane + 32 * j < head_dim) sm_acc[warp][lane + 32 * j] = acc[j];
  __syncthreads();
  float big_m = -INFINITY;
  for (int w = 0; w < kWarps; ++w) big_m = fmaxf(big_m, sm_m[w]);
  if (out) {
    // One partition (max_parts == 1): normalise here instead of in attention_decode_reduce: the
    // record as the two-kernel path writes it (its max without the sink), then the reduce's
    // arithmetic for that one record, so the bits are the two-kernel path's.
    // NOTE: the sink joins only after the record: folding it into the warps' max first (as this
    // did) weighs them by expf(m - max(m, sink)) instead of expf(m - m_rec) * expf(m_rec - max),
    // an ulp apart: a sequence alone differed from itself in a batch (first H200 run).
    float rec_l = 0.0f;
    for (int w = 0; w < kWarps; ++w)
      if (sm_m[w] != -INFINITY) rec_l = fmaf(sm_l[w], expf(sm_m[w] - big_m), rec_l);
    const float fin_m = sinks ? fmaxf(big_m, sinks[h]) : big_m;
    const bool live = big_m != -INFINITY;  // the reduce skips an empty record
    const float rec_w = live ? expf(big_m - fin_m) : 0.0f;
    float big_l = live ? fmaf(rec_l, rec_w, 0.0f) : 0.0f;
    if (sinks) big_l += expf(sinks[h] - fin_m);
    const float inv_l = big_l > 0.0f ? 1.0f / big_l : 0.0f;
    float* o_row = out + (int64_t(s) * n_head + h) * head_dim;
    for (int32_t d = threadIdx.x; d < head_dim; d += blockDim.x) {
      float o = 0.0f;
      for (int w = 0; w < kWarps; ++w)
        if (sm_m[w] != -INFINITY) o = fmaf(sm_acc[w][d], expf(sm_m[w] - big_m), o);
      o_row[d] = (live ? fmaf(o, rec_w, 0.0f) : 0.0f) * inv_l;
    }
    return;
  }
  float* rec = ws + part_offset(s, h, part, n_head, max_parts, head_dim);
  for (int32_t d = threadIdx.x; d < head_dim; d += blockDim.x) {
    float o = 0.0f;
    for (int w = 0; w < kWarps; ++w)
      if (sm_m[w] != -INFINITY) o = fmaf(sm_acc[w][d], expf(sm_m[w] - big_m), o);
    rec[d] = o;
  }
  if (threadIdx.x == 0) {
    float big_l = 0.0f;
    for (int w = 0; w < kWarps; ++w)
      if (sm_m[w] != -INFINITY) big_l = fmaf(sm_l[w], expf(sm_m[w] - big_m), big_l);
    rec[head_dim] = big_m;
    rec[head_dim + 1] = big_l;
  }
}

__global__ void attention_decode_reduce(const float* __restrict__ ws, const int32_t* __restrict__ seq_lens,
                                        int32_t n_head, int32_t head_dim, int32_t max_parts, int32_t window,
                                        const float* __restrict__ sinks, float* __restrict__ out) {
  const int32_t h = blockIdx.x, s = blockIdx.y;
  // The records of the partitions from the first visible one on (relative indices, as written);
  // those before it were empty records the full grid skipped, so the order and bits are unchanged.
  const int32_t len = seq_lens[s];
  const int32_t n_parts = (len + attention_partition - 1) / attention_partition -
                          attention_first_part(len, window, attention_partition);
  float* o = out + (int64_t(s) * n_head + h) * head_dim;
  float big_m = -INFINITY;
  for (int32_t p = 0; p < n_parts; ++p) big_m = fmaxf(big_m, ws[part_offset(s, h, p, n_head, max_parts, head_dim) + head_dim]);
  if (sinks) big_m = fmaxf(big_m, sinks[h]);
  float big_l = 0.0f;
  for (int32_t p = 0; p < n_parts; ++p) {
    const float* rec = ws + part_offset(s, h, p, n_head, max_parts, head_dim);
    if (rec[head_dim] != -INFINITY) big_l = fmaf(rec[head_dim + 1], expf(rec[head_dim] - big_m), big_l);
  }
  if (sinks) big_l += expf(sinks[h] - big_m);
  const float inv_l = big_l > 0.0f ? 1.0f / big_l : 0.0f;
  for (int32_t d = threadIdx.x; d < head_dim; d += blockDim.x) {
    float acc = 0.0f;
    for (int32_t p = 0; p < n_parts; ++p) {
      const float* rec = ws + part_offset(s, h, p, n_head, max_parts, head_dim);
      if (rec[head_dim] != -INFINITY) acc = fmaf(rec[d], expf(rec[head_dim] - big_m), acc);
    }
    o[d] = acc * inv_l;
  }
}

}  // namespace

size_t attention_decode_workspace_floats(int32_t n_seqs, int32_t n_head, int32_t head_dim, int32_t max_seq_len) {
  const int64_t max_parts = (int64_t(max_seq_len) + attention_partition - 1) / attention_partition;
  return size_t(n_seqs) * size_t(n_head) * size_t(max_parts) * size_t(head_dim + 2);
}

void attention_decode(const float* q, const float* k_cache, const float* v_cache, const int32_t* block_tables,
                      int32_t max_blocks, const int32_t* seq_lens, int32_t n_seqs, int32_t max_seq_len,
                      int32_t n_head, int32_t n_head_kv, int32_t head_dim, int32_t block_size, float scale,
                      float* workspace, float* out, stream_t s, const attention_options& opt) {
  if (n_seqs <= 0 || max_seq_len <= 0) return;
  AGENTQ_CUDA_REQUIRE(head_dim > 0 && head_dim <= attention_max_head_dim && n_head % n_head_kv == 0);
  AGENTQ_CUDA_REQUIRE(opt.window >= 0);
  const int32_t max_parts = (max_seq_len + attention_partition - 1) / attention_partition;
  // A windowed layer launches the window's partitions only (relative z; records indexed so).
  const int32_t n_grid = attention_window_parts(opt.window, max_parts, attention_partition);
  const cudaStream_t st = detail::as_stream(s);
  attention_decode_partial<<<dim3(n_head, n_seqs, n_grid), kWarps * 32, 0, st>>>(
      q, k_cache, v_cache, block_tables, max_blocks, seq_lens, n_head, n_head_kv, head_dim, block_size, scale,
      max_parts, opt.window, opt.softcap, opt.sinks, opt.pages, workspace, max_parts == 1 ? out : nullptr);
  AGENTQ_CUDA_CHECK_LAUNCH();
  if (max_parts == 1) return;  // the partial kernel wrote the output
  attention_decode_reduce<<<dim3(n_head, n_seqs), 128, 0, st>>>(workspace, seq_lens, n_head, head_dim, max_parts,
                                                                 opt.window, opt.sinks, out);
  AGENTQ_CUDA_CHECK_LAUNCH();
}

}  // namespace agentq::kernels::cuda
