// Logits processing and sampling, one block per row: argmax, then top-k and top-p
// thresholds found by exact bitwise searches over order-preserving float keys,
// then a Philox draw walked over the vocab in fixed chunks (rule in sample.cpp).
// NOTE: 32 passes over the row per threshold; a radix-select/rejection sampler is
// the optimisation if sampling shows up in profiles.
#include "common.cuh"
#include "philox.h"

namespace agentq::kernels::cuda {

namespace {

constexpr int kThreads = agentq::kernels::detail::sample_threads;
using agentq::kernels::detail::float_key;

struct best_t {
  float v;
  int32_t i;
};
__device__ __forceinline__ best_t better(best_t a, best_t b) {  // larger value, then lower index
  return (b.v > a.v || (b.v == a.v && b.i < a.i)) ? b : a;
}

// Block-wide argmax of row; every thread gets the result. scratch: 32 best_t.
__device__ best_t block_argmax(const float* row, int32_t n, best_t* scratch) {
  best_t b{-INFINITY, 0};
  bool any = false;
  for (int32_t i = threadIdx.x; i < n; i += blockDim.x) {
    if (!any || row[i] > b.v) b = best_t{row[i], i};
    any = true;
  }
  if (!any) b = best_t{-INFINITY, n};
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    best_t other{__shfl_xor_sync(0xffffffffu, b.v, o), __shfl_xor_sync(0xffffffffu, b.i, o)};
    b = better(b, other);
  }
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  __syncthreads();
  if (lane == 0) scratch[warp] = b;
  __syncthreads();
  b = lane < int(blockDim.x / 32) ? scratch[lane] : best_t{-INFINITY, n};
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    best_t other{__shfl_xor_sync(0xffffffffu, b.v, o), __shfl_xor_sync(0xffffffffu, b.i, o)};
    b = better(b, other);
  }
  if (b.i >= n) b.i = 0;  // all -inf/NaN: token 0, as the reference
  return b;
}

__global__ void __launch_bounds__(kThreads) argmax_kernel(const float* __restrict__ logits, int32_t n_vocab,
                                                          int32_t* __restrict__ out) {
  __shared__ best_t scratch[32];
  const best_t b = block_argmax(logits + int64_t(blockIdx.x) * n_vocab, n_vocab, scratch);
  if (threadIdx.x == 0) out[blockIdx.x] = b.i;
}

__global__ void __launch_bounds__(kThreads) sample_kernel(const float* __restrict__ logits, int32_t n_vocab,
                                                          const sample_params* __restrict__ params,
                                                          int32_t* __restrict__ out) {
  __shared__ best_t best_scratch[32];
  __shared__ float f_scratch[32];
  __shared__ int i_scratch[32];
  __shared__ float chunk_sum[kThreads];
  const float* l = logits + int64_t(blockIdx.x) * n_vocab;
  const sample_params p = params[blockIdx.x];
  const best_t amax = block_argmax(l, n_vocab, best_scratch);
  if (p.temperature <= 0.0f || p.top_k == 1 || isinf(amax.v)) {
    if (threadIdx.x == 0) out[blockIdx.x] = amax.i;
    return;
  }
  const float m = amax.v, inv_t = 1.0f / p.temperature;

  uint32_t k_min = 0;
  if (p.top_k > 0 && p.top_k < n_vocab) {
    for (int bit = 31; bit >= 0; --bit) {
      const uint32_t cand = k_min | (1u << bit);
      int count = 0;
      for (int32_t i = threadIdx.x; i < n_vocab; i += blockDim.x) count += float_key(l[i]) >= cand;
      if (detail::block_sum_int(count, i_scratch) >= p.top_k) k_min = cand;
    }
  }
  if (p.top_p < 1.0f) {
    auto mass = [&](uint32_t k) {
      float s = 0.0f;
      for (int32_t i = threadIdx.x; i < n_vocab; i += blockDim.x)
        if (float_key(l[i]) >= k) s += expf((l[i] - m) * inv_t);
      return detail::block_sum(s, f_scratch);
    };
    const float target = p.top_p * mass(k_min);
    uint32_t k = 0;
    for (int bit = 31; bit >= 0; --bit) {
      const uint32_t cand = k | (1u << bit);
      if (mass(cand) >= target) k = cand;
    }
    k_min = max(k, k_min);
  }

  // Fixed chunks: thread t sums [t*chunk, (t+1)*chunk) in index order.
  const int32_t chunk = (n_vocab + kThreads - 1) / kThreads;
  const int32_t c0 = threadIdx.x * chunk, c1 = min(n_vocab, c0 + chunk);
  float cs = 0.0f;
  for (int32_t i = c0; i < c1; ++i)
    if (float_key(l[i]) >= k_min) cs += expf((l[i] - m) * inv_t);
  chunk_sum[threadIdx.x] = cs;
  __syncthreads();
  if (threadIdx.x != 0) return;
  float z = 0.0f;
  for (int c = 0; c < kThreads; ++c) z += chunk_sum[c];
  const float r = agentq::kernels::detail::philox_uniform(p.seed, p.counter) * z;
  float run = 0.0f;
  int c = 0;
  for (; c < kThreads - 1; ++c) {
    if (run + chunk_sum[c] > r) break;
    run += chunk_sum[c];
  }
  int32_t pick = amax.i;
  for (int32_t i = c * chunk; i < min(n_vocab, (c + 1) * chunk); ++i) {
    if (float_key(l[i]) < k_min) continue;
    const float w = expf((l[i] - m) * inv_t);
    if (w <= 0.0f) continue;
    run += w;
    pick = i;
    if (run > r) break;
  }
  out[blockIdx.x] = pick;
}

}  // namespace

void sample(const float* logits, int32_t n_rows, int32_t n_vocab, const sample_params* params, int32_t* out,
            stream_t s) {
  if (n_rows <= 0) return;
  sample_kernel<<<n_rows, kThreads, 0, detail::as_stream(s)>>>(logits, n_vocab, params, out);
  AGENTQ_CUDA_CHECK_LAUNCH();
}

void argmax(const float* logits, int32_t n_rows, int32_t n_vocab, int32_t* out, stream_t s) {
  if (n_rows <= 0) return;
  argmax_kernel<<<n_rows, kThreads, 0, detail::as_stream(s)>>>(logits, n_vocab, out);
  AGENTQ_CUDA_CHECK_LAUNCH();
}

}  // namespace agentq::kernels::cuda
