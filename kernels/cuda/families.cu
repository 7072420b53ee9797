// Elementwise and routing ops of the families beyond llama/qwen2 (their C++ references:
// families.cpp): Gemma's GELU-tanh gate rounded through F16 as ggml's CPU backend, the embedding
// scale, logit soft-capping, the MoE router's top-k (Qwen3-MoE's normalised softmax, gpt-oss's
// softmax over the top k), the grouping of a step's (token, expert) rows by expert, GPT-OSS's
// clamped SwiGLU, per-expert biases and the experts' weighted sum. backend/cuda_forward.cpp runs
// them where a layer_stack asks for them.
#include "common.cuh"

namespace agentq::kernels::cuda {

namespace {

unsigned grid_for(int64_t n) { return detail::ceil_div(n, 256) < 65535u ? detail::ceil_div(n, 256) : 65535u; }

// gelu(h) for h = x rounded to F16, rounded to F16 (ggml's GGML_GELU_FP16 table); exact beyond |x| >= 10.
__device__ __forceinline__ float gelu_f16(float x) {
  if (x <= -10.0f) return 0.0f;
  if (x >= 10.0f) return x;
  const float h = __half2float(__float2half_rn(x));
  const float g = 0.5f * h * (1.0f + tanhf(0.79788456080286535587989211986876f * h * (1.0f + 0.044715f * h * h)));
  return __half2float(__float2half_rn(g));
}

__global__ void gelu_mul_kernel(const float* gate, const float* up, float* out, int64_t n) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    out[i] = gelu_f16(gate[i]) * up[i];
}

__global__ void scale_kernel(float* x, float s, int64_t n) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    x[i] *= s;
}

__global__ void softcap_kernel(float* x, float cap, int64_t n) {
  const float inv = 1.0f / cap;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    x[i] = tanhf(x[i] * inv) * cap;
}

// One thread per token row: k passes of an argmax over n_expert logits (ties: lower id), then
// the weights. NOTE: rows are short (<= a few hundred experts) and few per step; a thread per
// row keeps the order of every sum fixed (the reference's).
__global__ void moe_topk_kernel(const float* logits, int32_t n_rows, int32_t n_expert, int32_t k, bool norm_softmax,
                                int32_t* ids, float* weights) {
  const int32_t r = int32_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (r >= n_rows) return;
  const float* p = logits + int64_t(r) * n_expert;
  int32_t* id = ids + int64_t(r) * k;
  float* w = weights + int64_t(r) * k;
  float mx = -INFINITY;
  for (int32_t e = 0; e < n_expert; ++e) mx = fmaxf(mx, p[e]);
  for (int32_t j = 0; j < k; ++j) {
    int32_t best = -1;
    for (int32_t e = 0; e < n_expert; ++e) {
      bool taken = false;
      for (int32_t t = 0; t < j; ++t) taken |= id[t] == e;
      if (!taken && (best < 0 || p[e] > p[best])) best = e;
    }
    id[j] = best;
  }
  if (norm_softmax) {
    // softmax over every expert (max-shifted, sum in double), the k chosen divided by their sum
    double sum = 0;
    for (int32_t e = 0; e < n_expert; ++e) sum += double(expf(p[e] - mx));
    const float inv = float(1.0 / sum);
    float wsum = 0;
    for (int32_t j = 0; j < k; ++j) {
      w[j] = expf(p[id[j]] - mx) * inv;
      wsum += w[j];
    }
    wsum = fmaxf(wsum, 6.103515625e-5f);  // llama.cpp's clamp (smallest F16 normal)
    for (int32_t j = 0; j < k; ++j) w[j] /= wsum;
  } else {
    // softmax over the k chosen logits alone
    const float top = p[id[0]];
    double sum = 0;
    for (int32_t j = 0; j < k; ++j) {
      w[j] = expf(p[id[j]] - top);
      sum += double(w[j]);
    }
    const float inv = float(1.0 / sum);
    for (int32_t j = 0; j < k; ++j) w[j] *= inv;
  }
}

__global__ void swiglu_oai_kernel(const float* gate, const float* up, float* out, int64_t n) {
  constexpr float alpha = 1.702f, limit = 7.0f;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const float x = fminf(gate[i], limit);
    const float u = fminf(fmaxf(up[i], -limit), limit);
    out[i] = x / (1.0f + expf(alpha * (-x))) * (u + 1.0f);
  }
}

__global__ void add_rows_by_id_kernel(float* x, const float* b, const int32_t* ids, int32_t n_rows, int32_t n) {
  const int64_t total = int64_t(n_rows) * n;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x)
    x[i] += b[int64_t(ids[i / n]) * n + i % n];
}

// NOTE: __fmul_rn / __fadd_rn keep each product rounded before the add (no FMA contraction), as
// the reference and the CPU's moe.cpp.
__global__ void moe_combine_kernel(const float* y, const float* w, int32_t n_tok, int32_t k, int32_t n, float* out) {
  const int64_t total = int64_t(n_tok) * n;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t t = i / n, c = i % n;
    const float* yt = y + t * k * n;
    float o = __fmul_rn(yt[c], w[t * k]);
    for (int32_t j = 1; j < k; ++j) o = __fadd_rn(o, __fmul_rn(yt[int64_t(j) * n + c], w[t * k + j]));
    out[i] = o;
  }
}

