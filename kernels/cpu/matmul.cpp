// Matrix products W[n_rows][n_cols] x X[n_x][n_cols]^T for every weight format:
// one fixed-order dot routine per format (AVX2/FMA/F16C or scalar), applied to
// tiles of 1 row x B inputs so a weight row is read from memory once per input block.
#include <algorithm>
#include <cstring>
#include <vector>

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#include <immintrin.h>
#define AGENTQ_KERNELS_AVX2 1
#endif

#include "agentq/kernels.h"
#include "cpu/check.h"
#include "cpu/quants_internal.h"

namespace agentq::kernels {

using detail::block_q8_0x;
using detail::block_q8_k;

namespace {

// A tile kernel: one weight row against B activation vectors; out[b] = dot(w, x[b]).
// NOTE: every instantiation performs, for each b, exactly the operations of B == 1,
// in the same order — that is what makes the result independent of the batch.
using tile_fn = void (*)(const uint8_t* w, const uint8_t* const* x, int64_t n_cols, float* out);

// ============================================================================
// Scalar dot products (the reference path, and the fallback without AVX2)
// Float formats: 4 accumulators x 8 lanes, element j -> acc[(j/8)%4][j%8] over
// whole 32-element chunks, lanes reduced pairwise, then the scalar tail added.

inline float load_w(const float* w, int64_t j) { return w[j]; }
inline float load_w(const uint16_t* w, int64_t j, bool bf16) { return bf16 ? bf16_to_fp32(w[j]) : fp16_to_fp32(w[j]); }

template <class Get>
float dot_float_scalar(Get get, const float* x, int64_t n) {
  float acc[4][8] = {};
  int64_t j = 0;
  for (; j + 32 <= n; j += 32)
    for (int k = 0; k < 4; ++k)
      for (int l = 0; l < 8; ++l) acc[k][l] += get(j + 8 * k + l) * x[j + 8 * k + l];
  float s[8];
  for (int l = 0; l < 8; ++l) s[l] = (acc[0][l] + acc[1][l]) + (acc[2][l] + acc[3][l]);
  float t[4];
  for (int l = 0; l < 4; ++l) t[l] = s[l] + s[l + 4];
  float r = (t[0] + t[2]) + (t[1] + t[3]);
  float tail = 0;
  for (; j < n; ++j) tail += get(j) * x[j];
  return r + tail;
}

float dot_f32_scalar(const uint8_t* w, const uint8_t* x, int64_t n) {
  auto wf = reinterpret_cast<const float*>(w);
  return dot_float_scalar([wf](int64_t j) { return wf[j]; }, reinterpret_cast<const float*>(x), n);
}
float dot_f16_scalar(const uint8_t* w, const uint8_t* x, int64_t n) {
  auto wh = reinterpret_cast<const uint16_t*>(w);
  return dot_float_scalar([wh](int64_t j) { return fp16_to_fp32(wh[j]); }, reinterpret_cast<const float*>(x), n);
}
float dot_bf16_scalar(const uint8_t* w, const uint8_t* x, int64_t n) {
  auto wh = reinterpret_cast<const uint16_t*>(w);
  return dot_float_scalar([wh](int64_t j) { return bf16_to_fp32(wh[j]); }, reinterpret_cast<const float*>(x), n);
}

// Q8_0 x Q8_0: exact int32 per block, then two float accumulators (even/odd blocks).
float dot_q8_0_scalar(const uint8_t* w, const uint8_t* x, int64_t n) {
  auto wb = reinterpret_cast<const block_q8_0*>(w);
  auto xb = reinterpret_cast<const block_q8_0x*>(x);
  float acc[2] = {0, 0};
  for (int64_t i = 0; i < n / qk8_0; ++i) {
    int32_t s = 0;
    for (int j = 0; j < qk8_0; ++j) s += wb[i].qs[j] * xb[i].qs[j];
    acc[i & 1] += (fp16_to_fp32(wb[i].d) * xb[i].d) * static_cast<float>(s);
  }
  return acc[0] + acc[1];
}

// Q4_K x Q8_K: exact int32 per super-block for the scaled quants and for the mins.
float dot_q4_k_scalar(const uint8_t* w, const uint8_t* x, int64_t n) {
  auto wb = reinterpret_cast<const block_q4_k*>(w);
  auto xb = reinterpret_cast<const block_q8_k*>(x);
  float acc = 0, acc_m = 0;
  for (int64_t i = 0; i < n / qk_k; ++i) {
    int32_t isum = 0, msum = 0;
    for (int j = 0; j < qk_k / 32; ++j) {
      uint8_t sc, m;
      detail::get_scale_min_k4(j, wb[i].scales, &sc, &m);
      const uint8_t* q = wb[i].qs + 32 * (j / 2);
      const int8_t* y = xb[i].qs + 32 * j;
      int32_t s = 0;
      if (j % 2 == 0) {
        for (int l = 0; l < 32; ++l) s += (q[l] & 0xF) * y[l];
      } else {
        for (int l = 0; l < 32; ++l) s += (q[l] >> 4) * y[l];
      }
      isum += sc * s;
      msum += m * (xb[i].bsums[2 * j] + xb[i].bsums[2 * j + 1]);
    }
    acc += (fp16_to_fp32(wb[i].d) * xb[i].d) * static_cast<float>(isum);
    acc_m += (-fp16_to_fp32(wb[i].dmin) * xb[i].d) * static_cast<float>(msum);
  }
  return acc + acc_m;
}

// Q6_K x Q8_K: exact int32 per super-block.
float dot_q6_k_scalar(const uint8_t* w, const uint8_t* x, int64_t n) {
  auto wb = reinterpret_cast<const block_q6_k*>(w);
  auto xb = reinterpret_cast<const block_q8_k*>(x);
  float acc = 0;
  for (int64_t i = 0; i < n / qk_k; ++i) {
    const uint8_t* ql = wb[i].ql;
    const uint8_t* qh = wb[i].qh;
    const int8_t* sc = wb[i].scales;
    const int8_t* y = xb[i].qs;
    int32_t isum = 0;
    for (int j = 0; j < qk_k; j += 128) {
      int32_t s[8] = {};
      for (int l = 0; l < 32; ++l) {
        int is = l / 16;
        const int q1 = ((ql[l + 0] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
        const int q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
        const int q3 = ((ql[l + 0] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
        const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
        s[is + 0] += q1 * y[l + 0];
        s[is + 2] += q2 * y[l + 32];
        s[is + 4] += q3 * y[l + 64];
        s[is + 6] += q4 * y[l + 96];
      }
      for (int k = 0; k < 8; ++k) isum += sc[k] * s[k];
      y += 128;
      ql += 64;
      qh += 32;
      sc += 8;
    }
    acc += (fp16_to_fp32(wb[i].d) * xb[i].d) * static_cast<float>(isum);
  }
  return acc;
}

using dot_fn = float (*)(const uint8_t* w, const uint8_t* x, int64_t n);

dot_fn scalar_dot(weight_type t) {
  switch (t) {
    case weight_type::f32: return dot_f32_scalar;
    case weight_type::f16: return dot_f16_scalar;
    case weight_type::bf16: return dot_bf16_scalar;
    case weight_type::q8_0: return dot_q8_0_scalar;
    case weight_type::q4_k: return dot_q4_k_scalar;
    case weight_type::q6_k: return dot_q6_k_scalar;
  }
  AGENTQ_KCHECK(!"unknown weight type");
  return nullptr;
}

template <dot_fn Dot, int B>
void tile_scalar(const uint8_t* w, const uint8_t* const* x, int64_t n, float* out) {
  for (int b = 0; b < B; ++b) out[b] = Dot(w, x[b], n);
}

#if AGENTQ_KERNELS_AVX2
// ============================================================================
// AVX2 / FMA / F16C dot products

inline float hsum8(__m256 s) {
  __m128 t = _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));
  t = _mm_add_ps(t, _mm_movehl_ps(t, t));
  t = _mm_add_ss(t, _mm_movehdup_ps(t));
  return _mm_cvtss_f32(t);
}
inline float hsum4(__m128 t) {
  t = _mm_add_ps(t, _mm_movehl_ps(t, t));
  t = _mm_add_ss(t, _mm_movehdup_ps(t));
  return _mm_cvtss_f32(t);
}
inline float h2f(uint16_t h) { return _cvtsh_ss(h); }

// NOTE: explicit prefetch a fixed distance ahead of the weight stream; the hardware
// prefetcher alone leaves single-thread matvec well short of the read bandwidth.
constexpr int prefetch_bytes = 4096;  // ~ bandwidth x DRAM latency, with headroom
inline void prefetch(const void* p) { _mm_prefetch(static_cast<const char*>(p), _MM_HINT_T0); }

struct load_f32 {
  static constexpr int size = 4;
  static __m256 v(const uint8_t* w, int64_t j) { return _mm256_loadu_ps(reinterpret_cast<const float*>(w) + j); }
  static float s(const uint8_t* w, int64_t j) { return reinterpret_cast<const float*>(w)[j]; }
};
struct load_f16 {
  static constexpr int size = 2;
  static __m256 v(const uint8_t* w, int64_t j) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(reinterpret_cast<const uint16_t*>(w) + j)));
  }
  static float s(const uint8_t* w, int64_t j) { return h2f(reinterpret_cast<const uint16_t*>(w)[j]); }
};
struct load_bf16 {
  static constexpr int size = 2;
  static __m256 v(const uint8_t* w, int64_t j) {
    __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(reinterpret_cast<const uint16_t*>(w) + j));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  }
  static float s(const uint8_t* w, int64_t j) { return bf16_to_fp32(reinterpret_cast<const uint16_t*>(w)[j]); }
};

