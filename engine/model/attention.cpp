// Causal attention over paged K/V (F32 or F16 elements, see kv_dtype): AVX2/FMA for head
// dims that are a multiple of 8 (q held in registers, one FMA chain per score, V accumulated
// in registers, a polynomial exp), a scalar loop otherwise; on AVX-512 two GQA heads per zmm in
// decode, and several queries of one head through attention_tiles.cpp. Each query is computed
// on its own in a fixed order (see attention.h), so batching and threading never change a result.
#include "model/attention.h"

#include <algorithm>
#include <cstddef>
#include <cmath>
#include <cstring>
#include <type_traits>
#include <vector>

#include "agentq/zmm_halves.h"
#include "model/attention_simd.h"

namespace agentq {

namespace {

using namespace attn;

struct packed_rows {
  using elem = float;
  const float* k;
  const float* v;
  int32_t stride;
  template <bool V, class F>
  void each(int32_t lo, int32_t n, F&& fn) const {
    const float* base = V ? v : k;
    for (int32_t t = lo; t < n; ++t) fn(t, base + size_t(t) * stride);
  }
  void prefetch_v(int32_t, const float*) const {}  // packed in L2 already
};

template <class T>
void attend_one_scalar(const attention_args& a, const float* q, int32_t pos, float* out, float* scores) {
  const int32_t hd = a.head_dim, lo = window_lo(a, pos);
  float mx = -INFINITY;
  for (int32_t t = lo; t <= pos; ++t) {
    const T* kt = k_row<T>(a, t);
    float s = 0;
    for (int32_t d = 0; d < hd; ++d) s += q[d] * to_f32(kt[d]);
    scores[t] = s * a.scale;
    mx = std::max(mx, scores[t]);
  }
  if (adjusts(a)) mx = adjust_scores(a, scores, pos + 1);
  double sum = 0.0;
  for (int32_t t = lo; t <= pos; ++t) {
    scores[t] = std::exp(scores[t] - mx);
    sum += scores[t];
  }
  if (a.has_sink) sum += sink_term(a, mx);
  const float inv = float(1.0 / sum);
  std::fill(out, out + hd, 0.0f);
  for (int32_t t = lo; t <= pos; ++t) {
    const T* vt = v_row<T>(a, t);
    const float p = scores[t] * inv;
    for (int32_t d = 0; d < hd; ++d) out[d] += p * to_f32(vt[d]);
  }
}


#if AGENTQ_ATTENTION_AVX2
// NV = head_dim / 8 vectors (0: any multiple of 8, read from memory).
template <int NV, class Rows>
void attend_one_avx2(const attention_args& a, const Rows& rows, const float* q, int32_t pos, float* out,
                     float* scores) {
  using T = typename Rows::elem;
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
  // Scores: one FMA chain over the head dim per key, then the hsum8 tree, 8 keys at a time
  // (hsum8x8: the 8 trees as one vector reduction, same additions) and any rest one by one.
  __m256 vmx = _mm256_set1_ps(-INFINITY);
  const int32_t n = pos + 1, lo = window_lo(a, pos);
  const __m256 scale = _mm256_set1_ps(a.scale);
  const T* kp[8];
  int cnt = 0;
  rows.template each<false>(lo, n, [&](int32_t t, const T* kt) {
    rows.prefetch_v(t, kt);
    kp[cnt++] = kt;
    if (cnt < 8) return;
    cnt = 0;
    __m256 acc[8];
    for (int i = 0; i < 8; ++i) acc[i] = _mm256_mul_ps(qc(0), load8(kp[i]));
    for (int c = 1; c < nv; ++c)
      for (int i = 0; i < 8; ++i) acc[i] = _mm256_fmadd_ps(qc(c), load8(kp[i] + 8 * c), acc[i]);
    const __m256 s = _mm256_mul_ps(hsum8x8(acc), scale);
    _mm256_storeu_ps(scores + t - 7, s);
    vmx = _mm256_max_ps(vmx, s);  // max is exact: any order gives the same value
  });
  for (int i = 0; i < cnt; ++i) {
    const T* kt = kp[i];
    __m256 acc = _mm256_mul_ps(qc(0), load8(kt));
    for (int c = 1; c < nv; ++c) acc = _mm256_fmadd_ps(qc(c), load8(kt + 8 * c), acc);
    const float sc = hsum8(acc) * a.scale;
    scores[n - cnt + i] = sc;
    vmx = _mm256_max_ps(vmx, _mm256_set1_ps(sc));
  }
  if (adjusts(a)) vmx = _mm256_set1_ps(adjust_scores(a, scores, n));
  const __m256 inv = softmax_scores(a, scores, lo, n, vmx);
  // out = sum_t p_t V_t, 8 vectors (64 dims) of accumulators at a time, t in order.
  // NOTE: rows are taken 8 at a time and accumulated in add_rows' own registers; updated
  // from the per-row callback, the accumulators were stored to the stack on every row.
  for (int c0 = 0; c0 < nv; c0 += 8) {
    const int w = std::min(8, nv - c0);
    __m256 acc[8];
    for (int c = 0; c < 8; ++c) acc[c] = _mm256_setzero_ps();
    const T* vp[8];
    int cnt = 0;
    int32_t u0 = 0;
    auto add_rows = [&](int m) {
      __m256 r[8];
      for (int c = 0; c < 8; ++c) r[c] = acc[c];
      for (int i = 0; i < m; ++i) {
        const T* vt = vp[i] + 8 * c0;
        const __m256 p = _mm256_mul_ps(_mm256_broadcast_ss(scores + u0 + i), inv);
        if (w == 8 && (NV == 8 || NV == 16)) {
          for (int c = 0; c < 8; ++c) r[c] = _mm256_fmadd_ps(p, load8(vt + 8 * c), r[c]);
        } else {
          for (int c = 0; c < w; ++c) r[c] = _mm256_fmadd_ps(p, load8(vt + 8 * c), r[c]);
        }
      }
      for (int c = 0; c < 8; ++c) acc[c] = r[c];
    };
    rows.template each<true>(lo, n, [&](int32_t u, const T* vrow) {
      if (cnt == 0) u0 = u;
      vp[cnt++] = vrow;
      if (cnt == 8) {
        add_rows(8);
        cnt = 0;
      }
    });
    if (cnt > 0) add_rows(cnt);
    for (int c = 0; c < w; ++c) _mm256_storeu_ps(out + 8 * (c0 + c), acc[c]);
  }
}
#endif

#if AGENTQ_ATTENTION_AVX2 && defined(__AVX512F__)
// 8 K/V elements in both halves of a zmm (an F16 row converted once for the two).
inline __m512 load8x2(const float* p) { return kernels::broadcast8(p); }
inline __m512 load8x2(const uint16_t* p) {
  return _mm512_cvtph_ps(_mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
}

// Two query heads of one K/V head (GQA) at the same position over paged rows (decode), bit for
// bit as attend_one_avx2 for each: A's lanes in the low half of every zmm, B's in the high half,
// each doing that kernel's float operations in its order; a K/V row is loaded (and an F16 row
// converted) once for both. a and b differ at most in their sink (adjust_scores, the softmax).
// NOTE: why: decode attention at depth ran each head of a GQA group over the same rows at
// 256-bit width, its F16 conversions repeated per head; at 4k tokens it was about half of a
// 1B-class model's decode step on Zen 5.
template <int NV, class T>
void attend_heads_avx512(const attention_args& a, const attention_args& b, const paged_rows<T>& rows,
                         const float* qa, const float* qb, int32_t pos, float* out_a, float* out_b, float* sa,
                         float* sb) {
  static_assert(NV % 8 == 0);
  __m512 qv[NV];
  for (int c = 0; c < NV; ++c) qv[c] = kernels::join_halves(_mm256_loadu_ps(qa + 8 * c), _mm256_loadu_ps(qb + 8 * c));
  const int32_t n = pos + 1, lo = window_lo(a, pos);
  const __m256 scale = _mm256_set1_ps(a.scale);
  const __m512 scale2 = kernels::join_halves(scale, scale);  // both heads' (hsum8x8_halves below)
  __m256 mxa = _mm256_set1_ps(-INFINITY), mxb = mxa;
  const T* kp[8];
  int cnt = 0;
  rows.template each<false>(lo, n, [&](int32_t t, const T* kt) {
    rows.prefetch_v(t, kt);
    kp[cnt++] = kt;
    if (cnt < 8) return;
    cnt = 0;
    __m512 acc[8];
    for (int i = 0; i < 8; ++i) acc[i] = _mm512_mul_ps(qv[0], load8x2(kp[i]));
    for (int c = 1; c < NV; ++c)
      for (int i = 0; i < 8; ++i) acc[i] = _mm512_fmadd_ps(qv[c], load8x2(kp[i] + 8 * c), acc[i]);
    // both heads' 8 trees at once (hsum8x8_halves: the same additions), then the same product
    const __m512 s = _mm512_mul_ps(kernels::hsum8x8_halves(acc), scale2);
    const __m256 s_a = kernels::low_half(s), s_b = kernels::high_half(s);
    _mm256_storeu_ps(sa + t - 7, s_a);
    _mm256_storeu_ps(sb + t - 7, s_b);
    mxa = _mm256_max_ps(mxa, s_a);
    mxb = _mm256_max_ps(mxb, s_b);
  });
  for (int i = 0; i < cnt; ++i) {  // the rest one key at a time, as attend_one_avx2's tail
    __m512 acc = _mm512_mul_ps(qv[0], load8x2(kp[i]));
    for (int c = 1; c < NV; ++c) acc = _mm512_fmadd_ps(qv[c], load8x2(kp[i] + 8 * c), acc);
    const int32_t u = n - cnt + i;
    sa[u] = hsum8(kernels::low_half(acc)) * a.scale;
    sb[u] = hsum8(kernels::high_half(acc)) * a.scale;
    mxa = _mm256_max_ps(mxa, _mm256_set1_ps(sa[u]));
    mxb = _mm256_max_ps(mxb, _mm256_set1_ps(sb[u]));
  }
  if (adjusts(a)) {
    mxa = _mm256_set1_ps(adjust_scores(a, sa, n));
    mxb = _mm256_set1_ps(adjust_scores(b, sb, n));
  }
  const __m512 inv = kernels::join_halves(softmax_scores(a, sa, lo, n, mxa), softmax_scores(b, sb, lo, n, mxb));
  for (int c0 = 0; c0 < NV; c0 += 8) {
    __m512 acc[8];
    for (int c = 0; c < 8; ++c) acc[c] = _mm512_setzero_ps();
    const T* vp[8];
    int m = 0;
    int32_t u0 = 0;
    auto add_rows = [&](int k) {  // rows batched 8 at a time, as attend_one_avx2's add_rows
      __m512 r[8];
      for (int c = 0; c < 8; ++c) r[c] = acc[c];
      for (int i = 0; i < k; ++i) {
        const T* vt = vp[i] + 8 * c0;
        const __m512 p =
            _mm512_mul_ps(kernels::join_halves(_mm256_broadcast_ss(sa + u0 + i), _mm256_broadcast_ss(sb + u0 + i)), inv);
        for (int c = 0; c < 8; ++c) r[c] = _mm512_fmadd_ps(p, load8x2(vt + 8 * c), r[c]);
      }
      for (int c = 0; c < 8; ++c) acc[c] = r[c];
    };
    rows.template each<true>(lo, n, [&](int32_t u, const T* vrow) {
      if (m == 0) u0 = u;
      vp[m++] = vrow;
      if (m == 8) {
        add_rows(8);
        m = 0;
      }
    });
    if (m > 0) add_rows(m);
    for (int c = 0; c < 8; ++c) {
      _mm256_storeu_ps(out_a + 8 * (c0 + c), kernels::low_half(acc[c]));
      _mm256_storeu_ps(out_b + 8 * (c0 + c), kernels::high_half(acc[c]));
    }
  }
}
#endif

#if AGENTQ_ATTENTION_AVX2
template <class Rows>
void attend_avx2(const attention_args& a, const Rows& rows, const float* q, int64_t q_stride, int32_t pos0, int32_t n_q,
                 float* out, int64_t out_stride, float* scores) {
  for (int32_t j = 0; j < n_q; ++j) {
    const float* qj = q + j * q_stride;
    float* oj = out + j * out_stride;
    if (a.head_dim == 64)
      attend_one_avx2<8>(a, rows, qj, pos0 + j, oj, scores);
    else if (a.head_dim == 128)
      attend_one_avx2<16>(a, rows, qj, pos0 + j, oj, scores);
    else
      attend_one_avx2<0>(a, rows, qj, pos0 + j, oj, scores);
  }
}
#endif

// One head's queries over K/V elements of type T (float or uint16_t F16).
template <class T>
void attend_typed(const attention_args& a, const float* q, int64_t q_stride, int32_t pos0, int32_t n_q, float* out,
                  int64_t out_stride, float* scores) {
#if AGENTQ_ATTENTION_AVX2
  if (a.head_dim % 8 == 0) {
    // Several queries of one head (a verify pass, a prefill run) on AVX-512: the K/V rows read
    // in place, converted once per call for all of them (attention_tiles.cpp).
    if (n_q >= attn::tiles_min_queries && attn::attend_tiles(a, q, q_stride, pos0, n_q, out, out_stride)) return;
    // Head dim 8 (a tiny model): K^T shared by the queries (attention_small.cpp).
    if (n_q >= attn::small_min_queries && attn::attend_small(a, q, q_stride, pos0, n_q, out, out_stride)) return;
    // Elsewhere (AVX2 only, or other head dims):
    // NOTE: many queries of one head (prefill) first copy the head's K and V rows into one
    // packed F32 buffer each. In the cache a head's row is head_dim elements of every
    // n_head_kv * head_dim-element token row; read in place, every query streamed those rows
    // from L3 (a stride of a few KiB maps onto few L2 sets), which made attention ~12-20% of
    // prefill. The copy (and an F16 cache's conversion) is exact, so results are the same
    // bits either way.
    if (n_q >= 4) {
      const int32_t n = pos0 + n_q, hd = a.head_dim;
      thread_local std::vector<float> packed;
      if (packed.size() < size_t(n) * 2 * hd) packed.resize(size_t(n) * 2 * hd);
      float* pk = packed.data();
      float* pv = pk + size_t(n) * hd;
      // NOTE: converted inline (F16C, exact either way): through dequantize_row, one call per
      // 64-element row, the unpack was half of a verify pass's attention time (Zen 5, 110M Q4_K).
      auto unpack = [hd](const T* row, float* dst) {
        if constexpr (std::is_same_v<T, float>) {
          std::memcpy(dst, row, sizeof(float) * size_t(hd));
        } else {
          for (int32_t i = 0; i < hd; i += 8)
            _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row + i))));
        }
      };
      const int32_t lo = window_lo(a, pos0);  // rows before it are never read
      for_rows<false, T>(a, lo, n, [&](int32_t t, const T* row) { unpack(row, pk + size_t(t) * hd); });
      for_rows<true, T>(a, lo, n, [&](int32_t t, const T* row) { unpack(row, pv + size_t(t) * hd); });
      attend_avx2(a, packed_rows{pk, pv, hd}, q, q_stride, pos0, n_q, out, out_stride, scores);
    } else {
      attend_avx2(a, paged_rows_of<T>(a, pos0, pos0 + n_q), q, q_stride, pos0, n_q, out, out_stride, scores);
    }
    return;
  }
