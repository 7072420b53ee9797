// Reference rotary embedding for rope.cu (angles in double, as the kernel does, so that large
// positions agree to float precision) and for rope_kv_write_table (angles from a table, as the CPU).
#include <cmath>

#include "agentq/kernels_cuda.h"

namespace agentq::kernels::ref {

void rope(float* x, const int32_t* pos, int32_t n_tokens, int32_t n_head, int32_t head_dim, int32_t n_rot,
          float base, float scale, bool neox, const float* freq_factors) {
  const int32_t half = n_rot / 2;
  for (int32_t t = 0; t < n_tokens; ++t) {
    for (int32_t h = 0; h < n_head; ++h) {
      float* v = x + (int64_t(t) * n_head + h) * head_dim;
      for (int32_t i = 0; i < half; ++i) {
        double theta = double(pos[t]) * double(scale) * std::pow(double(base), -2.0 * i / n_rot);
        if (freq_factors) theta /= double(freq_factors[i]);
        const float c = float(std::cos(theta)), s = float(std::sin(theta));
        const int32_t i0 = neox ? i : 2 * i;
        const int32_t i1 = neox ? i + half : 2 * i + 1;
        const float a = v[i0], b = v[i1];
        v[i0] = a * c - b * s;
        v[i1] = a * s + b * c;
      }
    }
  }
}

void rope_kv_write_table(float* q, float* k, const float* v, const int32_t* pos, const int32_t* tok_seq,
                         const int32_t* block_tables, int32_t max_blocks, int32_t n_tokens, int32_t n_head,
                         int32_t n_head_kv, int32_t head_dim, int32_t n_rot, bool neox, const float* inv_freq,
                         float mscale, int32_t block_size, float* k_cache, float* v_cache,
                         const cuda::kv_page_map& pages) {
  const int32_t half = n_rot / 2;
  auto rotate = [&](float* x, int32_t n_heads, int32_t p) {
    for (int32_t h = 0; h < n_heads; ++h) {
      float* vh = x + int64_t(h) * head_dim;
      for (int32_t i = 0; i < half; ++i) {
        const float theta = float(p) * inv_freq[i];
        const float c = float(std::cos(double(theta))) * mscale, s = float(std::sin(double(theta))) * mscale;
        const int32_t i0 = neox ? i : 2 * i, i1 = neox ? i + half : 2 * i + 1;
        const float a = vh[i0], b = vh[i1];
        vh[i0] = std::fma(a, c, -(b * s));
        vh[i1] = std::fma(a, s, b * c);
      }
    }
  };
  const int32_t row = n_head_kv * head_dim;
  for (int32_t t = 0; t < n_tokens; ++t) {
    if (inv_freq) {
      rotate(q + int64_t(t) * n_head * head_dim, n_head, pos[t]);
      rotate(k + int64_t(t) * row, n_head_kv, pos[t]);
    }
  }
  kv_write(k, v, pos, tok_seq, block_tables, max_blocks, n_tokens, row, block_size, k_cache, v_cache, pages);
}

}  // namespace agentq::kernels::ref