// Float formats: 4 FMA chains x 8 lanes per (row, input); B inputs share each weight load.
template <class L, int B>
void tile_float_avx2(const uint8_t* w, const uint8_t* const* xb, int64_t n, float* out) {
  const float* x[B];
  for (int b = 0; b < B; ++b) x[b] = reinterpret_cast<const float*>(xb[b]);
  __m256 acc[B][4];
  for (int b = 0; b < B; ++b)
    for (int k = 0; k < 4; ++k) acc[b][k] = _mm256_setzero_ps();
  int64_t j = 0;
  for (; j + 32 <= n; j += 32) {
    prefetch(w + j * L::size + prefetch_bytes);
    if (L::size == 4) prefetch(w + j * L::size + prefetch_bytes + 64);
    for (int k = 0; k < 4; ++k) {
      const __m256 wv = L::v(w, j + 8 * k);
      for (int b = 0; b < B; ++b) acc[b][k] = _mm256_fmadd_ps(wv, _mm256_loadu_ps(x[b] + j + 8 * k), acc[b][k]);
    }
  }
  for (int b = 0; b < B; ++b) {
    const __m256 s = _mm256_add_ps(_mm256_add_ps(acc[b][0], acc[b][1]), _mm256_add_ps(acc[b][2], acc[b][3]));
    float tail = 0;
    for (int64_t jj = j; jj < n; ++jj) tail += L::s(w, jj) * x[b][jj];
    out[b] = hsum8(s) + tail;
  }
}