#endif
  for (int32_t j = 0; j < n_q; ++j)
    attend_one_scalar<T>(a, q + j * q_stride, pos0 + j, out + j * out_stride, scores);
}

}  // namespace

void attend(const attention_args& a, const float* q, int64_t q_stride, int32_t pos0, int32_t n_q, float* out,
            int64_t out_stride, float* scores) {
  if (a.kv->layout().dtype == kv_dtype::f16)
    attend_typed<uint16_t>(a, q, q_stride, pos0, n_q, out, out_stride, scores);
  else
    attend_typed<float>(a, q, q_stride, pos0, n_q, out, out_stride, scores);
}

namespace {
template <class T>
bool attend_heads_typed(const attention_args& a, const attention_args& b, const float* qa, const float* qb,
                        int32_t pos, float* out_a, float* out_b, float* scores) {
#if AGENTQ_ATTENTION_AVX2 && defined(__AVX512F__)
  if (a.head_dim != 64 && a.head_dim != 128) return false;
  thread_local std::vector<float> scores_b;
  if (scores_b.size() < size_t(pos + 1)) scores_b.resize(size_t(pos + 1));
  // The same rows, prefetch rule and V-early choice as attend_typed's paged path for one query.
  const paged_rows<T> rows = paged_rows_of<T>(a, pos, pos + 1);
  if (a.head_dim == 64)
    attend_heads_avx512<8, T>(a, b, rows, qa, qb, pos, out_a, out_b, scores, scores_b.data());
  else
    attend_heads_avx512<16, T>(a, b, rows, qa, qb, pos, out_a, out_b, scores, scores_b.data());
  return true;
#else
  (void)a, (void)b, (void)qa, (void)qb, (void)pos, (void)out_a, (void)out_b, (void)scores;
  return false;
#endif
}
}  // namespace

void attend_head_pair(const attention_args& a, const attention_args& b, const float* qa, const float* qb, int32_t pos,
                      float* out_a, float* out_b, float* scores) {
  const bool done = a.kv->layout().dtype == kv_dtype::f16
                        ? attend_heads_typed<uint16_t>(a, b, qa, qb, pos, out_a, out_b, scores)
                        : attend_heads_typed<float>(a, b, qa, qb, pos, out_a, out_b, scores);
  if (done) return;
  attend(a, qa, 0, pos, 1, out_a, 0, scores);
  attend(b, qb, 0, pos, 1, out_b, 0, scores);
}

}  // namespace agentq
