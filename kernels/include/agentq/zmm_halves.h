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

}  // namespace agentq::kernels

#pragma GCC diagnostic pop
#endif