// Q8_0: sign trick + maddubs -> 8 int32 lanes per block (exact), then FMA into
// one of two chains (even/odd block).
template <int B>
void tile_q8_0_avx2(const uint8_t* w, const uint8_t* const* xb, int64_t n, float* out) {
  auto wb = reinterpret_cast<const block_q8_0*>(w);
  const block_q8_0x* x[B];
  for (int b = 0; b < B; ++b) x[b] = reinterpret_cast<const block_q8_0x*>(xb[b]);
  const __m256i ones = _mm256_set1_epi16(1);
  __m256 acc[B][2];
  for (int b = 0; b < B; ++b) acc[b][0] = acc[b][1] = _mm256_setzero_ps();
  const int64_t nb = n / qk8_0;
  auto step = [&](int64_t i, int k) {
    prefetch(reinterpret_cast<const uint8_t*>(wb + i) + prefetch_bytes);
    const __m256i qw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wb[i].qs));
    const __m256i aw = _mm256_sign_epi8(qw, qw);
    const float dw = h2f(wb[i].d);
    for (int b = 0; b < B; ++b) {
      const __m256i qx = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[b][i].qs));
      const __m256i sx = _mm256_sign_epi8(qx, qw);
      const __m256i dot = _mm256_madd_epi16(_mm256_maddubs_epi16(aw, sx), ones);
      const __m256 d = _mm256_set1_ps(dw * x[b][i].d);
      acc[b][k] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(dot), acc[b][k]);
    }
  };
  int64_t i = 0;
  for (; i + 2 <= nb; i += 2) {
    step(i, 0);
    step(i + 1, 1);
  }
  if (i < nb) step(i, 0);
  for (int b = 0; b < B; ++b) out[b] = hsum8(_mm256_add_ps(acc[b][0], acc[b][1]));
}

// Q4_K: the 6-bit scales and mins of one super-block unpacked in SIMD (ggml's utmp
// shuffle, lane-wise): *scales = 8 x int16 scales in both 128-bit halves, *mins = 8 x int16.
//   v = [u0, u1, u2, -] (the 12 scale bytes; reading 16 stays inside the block)
//   out = [u0 & m1, (u2 & m2) | ((u0 >> 6 & m3) << 4), u1 & m1, (u2 >> 4 & m2) | ((u1 >> 6 & m3) << 4)]
inline void q4_k_scales_mins(const block_q4_k& b, __m256i* scales, __m128i* mins) {
  constexpr uint32_t kmask1 = 0x3f3f3f3f, kmask2 = 0x0f0f0f0f, kmask3 = 0x03030303;
  const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b.scales));
  const __m128i a = _mm_shuffle_epi32(v, _MM_SHUFFLE(2, 1, 2, 0));  // [u0, u2, u1, u2]
  const __m128i c = _mm_shuffle_epi32(v, _MM_SHUFFLE(1, 1, 0, 0));  // [u0, u0, u1, u1]
  const __m128i even = _mm_and_si128(a, _mm_set1_epi32(static_cast<int>(kmask1)));
  const __m128i odd = _mm_or_si128(
      _mm_and_si128(_mm_srlv_epi32(a, _mm_set_epi32(4, 0, 0, 0)), _mm_set1_epi32(static_cast<int>(kmask2))),
      _mm_slli_epi32(_mm_and_si128(_mm_srli_epi32(c, 6), _mm_set1_epi32(static_cast<int>(kmask3))), 4));
  // 16 x int16: scales[0..7], mins[0..7]
  const __m256i mins_and_scales = _mm256_cvtepu8_epi16(_mm_blend_epi32(even, odd, 0b1010));
  *mins = _mm256_extracti128_si256(mins_and_scales, 1);
  *scales = _mm256_permute2x128_si256(mins_and_scales, mins_and_scales, 0x00);
}

