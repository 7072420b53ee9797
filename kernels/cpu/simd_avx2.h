// Private to kernels/cpu: the AVX2/FMA/F16C building blocks the micro-kernels (batched) and
// rows (decode) kernels share: horizontal sums, fp16 loads, prefetch, Q4_K scale unpack.
#pragma once
#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "agentq/kernels.h"
#include "cpu/quants_internal.h"

namespace agentq::kernels::avx2 {

using detail::block_q8_0x;
using detail::block_q8_k;

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

// NOTE: the build target stands in for the core: AVX-512 builds run on cores that have it (Zen
// 4/5, recent Intel), where the prefetch rules measured otherwise than on Zen 3 (AVX2 only):
// rows_float_avx2's prefetch for 2-byte formats (k_prefetch_long_2byte_rows), run_x8's distance
// ahead.
#if defined(__AVX512F__)
inline constexpr bool k_avx512_core = true;
#else
inline constexpr bool k_avx512_core = false;
#endif

// NOTE: rows_float_avx2 prefetches long rows of the 2-byte formats only on the cores where that
// measured faster: Zen 5 (k_avx512_core) and Zen 1 (-march=native defines __znver1__; its F16
// decode is bound by vcvtph2ps at ~13 GB/s a core, so the stream needs the head start: 1B F16
// 7.76 -> 9.11 tok/s, 110M 72.7 -> 80.9, 5 alternating rounds, medians). Zen 3 ran 29% faster
// without it, and other AVX2 cores are unmeasured.
#if defined(__znver1__)
inline constexpr bool k_prefetch_long_2byte_rows = true;
#else
inline constexpr bool k_prefetch_long_2byte_rows = k_avx512_core;
#endif

inline void prefetch(const void* p) { _mm_prefetch(static_cast<const char*>(p), _MM_HINT_T0); }
// NOTE: for weights read once per step (decode): on Zen 3 an NTA prefetch fills L1 without
// allocating in L2, so the stream does not push activations, K/V and the next matmul's input
// out of L2 and each line is not written back to the L3 victim cache on eviction (110M Q4_K
// decode +7%, Q8_0 +2%, paired medians; F16's rows kernel showed no gain and keeps T0).
inline void prefetch_nta(const void* p) { _mm_prefetch(static_cast<const char*>(p), _MM_HINT_NTA); }

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

// Q6_K: the 4 x 32 unsigned 6-bit quants of 128-element half j of super-block b (low 4 bits
// from ql, high 2 from qh), as ggml's AVX2 q6_K dot product unpacks them.
inline void q6_k_unpack(const block_q6_k& b, int j, __m256i q6[4]) {
  const __m256i m4 = _mm256_set1_epi8(0xF);
  const __m256i m2 = _mm256_set1_epi8(3);
  const uint8_t* q4 = b.ql + 64 * j;
  const __m256i q4bits1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q4));
  const __m256i q4bits2 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q4 + 32));
  const __m256i q4bitsH = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.qh + 32 * j));
  q6[0] = _mm256_or_si256(_mm256_and_si256(q4bits1, m4), _mm256_slli_epi16(_mm256_and_si256(q4bitsH, m2), 4));
  q6[1] = _mm256_or_si256(_mm256_and_si256(q4bits2, m4),
                          _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(q4bitsH, 2), m2), 4));
  q6[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q4bits1, 4), m4),
                          _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(q4bitsH, 4), m2), 4));
  q6[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q4bits2, 4), m4),
                          _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(q4bitsH, 6), m2), 4));
}

// Q6_K: int8 scales 2*is and 2*is+1 (elements 32*is .. 32*is+31 of the super-block), widened
// to 16 x int16 for madd against the quants' 16-bit pair sums.
inline __m256i q6_k_scale(__m128i scales, int is) {
  const __m128i shuf = _mm_set_epi64x(0x0101010101010101ll * (2 * is + 1), 0x0101010101010101ll * (2 * is));
  return _mm256_cvtepi8_epi16(_mm_shuffle_epi8(scales, shuf));
}

}  // namespace agentq::kernels::avx2
#endif
