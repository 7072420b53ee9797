// Plain C++ references for families.cu (same contracts; the CPU model's own routines are in
// engine/model/transformer.cpp and moe.cpp, which these follow).
#include <cmath>
#include <numeric>
#include <algorithm>
#include <cstdint>
#include <vector>

#include "agentq/kernels.h"
#include "agentq/kernels_cuda.h"

namespace agentq::kernels::ref {

void gelu_mul(const float* gate, const float* up, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float x = gate[i];
    float g;
    if (x <= -10.0f) {
      g = 0.0f;
    } else if (x >= 10.0f) {
      g = x;
    } else {
      const float h = fp16_to_fp32(fp32_to_fp16(x));
      g = fp16_to_fp32(fp32_to_fp16(0.5f * h * (1.0f + std::tanh(0.79788456080286535587989211986876f * h * (1.0f + 0.044715f * h * h)))));
    }
    out[i] = g * up[i];
  }
}

void scale(float* x, float factor, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] *= factor;
}

void softcap(float* x, float cap, int64_t n) {
  const float inv = 1.0f / cap;
  for (int64_t i = 0; i < n; ++i) x[i] = std::tanh(x[i] * inv) * cap;
}

void moe_topk(const float* logits, int32_t n_rows, int32_t n_expert, int32_t k, cuda::moe_gating gating, int32_t* ids,
              float* weights) {
  std::vector<int32_t> order(static_cast<size_t>(n_expert));
  for (int32_t r = 0; r < n_rows; ++r) {
    const float* p = logits + int64_t(r) * n_expert;
    int32_t* id = ids + int64_t(r) * k;
    float* w = weights + int64_t(r) * k;
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(order.begin(), order.begin() + k, order.end(),
                      [&](int32_t a, int32_t b) { return p[a] != p[b] ? p[a] > p[b] : a < b; });
    const float mx = *std::max_element(p, p + n_expert);
    for (int32_t j = 0; j < k; ++j) id[j] = order[size_t(j)];
    if (gating == cuda::moe_gating::softmax_norm) {
      double sum = 0;
      for (int32_t e = 0; e < n_expert; ++e) sum += double(std::exp(p[e] - mx));
      const float inv = float(1.0 / sum);
      float wsum = 0;
      for (int32_t j = 0; j < k; ++j) {
        w[j] = std::exp(p[id[j]] - mx) * inv;
        wsum += w[j];
      }
      wsum = std::max(wsum, 6.103515625e-5f);
      for (int32_t j = 0; j < k; ++j) w[j] /= wsum;
    } else {
      double sum = 0;
      for (int32_t j = 0; j < k; ++j) {
        w[j] = std::exp(p[id[j]] - p[id[0]]);
        sum += double(w[j]);
      }
      const float inv = float(1.0 / sum);
      for (int32_t j = 0; j < k; ++j) w[j] *= inv;
    }
  }
}

void swiglu_oai(const float* gate, const float* up, float* out, int64_t n) {
  constexpr float alpha = 1.702f, limit = 7.0f;
  for (int64_t i = 0; i < n; ++i) {
    const float x = std::min(gate[i], limit);
    const float u = std::clamp(up[i], -limit, limit);
    out[i] = x / (1.0f + std::exp(alpha * (-x))) * (u + 1.0f);
  }
}

void add_rows_by_id(float* x, const float* b, const int32_t* ids, int32_t n_rows, int32_t n) {
  for (int32_t r = 0; r < n_rows; ++r)
    for (int32_t i = 0; i < n; ++i) x[int64_t(r) * n + i] += b[int64_t(ids[r]) * n + i];
}

void moe_combine(const float* y, const float* w, int32_t n_tok, int32_t k, int32_t n, float* out) {
  for (int32_t t = 0; t < n_tok; ++t)
    for (int32_t c = 0; c < n; ++c) {
      const float* yt = y + int64_t(t) * k * n;
      volatile float o = yt[c] * w[int64_t(t) * k];  // NOTE: volatile: each product rounded, no FMA contraction
      for (int32_t j = 1; j < k; ++j) {
        volatile float p = yt[int64_t(j) * n + c] * w[int64_t(t) * k + j];
        o = o + p;
      }
      out[int64_t(t) * n + c] = o;
    }
}

void moe_matvec(weight_type type, const void* stack, int64_t n_out, int64_t n_in, const float* x, int32_t x_div,
                const int32_t* ids, int32_t n_rows, float* y) {
  const size_t rb = cuda::row_bytes(type, n_in);
  for (int32_t r = 0; r < n_rows; ++r)
    matvec(type, static_cast<const uint8_t*>(stack) + size_t(ids[r]) * size_t(n_out) * rb, n_out, n_in,
           x + int64_t(r / x_div) * n_in, 1, y + int64_t(r) * n_out);
}

void moe_group(const int32_t* ids, int32_t n_rows, int32_t n_expert, int32_t per_chunk, int32_t* order,
               int32_t* chunks) {
  int32_t o = 0, c = 0;
  for (int32_t e = 0; e < n_expert; ++e) {
    const int32_t first = o;
    for (int32_t r = 0; r < n_rows; ++r)
      if (ids[r] == e) order[o++] = r;
    for (int32_t b = first; b < o; b += per_chunk, ++c) {
      chunks[1 + 3 * c] = e;
      chunks[2 + 3 * c] = b;
      chunks[3 + 3 * c] = std::min(per_chunk, o - b);
    }
  }
  chunks[0] = c;
}

}  // namespace agentq::kernels::ref