// Q4_K: as llama.cpp's ggml_vec_dot_q4_K_q8_K (AVX2). Per super-block the quants
// and the mins reduce to exact int32 lanes; one FMA each into acc / acc_m.
template <int B>
void tile_q4_k_avx2(const uint8_t* w, const uint8_t* const* xb, int64_t n, float* out) {
  auto wb = reinterpret_cast<const block_q4_k*>(w);
  const block_q8_k* x[B];
  for (int b = 0; b < B; ++b) x[b] = reinterpret_cast<const block_q8_k*>(xb[b]);
  const __m256i m4 = _mm256_set1_epi8(0xF);
  __m256 acc[B];
  __m128 acc_m[B];
  for (int b = 0; b < B; ++b) {
    acc[b] = _mm256_setzero_ps();
    acc_m[b] = _mm_setzero_ps();
  }
  for (int64_t i = 0; i < n / qk_k; ++i) {
    prefetch(reinterpret_cast<const uint8_t*>(wb + i) + prefetch_bytes);
    prefetch(reinterpret_cast<const uint8_t*>(wb + i) + prefetch_bytes + 64);
    prefetch(reinterpret_cast<const uint8_t*>(wb + i) + prefetch_bytes + 128);
    const float dw = h2f(wb[i].d);
    const float dminw = -h2f(wb[i].dmin);
    __m128i mins;
    __m256i scales;
    q4_k_scales_mins(wb[i], &scales, &mins);
    if constexpr (B == 1) {
      // Decode: fused, everything in registers.
      const block_q8_k& y = x[0][i];
      const __m256i q8sums = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(y.bsums));
      const __m128i q8s = _mm_hadd_epi16(_mm256_extracti128_si256(q8sums, 0), _mm256_extracti128_si256(q8sums, 1));
      const __m128i prod = _mm_madd_epi16(mins, q8s);
      acc_m[0] = _mm_fmadd_ps(_mm_set1_ps(dminw * y.d), _mm_cvtepi32_ps(prod), acc_m[0]);
      __m256i sumi = _mm256_setzero_si256();
      for (int j = 0; j < qk_k / 64; ++j) {
        const __m256i scale_l = _mm256_shuffle_epi8(scales, _mm256_set1_epi16(static_cast<short>((4 * j) | ((4 * j + 1) << 8))));
        const __m256i scale_h = _mm256_shuffle_epi8(scales, _mm256_set1_epi16(static_cast<short>((4 * j + 2) | ((4 * j + 3) << 8))));
        const __m256i q4bits = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wb[i].qs + 32 * j));
        const __m256i q4l = _mm256_and_si256(q4bits, m4);
        const __m256i q4h = _mm256_and_si256(_mm256_srli_epi16(q4bits, 4), m4);
        const __m256i q8l = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(y.qs + 64 * j));
        const __m256i q8h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(y.qs + 64 * j + 32));
        const __m256i p16l = _mm256_madd_epi16(scale_l, _mm256_maddubs_epi16(q4l, q8l));
        const __m256i p16h = _mm256_madd_epi16(scale_h, _mm256_maddubs_epi16(q4h, q8h));
        sumi = _mm256_add_epi32(sumi, _mm256_add_epi32(p16l, p16h));
      }
      acc[0] = _mm256_fmadd_ps(_mm256_set1_ps(dw * y.d), _mm256_cvtepi32_ps(sumi), acc[0]);
    } else {
      // Weight side once per super-block, shared by the B inputs:
      // q4v[2j], q4v[2j+1]: the 4-bit quants of sub-blocks 2j, 2j+1; scv: their scales as int16.
      __m256i q4v[8], scv[8];
      for (int j = 0; j < qk_k / 64; ++j) {
        const __m256i q4bits = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wb[i].qs + 32 * j));
        q4v[2 * j] = _mm256_and_si256(q4bits, m4);
        q4v[2 * j + 1] = _mm256_and_si256(_mm256_srli_epi16(q4bits, 4), m4);
        for (int h = 0; h < 2; ++h) {
          const int sb = 2 * j + h;
          scv[sb] = _mm256_shuffle_epi8(scales, _mm256_set1_epi16(static_cast<short>((2 * sb) | ((2 * sb + 1) << 8))));
        }
      }
      for (int b = 0; b < B; ++b) {
        const block_q8_k& y = x[b][i];
        const __m256i q8sums = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(y.bsums));
        const __m128i q8s = _mm_hadd_epi16(_mm256_extracti128_si256(q8sums, 0), _mm256_extracti128_si256(q8sums, 1));
        const __m128i prod = _mm_madd_epi16(mins, q8s);
        acc_m[b] = _mm_fmadd_ps(_mm_set1_ps(dminw * y.d), _mm_cvtepi32_ps(prod), acc_m[b]);
        __m256i sumi = _mm256_setzero_si256();
        for (int sb = 0; sb < qk_k / 32; ++sb) {
          const __m256i q8 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(y.qs + 32 * sb));
          sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(scv[sb], _mm256_maddubs_epi16(q4v[sb], q8)));
        }
        acc[b] = _mm256_fmadd_ps(_mm256_set1_ps(dw * y.d), _mm256_cvtepi32_ps(sumi), acc[b]);
      }
    }
  }
  for (int b = 0; b < B; ++b) out[b] = hsum8(acc[b]) + hsum4(acc_m[b]);
}

