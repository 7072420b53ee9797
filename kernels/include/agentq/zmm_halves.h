// Two 8-float vectors in one zmm register, as its low and high halves. The AVX-512 kernels
// that must keep the AVX2 path's float order run two 8-lane chains side by side this way (the
// float prefill micro-kernel, kernels/cpu/tiles_avx512.h; many-query attention,
// engine/model/attention_tiles.cpp): every lane does the AVX2 code's operations in its order.
#pragma once
#if defined(__AVX512F__)
#include <immintrin.h>

// NOTE: GCC 12's AVX-512 insert/extract intrinsics pass an _mm256_undefined_*() (a
// self-initialised variable) as the unused merge source, which -Wuninitialized reports once
// inlined; the value is never read. Off here, around the helpers, covers their callers too.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"

namespace agentq::kernels {

// [lo | hi].
inline __m512 join_halves(__m256 lo, __m256 hi) {
  return _mm512_castpd_ps(_mm512_insertf64x4(_mm512_zextpd256_pd512(_mm256_castps_pd(lo)), _mm256_castps_pd(hi), 1));
}
// The 8 floats at p in both halves.
inline __m512 broadcast8(const float* p) {
  return _mm512_castpd_ps(_mm512_broadcast_f64x4(_mm256_loadu_pd(reinterpret_cast<const double*>(p))));
}
inline __m256 low_half(__m512 v) { return _mm256_castsi256_ps(_mm512_castsi512_si256(_mm512_castps_si512(v))); }
inline __m256 high_half(__m512 v) { return _mm256_castsi256_ps(_mm512_extracti64x4_epi64(_mm512_castps_si512(v), 1)); }

// [hsum8x8(low halves of v) | hsum8x8(high halves of v)] (hsum_avx2.h), bit for bit: the same
// lane pairs added in the same tree (vpermt2ps stands in for permute2f128, which would mix the
// halves; the 128-bit shuffles act on each half alike), one instruction a step for both halves.
// Many-query attention (attention_tiles.cpp), two GQA heads' decode (attention.cpp) and the
// float prefill kernel (tiles_avx512.h; session 36: two extracts and two ymm reductions a pair
// there, 64 x 64 rows x 16 inputs 1.50 -> 1.36 us a call on a Sapphire Rapids-class core).
inline __m512 hsum8x8_halves(const __m512 v[8]) {
  // permute2f128's 0x20 and 0x31 within each half (128-bit lanes): [a0 b0 | a2 b2] and [a1 b1 | a3 b3]
  const __m512i first = _mm512_setr_epi32(0, 1, 2, 3, 16, 17, 18, 19, 8, 9, 10, 11, 24, 25, 26, 27);
  const __m512i second = _mm512_setr_epi32(4, 5, 6, 7, 20, 21, 22, 23, 12, 13, 14, 15, 28, 29, 30, 31);
  __m512 t[4];
  for (int k = 0; k < 4; ++k)
    t[k] = _mm512_add_ps(_mm512_permutex2var_ps(v[2 * k], first, v[2 * k + 1]),
                         _mm512_permutex2var_ps(v[2 * k], second, v[2 * k + 1]));
  // shuffle_ps works within 128-bit lanes at either width: the ymm steps, per half.
  const __m512 u0 = _mm512_add_ps(_mm512_shuffle_ps(t[0], t[1], _MM_SHUFFLE(1, 0, 1, 0)),
                                  _mm512_shuffle_ps(t[0], t[1], _MM_SHUFFLE(3, 2, 3, 2)));
  const __m512 u1 = _mm512_add_ps(_mm512_shuffle_ps(t[2], t[3], _MM_SHUFFLE(1, 0, 1, 0)),
                                  _mm512_shuffle_ps(t[2], t[3], _MM_SHUFFLE(3, 2, 3, 2)));
  const __m512 s = _mm512_add_ps(_mm512_shuffle_ps(u0, u1, _MM_SHUFFLE(2, 0, 2, 0)),
                                 _mm512_shuffle_ps(u0, u1, _MM_SHUFFLE(3, 1, 3, 1)));
  return _mm512_permutexvar_ps(_mm512_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7, 8, 12, 9, 13, 10, 14, 11, 15), s);
}

}  // namespace agentq::kernels

#pragma GCC diagnostic pop
#endif
