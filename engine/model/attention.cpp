// Causal attention over paged K/V: AVX2/FMA for head dims that are a multiple of 8
// (q held in registers, one FMA chain per score, V accumulated in registers, a
// polynomial exp), a scalar loop otherwise. Each query is computed on its own in a
// fixed order (see attention.h), so batching and threading never change a result.
#include "model/attention.h"

#include <algorithm>
#include <cmath>

#include "kv/kv_store.h"

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#define AGENTQ_ATTENTION_AVX2 1
#endif

namespace agentq {

namespace {

const float* k_row(const attention_args& a, int32_t t) {
  return a.kv->k(a.layer, a.block_table[t / a.block_size]) + size_t(t % a.block_size) * a.row_floats + a.kv_offset;
}
const float* v_row(const attention_args& a, int32_t t) {
  return a.kv->v(a.layer, a.block_table[t / a.block_size]) + size_t(t % a.block_size) * a.row_floats + a.kv_offset;
}

// fn(t, row) for t in [0, n) in order, row = K (or V) of position t; one block lookup per
// block instead of a division per position. Rows `ahead` positions further are prefetched:
// in batched decode the K/V rows come from memory (the weight stream evicts them between
// steps), and rows 4 * head_dim * n_kv bytes apart defeat the hardware prefetcher.
template <bool V, class F>
inline void for_rows(const attention_args& a, int32_t n, F&& fn) {
  constexpr int32_t ahead = 8;
  const int32_t bs = a.block_size, row_bytes = a.head_dim * int32_t(sizeof(float));
  auto block = [&](int32_t bi) {
    return (V ? a.kv->v(a.layer, a.block_table[bi]) : a.kv->k(a.layer, a.block_table[bi])) + a.kv_offset;
  };
  const float* base = block(0);
  for (int32_t t0 = 0, bi = 0; t0 < n; t0 += bs, ++bi) {
    const int32_t te = std::min(n, t0 + bs);
    const float* next = te < n ? block(bi + 1) : nullptr;
    for (int32_t t = t0; t < te; ++t) {
      const int32_t u = t + ahead - t0;  // the prefetched position, relative to this block
      const float* pf = u < bs
                            ? (t + ahead < n ? base + size_t(u) * a.row_floats : nullptr)
                            : (next && t + ahead < n && u - bs < bs ? next + size_t(u - bs) * a.row_floats : nullptr);
#if defined(__SSE__)
      if (pf)
        for (int32_t c = 0; c < row_bytes; c += 64) __builtin_prefetch(reinterpret_cast<const char*>(pf) + c);
#endif
      fn(t, base + size_t(t - t0) * a.row_floats);
    }
    base = next;
  }
}

void attend_one_scalar(const attention_args& a, const float* q, int32_t pos, float* out, float* scores) {
  const int32_t hd = a.head_dim;
  float mx = -INFINITY;
  for (int32_t t = 0; t <= pos; ++t) {
    const float* kt = k_row(a, t);
    float s = 0;
    for (int32_t d = 0; d < hd; ++d) s += q[d] * kt[d];
    scores[t] = s * a.scale;
    mx = std::max(mx, scores[t]);
  }
  double sum = 0.0;
  for (int32_t t = 0; t <= pos; ++t) {
    scores[t] = std::exp(scores[t] - mx);
    sum += scores[t];
  }
  const float inv = float(1.0 / sum);
  std::fill(out, out + hd, 0.0f);
  for (int32_t t = 0; t <= pos; ++t) {
    const float* vt = v_row(a, t);
    const float p = scores[t] * inv;
    for (int32_t d = 0; d < hd; ++d) out[d] += p * vt[d];
  }
}

#if AGENTQ_ATTENTION_AVX2
inline float hsum8(__m256 s) {
  __m128 t = _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));
  t = _mm_add_ps(t, _mm_movehl_ps(t, t));
  t = _mm_add_ss(t, _mm_movehdup_ps(t));
  return _mm_cvtss_f32(t);
}