// Q6_K: as llama.cpp's ggml_vec_dot_q6_K_q8_K (AVX2): unsigned 6-bit quants times
// q8 minus 32*q8, scaled per 16 elements, exact int32 lanes per super-block.
template <int B>
void tile_q6_k_avx2(const uint8_t* w, const uint8_t* const* xb, int64_t n, float* out) {
  auto wb = reinterpret_cast<const block_q6_k*>(w);
  const block_q8_k* x[B];
  for (int b = 0; b < B; ++b) x[b] = reinterpret_cast<const block_q8_k*>(xb[b]);
  const __m256i m4 = _mm256_set1_epi8(0xF);
  const __m256i m2 = _mm256_set1_epi8(3);
  const __m256i m32s = _mm256_set1_epi8(32);
  __m256 acc[B];
  for (int b = 0; b < B; ++b) acc[b] = _mm256_setzero_ps();
  for (int64_t i = 0; i < n / qk_k; ++i) {
    for (int c = 0; c < 4; ++c) prefetch(reinterpret_cast<const uint8_t*>(wb + i) + prefetch_bytes + 64 * c);
    const float dw = h2f(wb[i].d);
    const __m128i scales = _mm_loadu_si128(reinterpret_cast<const __m128i*>(wb[i].scales));
    __m256i sumi[B];
    for (int b = 0; b < B; ++b) sumi[b] = _mm256_setzero_si256();
    for (int j = 0; j < qk_k / 128; ++j) {
      const uint8_t* q4 = wb[i].ql + 64 * j;
      const uint8_t* qh = wb[i].qh + 32 * j;
      __m256i sc[4];
      for (int k = 0; k < 4; ++k) {
        const int is = 4 * j + k;  // scales 2*is, 2*is+1 cover elements 32k..32k+31 of this 128
        const __m128i shuf = _mm_set_epi64x(0x0101010101010101ll * (2 * is + 1), 0x0101010101010101ll * (2 * is));
        sc[k] = _mm256_cvtepi8_epi16(_mm_shuffle_epi8(scales, shuf));
      }
      const __m256i q4bits1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q4));
      const __m256i q4bits2 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q4 + 32));
      const __m256i q4bitsH = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qh));
      __m256i q6[4];
      q6[0] = _mm256_or_si256(_mm256_and_si256(q4bits1, m4), _mm256_slli_epi16(_mm256_and_si256(q4bitsH, m2), 4));
      q6[1] = _mm256_or_si256(_mm256_and_si256(q4bits2, m4),
                              _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(q4bitsH, 2), m2), 4));
      q6[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q4bits1, 4), m4),
                              _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(q4bitsH, 4), m2), 4));
      q6[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q4bits2, 4), m4),
                              _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(q4bitsH, 6), m2), 4));
      for (int b = 0; b < B; ++b) {
        const int8_t* q8 = x[b][i].qs + 128 * j;
        for (int k = 0; k < 4; ++k) {
          const __m256i q8v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q8 + 32 * k));
          const __m256i p16 = _mm256_sub_epi16(_mm256_maddubs_epi16(q6[k], q8v), _mm256_maddubs_epi16(m32s, q8v));
          sumi[b] = _mm256_add_epi32(sumi[b], _mm256_madd_epi16(sc[k], p16));
        }
      }
    }
    for (int b = 0; b < B; ++b)
      acc[b] = _mm256_fmadd_ps(_mm256_set1_ps(dw * x[b][i].d), _mm256_cvtepi32_ps(sumi[b]), acc[b]);
  }
  for (int b = 0; b < B; ++b) out[b] = hsum8(acc[b]);
}

// ============================================================================
// Matrix-vector (decode) kernels: R consecutive weight rows against one input.
// NOTE: per row these perform exactly the float operations of tile<1> of the same
// format (integer parts are exact, so only their lane layout matters), so a row's
// value is bit-identical whichever path computes it. Interleaving R rows shares the
// input's loads and per-block work and amortizes the per-row call overhead.
// Decode rows are short (768 columns = 3 Q4_K super-blocks in a 110M model), so that
// overhead was a large share of the matvec.

// NOTE: R rows read in parallel are R streams, which the hardware prefetcher follows
// poorly (per-row prefetches measured 35-40% below the one-row kernel). The R rows are
// one contiguous range of R * row_stride bytes (row_stride == row bytes for model
// weights), and the next group follows it, so prefetch the next group as one linear
// stream at the pace of this one: when `done` bytes of each row... i.e. R * done of the
// group are consumed, fetch the next group's bytes [R * done, R * done + len).
inline void prefetch_group(const uint8_t* w, size_t group_bytes, int64_t done, int64_t len) {
  for (int64_t c = 0; c < len; c += 64) prefetch(w + group_bytes + done + c);
}

