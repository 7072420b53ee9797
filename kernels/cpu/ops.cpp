// Vector ops of the forward pass: rms_norm, rope, softmax, SwiGLU, residual adds,
// dot products. All reduce in a fixed order (batch invariance).
#include <cmath>

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#define AGENTQ_KERNELS_AVX2 1
#endif

#include "agentq/exp_avx2.h"
#include "agentq/kernels.h"
#include "cpu/check.h"

namespace agentq::kernels {

// NOTE: must not depend on n beyond the data itself: 4 chains x 8 lanes over whole
// 32-element chunks, pairwise lane reduction, scalar tail last.
float dot_f32(const float* a, const float* b, int64_t n) {
  int64_t j = 0;
#if AGENTQ_KERNELS_AVX2
  __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
  for (; j + 32 <= n; j += 32)
    for (int k = 0; k < 4; ++k)
      acc[k] = _mm256_fmadd_ps(_mm256_loadu_ps(a + j + 8 * k), _mm256_loadu_ps(b + j + 8 * k), acc[k]);
  const __m256 s = _mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3]));
  __m128 t = _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));
  t = _mm_add_ps(t, _mm_movehl_ps(t, t));
  t = _mm_add_ss(t, _mm_movehdup_ps(t));
  float r = _mm_cvtss_f32(t);
#else
  float acc[4][8] = {};
  for (; j + 32 <= n; j += 32)
    for (int k = 0; k < 4; ++k)
      for (int l = 0; l < 8; ++l) acc[k][l] += a[j + 8 * k + l] * b[j + 8 * k + l];
  float s[8];
  for (int l = 0; l < 8; ++l) s[l] = (acc[0][l] + acc[1][l]) + (acc[2][l] + acc[3][l]);
  float t[4];
  for (int l = 0; l < 4; ++l) t[l] = s[l] + s[l + 4];
  float r = (t[0] + t[2]) + (t[1] + t[3]);
#endif
  float tail = 0;
  for (; j < n; ++j) tail += a[j] * b[j];
  return r + tail;
}

void rms_norm(const float* x, const float* w, float* y, int64_t n, float eps) {
  const float ss = dot_f32(x, x, n);
  const float scale = 1.0f / std::sqrt(ss / static_cast<float>(n) + eps);
  for (int64_t i = 0; i < n; ++i) y[i] = (x[i] * scale) * w[i];
}

void rope(float* vec, int64_t n_heads, int64_t head_dim, int64_t n_rot, int64_t pos, float base, float scale,
          rope_style style) {
  AGENTQ_KCHECK(n_rot % 2 == 0 && n_rot <= head_dim);
  // As ggml's rope: theta_i = scale * pos * base^(-2i/n_rot), the power taken by
  // repeated multiplication so results match llama.cpp's closely.
  const float theta_scale = std::pow(base, -2.0f / static_cast<float>(n_rot));
  float theta_base = static_cast<float>(pos);
  const int64_t half = n_rot / 2;
  for (int64_t i = 0; i < half; ++i) {
    const float theta = scale * theta_base;
    const float c = std::cos(theta), s = std::sin(theta);
    theta_base *= theta_scale;
    const int64_t i0 = style == rope_style::neox ? i : 2 * i;
    const int64_t i1 = style == rope_style::neox ? i + half : 2 * i + 1;
    for (int64_t h = 0; h < n_heads; ++h) {
      float* v = vec + h * head_dim;
      const float x0 = v[i0], x1 = v[i1];
      v[i0] = x0 * c - x1 * s;
      v[i1] = x0 * s + x1 * c;
    }
  }
}

void softmax_inplace(float* x, int64_t n) {
  if (n <= 0) return;
  float max = x[0];
  for (int64_t i = 1; i < n; ++i) max = x[i] > max ? x[i] : max;
  float sum = 0;
  for (int64_t i = 0; i < n; ++i) {
    x[i] = std::exp(x[i] - max);
    sum += x[i];
  }
  const float inv = 1.0f / sum;
  for (int64_t i = 0; i < n; ++i) x[i] *= inv;
}

// NOTE: the AVX2 path's exp is exp_avx2 (~2 ulp, not std::exp): 8 at a time, the tail padded
// to 8 so every element goes through the same function (std::exp was ~10 us of each 2048-wide
// decode step, 4% of a 110M model's token).
void silu_mul(const float* gate, const float* up, float* y, int64_t n) {
  int64_t i = 0;
#if AGENTQ_KERNELS_AVX2
  const __m256 one = _mm256_set1_ps(1.0f);
  auto silu8 = [&](__m256 g, __m256 u) {
    const __m256 e = exp_avx2(_mm256_sub_ps(_mm256_setzero_ps(), g));
    return _mm256_mul_ps(_mm256_div_ps(g, _mm256_add_ps(one, e)), u);
  };
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(y + i, silu8(_mm256_loadu_ps(gate + i), _mm256_loadu_ps(up + i)));
  if (i < n) {
    alignas(32) float g[8] = {}, u[8] = {};
    for (int64_t j = i; j < n; ++j) g[j - i] = gate[j], u[j - i] = up[j];
    _mm256_store_ps(g, silu8(_mm256_load_ps(g), _mm256_load_ps(u)));
    for (int64_t j = i; j < n; ++j) y[j] = g[j - i];
  }
#else
  for (; i < n; ++i) {
    const float g = gate[i];
    y[i] = (g / (1.0f + std::exp(-g))) * up[i];
  }
#endif
}

void vec_add(const float* a, const float* b, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = a[i] + b[i];
}

void vec_axpy(float a, const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += a * x[i];
}

void vec_scale(float* y, float a, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] *= a;
}

}  // namespace agentq::kernels