// Groups the (token, expert) rows of a step by expert (moe_group): one block; thread e counts and
// then lists expert e's rows in row order, so order and chunks are deterministic. NOTE: O(n_expert
// x n_rows) reads of ids spread over the threads: a few thousand rows x a few hundred experts, a
// few microseconds, and no atomics (whose order would vary run to run).
__global__ void moe_group_kernel(const int32_t* ids, int32_t n_rows, int32_t n_expert, int32_t per_chunk,
                                 int32_t* order, int32_t* chunks) {
  extern __shared__ int32_t sh[];  // [n_expert] counts, [n_expert] first row, [n_expert] first chunk
  int32_t *cnt = sh, *row0 = sh + n_expert, *chunk0 = sh + 2 * n_expert;
  for (int32_t e = threadIdx.x; e < n_expert; e += blockDim.x) {
    int32_t c = 0;
    for (int32_t r = 0; r < n_rows; ++r) c += ids[r] == e;
    cnt[e] = c;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    int32_t r = 0, c = 0;
    for (int32_t e = 0; e < n_expert; ++e) {
      row0[e] = r;
      chunk0[e] = c;
      r += cnt[e];
      c += (cnt[e] + per_chunk - 1) / per_chunk;
    }
    chunks[0] = c;
  }
  __syncthreads();
  for (int32_t e = threadIdx.x; e < n_expert; e += blockDim.x) {
    int32_t o = row0[e];
    for (int32_t r = 0; r < n_rows; ++r)
      if (ids[r] == e) order[o++] = r;
    int32_t c = chunk0[e];
    for (int32_t b = 0; b < cnt[e]; b += per_chunk, ++c) {
      chunks[1 + 3 * c] = e;
      chunks[2 + 3 * c] = row0[e] + b;
      chunks[3 + 3 * c] = min(per_chunk, cnt[e] - b);
    }
  }
}

}  // namespace

void gelu_mul(const float* gate, const float* up, float* out, int64_t n, stream_t s) {
  if (n <= 0) return;
  gelu_mul_kernel<<<grid_for(n), 256, 0, detail::as_stream(s)>>>(gate, up, out, n);
  AGENTQ_CUDA_CHECK_LAUNCH();
}

void scale(float* x, float factor, int64_t n, stream_t s) {
  if (n <= 0) return;
  scale_kernel<<<grid_for(n), 256, 0, detail::as_stream(s)>>>(x, factor, n);
  AGENTQ_CUDA_CHECK_LAUNCH();
}

void softcap(float* x, float cap, int64_t n, stream_t s) {
  if (n <= 0) return;
  AGENTQ_CUDA_REQUIRE(cap > 0.0f);
  softcap_kernel<<<grid_for(n), 256, 0, detail::as_stream(s)>>>(x, cap, n);
  AGENTQ_CUDA_CHECK_LAUNCH();
}

void moe_topk(const float* logits, int32_t n_rows, int32_t n_expert, int32_t k, moe_gating gating, int32_t* ids,
              float* weights, stream_t s) {
  if (n_rows <= 0) return;
  AGENTQ_CUDA_REQUIRE(k > 0 && k <= n_expert);
  moe_topk_kernel<<<detail::ceil_div(n_rows, 64), 64, 0, detail::as_stream(s)>>>(
      logits, n_rows, n_expert, k, gating == moe_gating::softmax_norm, ids, weights);
  AGENTQ_CUDA_CHECK_LAUNCH();
}

void swiglu_oai(const float* gate, const float* up, float* out, int64_t n, stream_t s) {
  if (n <= 0) return;
  swiglu_oai_kernel<<<grid_for(n), 256, 0, detail::as_stream(s)>>>(gate, up, out, n);
  AGENTQ_CUDA_CHECK_LAUNCH();
}

void add_rows_by_id(float* x, const float* b, const int32_t* ids, int32_t n_rows, int32_t n, stream_t s) {
  if (n_rows <= 0 || n <= 0) return;
  add_rows_by_id_kernel<<<grid_for(int64_t(n_rows) * n), 256, 0, detail::as_stream(s)>>>(x, b, ids, n_rows, n);
  AGENTQ_CUDA_CHECK_LAUNCH();
}

void moe_combine(const float* y, const float* w, int32_t n_tok, int32_t k, int32_t n, float* out, stream_t s) {
  if (n_tok <= 0 || n <= 0) return;
  AGENTQ_CUDA_REQUIRE(k > 0);
  moe_combine_kernel<<<grid_for(int64_t(n_tok) * n), 256, 0, detail::as_stream(s)>>>(y, w, n_tok, k, n, out);
  AGENTQ_CUDA_CHECK_LAUNCH();
}

void moe_group(const int32_t* ids, int32_t n_rows, int32_t n_expert, int32_t* order, int32_t* chunks, stream_t s) {
  if (n_rows <= 0) return;
  AGENTQ_CUDA_REQUIRE(n_expert > 0 && n_expert <= 4096);
  moe_group_kernel<<<1, 256, size_t(3) * n_expert * sizeof(int32_t), detail::as_stream(s)>>>(
      ids, n_rows, n_expert, moe_group_rows_per_chunk(), order, chunks);
  AGENTQ_CUDA_CHECK_LAUNCH();
}

}  // namespace agentq::kernels::cuda