template <int R>
void rows_q8_0_avx2(const uint8_t* w, size_t stride, const uint8_t* xp, int64_t n, float* out) {
  auto x = reinterpret_cast<const block_q8_0x*>(xp);
  const block_q8_0* wr[R];
  for (int r = 0; r < R; ++r) wr[r] = reinterpret_cast<const block_q8_0*>(w + static_cast<size_t>(r) * stride);
  const __m256i ones = _mm256_set1_epi16(1);
  __m256 acc[R][2];
  for (int r = 0; r < R; ++r) acc[r][0] = acc[r][1] = _mm256_setzero_ps();
  const int64_t nb = n / qk8_0;
  auto step = [&](int64_t i, int k) {
    const __m256i qx = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[i].qs));
    const float dx = x[i].d;
    for (int r = 0; r < R; ++r) {
      const __m256i qw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wr[r][i].qs));
      const __m256i dot = _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_sign_epi8(qw, qw), _mm256_sign_epi8(qx, qw)), ones);
      acc[r][k] = _mm256_fmadd_ps(_mm256_set1_ps(h2f(wr[r][i].d) * dx), _mm256_cvtepi32_ps(dot), acc[r][k]);
    }
  };
  int64_t i = 0;
  for (; i + 2 <= nb; i += 2) {
    prefetch_group(w, R * stride, i * R * static_cast<int64_t>(sizeof(block_q8_0)), 2 * R * static_cast<int64_t>(sizeof(block_q8_0)));
    step(i, 0);
    step(i + 1, 1);
  }
  if (i < nb) step(i, 0);
  for (int r = 0; r < R; ++r) out[r] = hsum8(_mm256_add_ps(acc[r][0], acc[r][1]));
}

template <int R>
void rows_q4_k_avx2(const uint8_t* w, size_t stride, const uint8_t* xp, int64_t n, float* out) {
  auto x = reinterpret_cast<const block_q8_k*>(xp);
  const block_q4_k* wr[R];
  for (int r = 0; r < R; ++r) wr[r] = reinterpret_cast<const block_q4_k*>(w + static_cast<size_t>(r) * stride);
  const __m256i m4 = _mm256_set1_epi8(0xF);
  __m256 acc[R];
  __m128 acc_m[R];
  for (int r = 0; r < R; ++r) {
    acc[r] = _mm256_setzero_ps();
    acc_m[r] = _mm_setzero_ps();
  }
  for (int64_t i = 0; i < n / qk_k; ++i) {
    const block_q8_k& y = x[i];
    const __m256i q8sums = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(y.bsums));
    const __m128i q8s = _mm_hadd_epi16(_mm256_castsi256_si128(q8sums), _mm256_extracti128_si256(q8sums, 1));
    const __m128 yd = _mm_set1_ps(y.d);
    prefetch_group(w, R * stride, i * R * static_cast<int64_t>(sizeof(block_q4_k)), R * static_cast<int64_t>(sizeof(block_q4_k)));
    for (int r = 0; r < R; ++r) {
      const block_q4_k& b = wr[r][i];
      __m128i mins;
      __m256i scales;
      q4_k_scales_mins(b, &scales, &mins);
      // [d * y.d, dmin * y.d]; fnmadd with dmin * y.d == fma with (-dmin) * y.d, as tile<1>.
      uint32_t d_dmin;
      std::memcpy(&d_dmin, &b.d, 4);
      const __m128 dd = _mm_mul_ps(_mm_cvtph_ps(_mm_cvtsi32_si128(static_cast<int>(d_dmin))), yd);
      acc_m[r] = _mm_fnmadd_ps(_mm_permute_ps(dd, 0x55), _mm_cvtepi32_ps(_mm_madd_epi16(mins, q8s)), acc_m[r]);
      __m256i sumi = _mm256_setzero_si256();
      for (int j = 0; j < qk_k / 64; ++j) {
        const __m256i scale_l = _mm256_shuffle_epi8(scales, _mm256_set1_epi16(static_cast<short>((4 * j) | ((4 * j + 1) << 8))));
        const __m256i scale_h = _mm256_shuffle_epi8(scales, _mm256_set1_epi16(static_cast<short>((4 * j + 2) | ((4 * j + 3) << 8))));
        const __m256i q4bits = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.qs + 32 * j));
        const __m256i q4l = _mm256_and_si256(q4bits, m4);
        const __m256i q4h = _mm256_and_si256(_mm256_srli_epi16(q4bits, 4), m4);
        const __m256i q8l = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(y.qs + 64 * j));
        const __m256i q8h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(y.qs + 64 * j + 32));
        const __m256i p16l = _mm256_madd_epi16(scale_l, _mm256_maddubs_epi16(q4l, q8l));
        const __m256i p16h = _mm256_madd_epi16(scale_h, _mm256_maddubs_epi16(q4h, q8h));
        sumi = _mm256_add_epi32(sumi, _mm256_add_epi32(p16l, p16h));
      }
      acc[r] = _mm256_fmadd_ps(_mm256_broadcastss_ps(dd), _mm256_cvtepi32_ps(sumi), acc[r]);
    }
  }
  for (int r = 0; r < R; ++r) out[r] = hsum8(acc[r]) + hsum4(acc_m[r]);
}
#endif  // AGENTQ_KERNELS_AVX2

constexpr int max_tile = 4;

constexpr int max_rows = 4;

// R consecutive rows (row_stride apart) against one input: out[r] = dot(W[r], x).
using rows_fn = void (*)(const uint8_t* w, size_t row_stride, const uint8_t* x, int64_t n_cols, float* out);

struct tile_set {
  int max_b;                       // widest tile
  tile_fn fn[max_tile + 1];        // fn[b] handles b inputs, 1 <= b <= max_b
  rows_fn rows[max_rows + 1];      // rows[k] handles k rows of one input; all null: use fn[1]
};