// exp(x) for x <= 0 (softmax after max subtraction), ~2 ulp: x = n ln2 + r, |r| <= ln2/2,
// exp(r) by a degree-6 polynomial (Cephes expf coefficients), times 2^n. Below -87 -> 0.
inline __m256 exp_neg(__m256 x) {
  const __m256 lo = _mm256_set1_ps(-87.0f);
  const __m256 under = _mm256_cmp_ps(x, lo, _CMP_LT_OQ);
  x = _mm256_max_ps(x, lo);
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(1.9875691500e-4f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
  p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
  const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_andnot_ps(under, _mm256_mul_ps(p, _mm256_castsi256_ps(e)));
}

// NV = head_dim / 8 vectors (0: any multiple of 8, read from memory).
template <int NV>
void attend_one_avx2(const attention_args& a, const float* q, int32_t pos, float* out, float* scores) {
  const int32_t nv = NV > 0 ? NV : a.head_dim / 8;
  constexpr int held = NV > 0 && NV <= 8 ? NV : 1;
  __m256 qv[held];
  if constexpr (NV > 0 && NV <= 8)
    for (int c = 0; c < NV; ++c) qv[c] = _mm256_loadu_ps(q + 8 * c);
  auto qc = [&](int c) {
    if constexpr (NV > 0 && NV <= 8)
      return qv[c];
    else
      return _mm256_loadu_ps(q + 8 * c);
  };
  // Scores: one FMA chain over the head dim, then the hsum8 tree.
  __m256 vmx = _mm256_set1_ps(-INFINITY);
  const int32_t n = pos + 1;
  for_rows<false>(a, n, [&](int32_t t, const float* kt) {
    __m256 acc = _mm256_mul_ps(qc(0), _mm256_loadu_ps(kt));
    for (int c = 1; c < nv; ++c) acc = _mm256_fmadd_ps(qc(c), _mm256_loadu_ps(kt + 8 * c), acc);
    const float s = hsum8(acc) * a.scale;
    scores[t] = s;
    vmx = _mm256_max_ps(vmx, _mm256_set1_ps(s));  // max is exact: any order gives the same value
  });
  const __m256 mx = vmx;
  // Probabilities and their sum (4 double lanes by t mod 8 halves, fixed tree; tail scalar).
  __m256d sum4 = _mm256_setzero_pd();
  int32_t t = 0;
  for (; t + 8 <= n; t += 8) {
    const __m256 p = exp_neg(_mm256_sub_ps(_mm256_loadu_ps(scores + t), mx));
    _mm256_storeu_ps(scores + t, p);
    sum4 = _mm256_add_pd(
        sum4, _mm256_add_pd(_mm256_cvtps_pd(_mm256_castps256_ps128(p)), _mm256_cvtps_pd(_mm256_extractf128_ps(p, 1))));
  }
  double lanes[4];
  _mm256_storeu_pd(lanes, sum4);
  double sum = (lanes[0] + lanes[1]) + (lanes[2] + lanes[3]);
  if (t < n) {
    alignas(32) float tail[8] = {};
    for (int32_t i = t; i < n; ++i) tail[i - t] = scores[i];
    const __m256 p = exp_neg(_mm256_sub_ps(_mm256_load_ps(tail), mx));
    _mm256_store_ps(tail, p);
    for (int32_t i = t; i < n; ++i) {
      scores[i] = tail[i - t];
      sum += double(tail[i - t]);
    }
  }
  const __m256 inv = _mm256_set1_ps(float(1.0 / sum));
  // out = sum_t p_t V_t, 8 vectors (64 dims) of accumulators at a time, t in order.
  for (int c0 = 0; c0 < nv; c0 += 8) {
    const int w = std::min(8, nv - c0);
    __m256 acc[8];
    for (int c = 0; c < 8; ++c) acc[c] = _mm256_setzero_ps();
    for_rows<true>(a, n, [&](int32_t u, const float* vrow) {
      const float* vt = vrow + 8 * c0;
      const __m256 p = _mm256_mul_ps(_mm256_broadcast_ss(scores + u), inv);
      if (w == 8 && (NV == 8 || NV == 16)) {
        for (int c = 0; c < 8; ++c) acc[c] = _mm256_fmadd_ps(p, _mm256_loadu_ps(vt + 8 * c), acc[c]);
      } else {
        for (int c = 0; c < w; ++c) acc[c] = _mm256_fmadd_ps(p, _mm256_loadu_ps(vt + 8 * c), acc[c]);
      }
    });
    for (int c = 0; c < w; ++c) _mm256_storeu_ps(out + 8 * (c0 + c), acc[c]);
  }
}
#endif

}  // namespace

void attend(const attention_args& a, const float* q, int64_t q_stride, int32_t pos0, int32_t n_q, float* out,
            int64_t out_stride, float* scores) {
  for (int32_t j = 0; j < n_q; ++j) {
    const float* qj = q + j * q_stride;
    float* oj = out + j * out_stride;
#if AGENTQ_ATTENTION_AVX2
    if (a.head_dim == 64) {
      attend_one_avx2<8>(a, qj, pos0 + j, oj, scores);
      continue;
    }
    if (a.head_dim == 128) {
      attend_one_avx2<16>(a, qj, pos0 + j, oj, scores);
      continue;
    }
    if (a.head_dim % 8 == 0) {
      attend_one_avx2<0>(a, qj, pos0 + j, oj, scores);
      continue;
    }
#endif
    attend_one_scalar(a, qj, pos0 + j, oj, scores);
  }
}

}  // namespace agentq
