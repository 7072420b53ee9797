// Horizontal sums of 8 floats (AVX2) in the one fixed tree every CPU kernel's per-lane
// accumulators are reduced with: ((l0+l4)+(l2+l6)) + ((l1+l5)+(l3+l7)). Shared by the float
// matmul's short-row kernel (kernels/cpu) and attention (engine/model/attention_simd.h).
#pragma once
#if defined(__AVX2__)
#include <immintrin.h>

namespace agentq::kernels {

// hsum8 of 8 vectors at once: out[i] = ((v_i.l0+v_i.l4)+(v_i.l2+v_i.l6)) + ((v_i.l1+v_i.l5)+
// (v_i.l3+v_i.l7)), bit for bit as one hsum8 (_mm_add_ps of the halves, movehl, movehdup) per
// vector: the same pairwise sums, arranged across lanes (float addition is commutative, so only
// which values are added matters, not their order).
inline __m256 hsum8x8(const __m256 v[8]) {
  __m256 t[4];  // t[k] = [lo(v[2k]) + hi(v[2k]) | lo(v[2k+1]) + hi(v[2k+1])]
  for (int k = 0; k < 4; ++k)
    t[k] = _mm256_add_ps(_mm256_permute2f128_ps(v[2 * k], v[2 * k + 1], 0x20),
                         _mm256_permute2f128_ps(v[2 * k], v[2 * k + 1], 0x31));
  // u0 = [v0: t0+t2, t1+t3, v2: t0+t2, t1+t3 | v1, v3 likewise]; u1 the same for v4..v7.
  const __m256 u0 = _mm256_add_ps(_mm256_shuffle_ps(t[0], t[1], _MM_SHUFFLE(1, 0, 1, 0)),
                                  _mm256_shuffle_ps(t[0], t[1], _MM_SHUFFLE(3, 2, 3, 2)));
  const __m256 u1 = _mm256_add_ps(_mm256_shuffle_ps(t[2], t[3], _MM_SHUFFLE(1, 0, 1, 0)),
                                  _mm256_shuffle_ps(t[2], t[3], _MM_SHUFFLE(3, 2, 3, 2)));
  // [s0, s2, s4, s6 | s1, s3, s5, s7], then into order.
  const __m256 s = _mm256_add_ps(_mm256_shuffle_ps(u0, u1, _MM_SHUFFLE(2, 0, 2, 0)),
                                 _mm256_shuffle_ps(u0, u1, _MM_SHUFFLE(3, 1, 3, 1)));
  return _mm256_permutevar8x32_ps(s, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

}  // namespace agentq::kernels
#endif