template <template <int> class T>
constexpr tile_set make_set(int max_b) {
  return {max_b, {nullptr, T<1>::f, T<2>::f, T<3>::f, T<4>::f}, {}};
}

template <template <int> class T, template <int> class R>
constexpr tile_set make_set(int max_b) {
  return {max_b, {nullptr, T<1>::f, T<2>::f, T<3>::f, T<4>::f}, {nullptr, R<1>::f, R<2>::f, R<3>::f, R<4>::f}};
}

template <dot_fn D>
struct scalar_tiles {
  template <int B>
  struct t { static constexpr tile_fn f = tile_scalar<D, B>; };
};

[[maybe_unused]] tile_set scalar_set(weight_type t) {
  switch (t) {
    case weight_type::f32: return make_set<scalar_tiles<dot_f32_scalar>::t>(4);
    case weight_type::f16: return make_set<scalar_tiles<dot_f16_scalar>::t>(4);
    case weight_type::bf16: return make_set<scalar_tiles<dot_bf16_scalar>::t>(4);
    case weight_type::q8_0: return make_set<scalar_tiles<dot_q8_0_scalar>::t>(4);
    case weight_type::q4_k: return make_set<scalar_tiles<dot_q4_k_scalar>::t>(4);
    case weight_type::q6_k: return make_set<scalar_tiles<dot_q6_k_scalar>::t>(4);
  }
  AGENTQ_KCHECK(!"unknown weight type");
  return {};
}

#if AGENTQ_KERNELS_AVX2
template <class L>
struct float_tiles {
  template <int B>
  struct t { static constexpr tile_fn f = tile_float_avx2<L, B>; };  // B = 4 unused (max_b 3)
};
template <int B> struct q8_0_tiles { static constexpr tile_fn f = tile_q8_0_avx2<B>; };
template <int B> struct q4_k_tiles { static constexpr tile_fn f = tile_q4_k_avx2<B>; };
template <int B> struct q6_k_tiles { static constexpr tile_fn f = tile_q6_k_avx2<B>; };
template <int R> struct q8_0_rows { static constexpr rows_fn f = rows_q8_0_avx2<R>; };
template <int R> struct q4_k_rows { static constexpr rows_fn f = rows_q4_k_avx2<R>; };
#endif

tile_set fast_set(weight_type t) {
#if AGENTQ_KERNELS_AVX2
  switch (t) {
    case weight_type::f32: return make_set<float_tiles<load_f32>::t>(3);
    case weight_type::f16: return make_set<float_tiles<load_f16>::t>(3);
    case weight_type::bf16: return make_set<float_tiles<load_bf16>::t>(3);
    case weight_type::q8_0: return make_set<q8_0_tiles, q8_0_rows>(4);
    case weight_type::q4_k: return make_set<q4_k_tiles, q4_k_rows>(4);
    case weight_type::q6_k: return make_set<q6_k_tiles>(4);
  }
  AGENTQ_KCHECK(!"unknown weight type");
  return {};
#else
  return scalar_set(t);
#endif
}

// Bytes of one prepared activation vector of n_cols for weight type t.
size_t activation_row_bytes(weight_type t, int64_t n_cols) {
  switch (t) {
    case weight_type::q8_0: return static_cast<size_t>(n_cols / qk8_0) * sizeof(block_q8_0x);
    case weight_type::q4_k: case weight_type::q6_k: return static_cast<size_t>(n_cols / qk_k) * sizeof(block_q8_k);
    default: return static_cast<size_t>(n_cols) * sizeof(float);
  }
}

// NOTE: the blocking below only decides which (b, r) pairs run together; each
// pair's value comes from the same tile code path whatever the tile width.
// Three levels: an L2 block of inputs (weights stream from memory once per block),
// a chunk of rows that stays in L2, and an L1 block of inputs reused by every row
// of the chunk.
void run_tiles(const tile_set& ts, const uint8_t* w, size_t row_stride, int64_t n_cols, const uint8_t* qx,
               size_t x_stride, int64_t n_x, float* y, int64_t row_begin, int64_t row_end, int64_t n_rows) {
  const int64_t mb = ts.max_b;
  auto inputs_within = [&](size_t bytes) {
    const int64_t n = static_cast<int64_t>(bytes / std::max<size_t>(x_stride, 1)) / mb * mb;
    return std::max(mb, n);
  };
  const int64_t n_l2 = inputs_within(256u << 10);
  const int64_t n_l1 = inputs_within(20u << 10);
  const int64_t n_chunk = n_x <= mb ? row_end - row_begin
                                    : std::clamp<int64_t>(static_cast<int64_t>((128u << 10) / std::max<size_t>(row_stride, 1)), 1, 64);
  if (n_x == 1 && ts.rows[1]) {
    // Decode: the whole row range against the one input, max_rows rows per call.
    for (int64_t r = row_begin; r < row_end;) {
      const int k = static_cast<int>(std::min<int64_t>(max_rows, row_end - r));
      ts.rows[k](w + static_cast<size_t>(r) * row_stride, row_stride, qx, n_cols, y + r);
      r += k;
    }
    return;
  }
  const uint8_t* xs[max_tile];
  float out[max_tile];
  for (int64_t b0 = 0; b0 < n_x; b0 += n_l2) {
    const int64_t b0_end = std::min(n_x, b0 + n_l2);
    for (int64_t r0 = row_begin; r0 < row_end; r0 += n_chunk) {
      const int64_t r0_end = std::min(row_end, r0 + n_chunk);
      for (int64_t b1 = b0; b1 < b0_end; b1 += n_l1) {
        const int64_t b1_end = std::min(b0_end, b1 + n_l1);
        for (int64_t r = r0; r < r0_end; ++r) {
          const uint8_t* wr = w + static_cast<size_t>(r) * row_stride;
          for (int64_t b = b1; b < b1_end;) {
            const int k = static_cast<int>(std::min<int64_t>(mb, b1_end - b));
            for (int i = 0; i < k; ++i) xs[i] = qx + static_cast<size_t>(b + i) * x_stride;
            ts.fn[k](wr, xs, n_cols, out);
            for (int i = 0; i < k; ++i) y[(b + i) * n_rows + r] = out[i];
            b += k;
          }
        }
      }
    }
  }
}

void check_args(weight_type t, int64_t n_cols, int64_t n_x, int64_t row_begin, int64_t row_end, int64_t n_rows) {
  AGENTQ_KCHECK(block_elems(t) > 0);
  AGENTQ_KCHECK(n_cols > 0 && n_cols % block_elems(t) == 0);
  AGENTQ_KCHECK(n_x >= 0 && 0 <= row_begin && row_begin <= row_end && row_end <= n_rows);
}

std::vector<uint8_t>& scratch() {
  thread_local std::vector<uint8_t> buf;
  return buf;
}

}  // namespace

size_t activation_bytes(weight_type t, int64_t n_cols, int64_t n_x) {
  return activation_row_bytes(t, n_cols) * static_cast<size_t>(n_x);
}

void quantize_activations(weight_type t, const float* x, int64_t n_cols, int64_t n_x, void* qx) {
  AGENTQ_KCHECK(block_elems(t) > 0 && n_cols % block_elems(t) == 0);
  const size_t stride = activation_row_bytes(t, n_cols);
  auto dst = static_cast<uint8_t*>(qx);
  for (int64_t b = 0; b < n_x; ++b) {
    const float* xb = x + b * n_cols;
    uint8_t* d = dst + static_cast<size_t>(b) * stride;
    switch (t) {
      case weight_type::q8_0: detail::quantize_act_q8_0(xb, reinterpret_cast<block_q8_0x*>(d), n_cols); break;
      case weight_type::q4_k: case weight_type::q6_k:
        detail::quantize_act_q8_k(xb, reinterpret_cast<block_q8_k*>(d), n_cols);
        break;
      default: std::memcpy(d, xb, stride); break;
    }
  }
}

void matmul_prequantized(weight_type t, const void* w, size_t row_stride_bytes, int64_t n_cols, const void* qx,
                         int64_t n_x, float* y, int64_t row_begin, int64_t row_end, int64_t n_rows) {
  check_args(t, n_cols, n_x, row_begin, row_end, n_rows);
  run_tiles(fast_set(t), static_cast<const uint8_t*>(w), row_stride_bytes, n_cols, static_cast<const uint8_t*>(qx),
            activation_row_bytes(t, n_cols), n_x, y, row_begin, row_end, n_rows);
}

void matmul(weight_type t, const void* w, size_t row_stride_bytes, int64_t n_cols, const float* x, int64_t n_x,
            float* y, int64_t row_begin, int64_t row_end, int64_t n_rows) {
  check_args(t, n_cols, n_x, row_begin, row_end, n_rows);
  const void* qx = x;
  if (t == weight_type::q8_0 || t == weight_type::q4_k || t == weight_type::q6_k) {
    auto& buf = scratch();
    buf.resize(activation_bytes(t, n_cols, n_x));
    quantize_activations(t, x, n_cols, n_x, buf.data());
    qx = buf.data();
  }
  matmul_prequantized(t, w, row_stride_bytes, n_cols, qx, n_x, y, row_begin, row_end, n_rows);
}

void matmul_reference(weight_type t, const void* w, size_t row_stride_bytes, int64_t n_cols, const float* x,
                      int64_t n_x, float* y, int64_t row_begin, int64_t row_end, int64_t n_rows) {
  check_args(t, n_cols, n_x, row_begin, row_end, n_rows);
  std::vector<uint8_t> qx(activation_bytes(t, n_cols, n_x));
  quantize_activations(t, x, n_cols, n_x, qx.data());
  const dot_fn dot = scalar_dot(t);
  const size_t x_stride = activation_row_bytes(t, n_cols);
  for (int64_t b = 0; b < n_x; ++b)
    for (int64_t r = row_begin; r < row_end; ++r)
      y[b * n_rows + r] = dot(static_cast<const uint8_t*>(w) + static_cast<size_t>(r) * row_stride_bytes,
                              qx.data() + static_cast<size_t>(b) * x_stride, n_cols);
}

}  // namespace agentq::kernels
