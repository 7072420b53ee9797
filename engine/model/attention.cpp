// Causal attention over paged K/V (F32 or F16 elements, see kv_dtype): AVX2/FMA for head
// dims that are a multiple of 8 (q held in registers, one FMA chain per score, V accumulated
// in registers, a polynomial exp), a scalar loop otherwise. Each query is computed on its
// own in a fixed order (see attention.h), so batching and threading never change a result.
#include "model/attention.h"

#include <algorithm>
#include <cstddef>
#include <cmath>
#include <cstring>
#include <type_traits>
#include <vector>

#include "agentq/exp_avx2.h"
#include "agentq/kernels.h"
#include "agentq/zmm_halves.h"

#include "kv/kv_store.h"

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#include <immintrin.h>
#define AGENTQ_ATTENTION_AVX2 1
#endif

namespace agentq {

namespace {

// K/V elements: float (f32 cache) or uint16_t (IEEE half bits, f16 cache).
inline float to_f32(float x) { return x; }
inline float to_f32(uint16_t h) { return kernels::fp16_to_fp32(h); }

// Sliding window and soft-capping on a query's scores [0, n) (pos = n - 1): masked positions
// become -inf (weight exactly 0), the rest cap * tanh(s / cap). Returns the max of the rest
// and of the sink logit, if any (the softmax's shift, as ggml's flash attention with sinks).
// NOTE: only models with a window, a cap or a sink come here; the others keep the plain path's bits.
// Positions before window_lo are never read (windowed KV may hold no pages there); the few
// between it and the window are scored and masked here.
inline float adjust_scores(const attention_args& a, float* scores, int32_t n) {
  const int32_t first = a.window > 0 ? std::max(0, n - a.window) : 0;
  for (int32_t t = first & ~7; t < first; ++t) scores[t] = -INFINITY;
  float mx = -INFINITY;
  const float cap = a.softcap, inv = cap != 0.0f ? 1.0f / cap : 0.0f;
  for (int32_t t = first; t < n; ++t) {
    if (cap != 0.0f) scores[t] = std::tanh(scores[t] * inv) * cap;
    mx = std::max(mx, scores[t]);
  }
  return a.has_sink ? std::max(mx, a.sink) : mx;
}
// The first position a query at pos reads: the start of its window rounded down to a multiple
// of 8, so the softmax's 8-lane sums keep their lanes (positions before it weigh exactly 0:
// skipping them leaves every sum's bits as they were). 0 without a window.
inline int32_t window_lo(const attention_args& a, int32_t pos) {
  return a.window > 0 ? std::max(0, pos + 1 - a.window) & ~7 : 0;
}
inline bool adjusts(const attention_args& a) { return a.window > 0 || a.softcap != 0.0f || a.has_sink; }
// The sink's share of the softmax's denominator (exp(sink - max)); 0 without one.
inline double sink_term(const attention_args& a, float mx) { return a.has_sink ? double(std::exp(a.sink - mx)) : 0.0; }

template <class T>
const T* k_row(const attention_args& a, int32_t t) {
  return a.kv->k<T>(a.layer, a.block_table[t / a.block_size]) + size_t(t % a.block_size) * a.token_stride + a.head_offset;
}
template <class T>
const T* v_row(const attention_args& a, int32_t t) {
  return a.kv->v<T>(a.layer, a.block_table[t / a.block_size]) + size_t(t % a.block_size) * a.token_stride + a.head_offset;
}

// Rows under 64 bytes (head_dim 8-16) share cache lines, so the prefetchers take one row in
// each line: this mask of the position (rows per line - 1; row_bytes is a multiple of 16, so
// rows per line are 1, 2 or 4).
inline int32_t line_mask_of(int32_t row_bytes) { return std::max<int32_t>(1, 64 / row_bytes) - 1; }

inline void prefetch_row(const void* row, int32_t row_bytes) {
#if defined(__SSE__)
  for (int32_t c = 0; c < row_bytes; c += 64) __builtin_prefetch(static_cast<const char*>(row) + c);
#else
  (void)row, (void)row_bytes;
#endif
}

// fn(t, row) for t in [0, n) in order, row = K (or V) of position t; one block lookup per
// block instead of a division per position. A second cursor runs `ahead` rows in front and
// prefetches: in decode the K/V rows come from memory (the weight stream evicts them between
// steps), and one head's rows are 2 KiB runs (a block of head-major rows) a whole block of
// every layer apart, which the hardware prefetcher does not follow.
// NOTE: ahead is ~4 KiB of rows, crossing blocks: a 1 KiB reach that stopped at the next block
// held long-context decode attention to ~10 GB/s a thread. The cursor starts level with t and
// gains 2 rows a step, so short contexts are prefetched from their first rows without a burst.
template <bool V, class T, class F>
inline void for_rows(const attention_args& a, int32_t lo, int32_t n, F&& fn) {
  const int32_t bs = a.block_size, row_bytes = a.head_dim * int32_t(sizeof(T));
  const int32_t ahead = std::max<int32_t>(8, 4096 / row_bytes);
  auto block = [&](int32_t bi) {
    return (V ? a.kv->v<T>(a.layer, a.block_table[bi]) : a.kv->k<T>(a.layer, a.block_table[bi])) + a.head_offset;
  };
  int32_t p = lo, pbi = lo / bs, poff = lo % bs;
  const T* pbase = block(pbi);  // the prefetch cursor: position p, at row poff of block pbi
  const int32_t line_mask = line_mask_of(row_bytes);
  auto prefetch_next = [&] {
    if ((poff & line_mask) == 0) prefetch_row(pbase + size_t(poff) * a.token_stride, row_bytes);
    ++p;
    if (++poff == bs) {
      poff = 0;
      if (p < n) pbase = block(++pbi);
    }
  };
  const T* base = pbase;
  for (int32_t bi = lo / bs, t0 = bi * bs; t0 < n; t0 += bs, ++bi) {
    const int32_t te = std::min(n, t0 + bs);
    for (int32_t t = std::max(t0, lo); t < te; ++t) {
      for (int k = 0; k < 2 && p < n && p <= t + ahead; ++k) prefetch_next();
      fn(t, base + size_t(t - t0) * a.token_stride);
    }
    if (te < n) base = block(bi + 1);
  }
}

// Where a query's K/V rows come from: the paged cache (decode: one query per call), or a
// packed copy of one head's rows (see attend: many queries of one head share it).
template <class T>
struct paged_rows {
  using elem = T;
  const attention_args& a;
  std::ptrdiff_t v_minus_k;  // bytes from a position's K row to its V row (same offset in both arrays)
  bool v_early;              // prefetch V rows during the K pass (prefetch_v)
  int32_t line_mask;         // line_mask_of(the row's bytes): prefetch_v takes one row per line
  template <bool V, class F>
  void each(int32_t lo, int32_t n, F&& fn) const {
    for_rows<V, T>(a, lo, n, fn);
  }
  // NOTE: called as each K row is scored, when the head's V rows fit in L2 with room to spare
  // (v_early): its V row is read in the second pass a few microseconds later, and in decode
  // came from DRAM (the weight stream evicts the cache between steps). Longer contexts would
  // evict their early V rows before the V pass reached them; there its own cursor prefetches.
  void prefetch_v(int32_t t, const T* k_row) const {
    if (v_early && (t & line_mask) == 0)
      prefetch_row(reinterpret_cast<const char*>(k_row) + v_minus_k, a.head_dim * int32_t(sizeof(T)));
  }
};
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
inline __m256 load8(const float* p) { return _mm256_loadu_ps(p); }
inline __m256 load8(const uint16_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

inline float hsum8(__m256 s) {
  __m128 t = _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));
  t = _mm_add_ps(t, _mm_movehl_ps(t, t));
  t = _mm_add_ss(t, _mm_movehdup_ps(t));
  return _mm_cvtss_f32(t);
}

// hsum8 of 8 vectors at once: out[i] = hsum8(v[i]), bit for bit (the same pairwise sums
// (l0+l4)+(l2+l6) and (l1+l5)+(l3+l7), then their sum, arranged across lanes; float
// addition is commutative, so only which values are added matters, not their order).
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
  // [s0, s2, s4, s6 | s1, s3, s5, s7], then into key order.
  const __m256 s = _mm256_add_ps(_mm256_shuffle_ps(u0, u1, _MM_SHUFFLE(2, 0, 2, 0)),
                                 _mm256_shuffle_ps(u0, u1, _MM_SHUFFLE(3, 1, 3, 1)));
  return _mm256_permutevar8x32_ps(s, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

// scores[0..n) (their running max in vmx's lanes) -> probabilities exp(s - max), in place;
// returns 1 / their sum in every lane.
inline __m256 softmax_scores(const attention_args& a, float* scores, int32_t lo, int32_t n, __m256 vmx) {
  vmx = _mm256_max_ps(vmx, _mm256_permute2f128_ps(vmx, vmx, 1));
  vmx = _mm256_max_ps(vmx, _mm256_permute_ps(vmx, _MM_SHUFFLE(1, 0, 3, 2)));
  vmx = _mm256_max_ps(vmx, _mm256_permute_ps(vmx, _MM_SHUFFLE(2, 3, 0, 1)));
  const __m256 mx = vmx;
  // Probabilities and their sum (4 double lanes by t mod 8 halves, fixed tree; tail scalar).
  __m256d sum4 = _mm256_setzero_pd();
  int32_t t = lo;  // a multiple of 8 (window_lo)
  for (; t + 8 <= n; t += 8) {
    const __m256 p = kernels::exp_avx2(_mm256_sub_ps(_mm256_loadu_ps(scores + t), mx));
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
    const __m256 p = kernels::exp_avx2(_mm256_sub_ps(_mm256_load_ps(tail), mx));
    _mm256_store_ps(tail, p);
    for (int32_t i = t; i < n; ++i) {
      scores[i] = tail[i - t];
      sum += double(tail[i - t]);
    }
  }
  if (a.has_sink) sum += sink_term(a, _mm256_cvtss_f32(mx));
  return _mm256_set1_ps(float(1.0 / sum));
}

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
// Two queries of one head at consecutive positions (pos_a, pos_a + 1) over packed rows, bit for
// bit as two attend_one_avx2 calls: every zmm register holds query A's 8 lanes in its low half
// and B's in its high half, each lane doing the AVX2 kernel's float operations in its order
// (K and V chunks broadcast to both halves; hsum8x8 per half). B's extra key, pos_a + 1, is
// scored and accumulated last, on its own, as B's own call does.
// NOTE: why: prefill attention ran at 256-bit FMA width, ~16% of 110M F16 pp512 on Zen 5.
template <int NV>
void attend_pair_avx512(const attention_args& a, const packed_rows& rows, const float* qa, const float* qb,
                        int32_t pos_a, float* out_a, float* out_b, float* sa, float* sb) {
  static_assert(NV % 8 == 0);
  __m512 qv[NV];
  for (int c = 0; c < NV; ++c) qv[c] = kernels::join_halves(_mm256_loadu_ps(qa + 8 * c), _mm256_loadu_ps(qb + 8 * c));
  const int32_t na = pos_a + 1, nb = na + 1;
  auto k_row = [&](int32_t t) { return rows.k + size_t(t) * rows.stride; };
  const __m256 scale = _mm256_set1_ps(a.scale);
  __m256 mxa = _mm256_set1_ps(-INFINITY), mxb = mxa;
  const int32_t lo_a = window_lo(a, pos_a), lo_b = window_lo(a, pos_a + 1);
  int32_t t = lo_a;
  for (; t + 8 <= na; t += 8) {
    __m512 acc[8];
    for (int i = 0; i < 8; ++i) acc[i] = _mm512_mul_ps(qv[0], kernels::broadcast8(k_row(t + i)));
    for (int c = 1; c < NV; ++c)
      for (int i = 0; i < 8; ++i) acc[i] = _mm512_fmadd_ps(qv[c], kernels::broadcast8(k_row(t + i) + 8 * c), acc[i]);
    __m256 h[8];
    for (int i = 0; i < 8; ++i) h[i] = kernels::low_half(acc[i]);
    const __m256 s_a = _mm256_mul_ps(hsum8x8(h), scale);
    for (int i = 0; i < 8; ++i) h[i] = kernels::high_half(acc[i]);
    const __m256 s_b = _mm256_mul_ps(hsum8x8(h), scale);
    _mm256_storeu_ps(sa + t, s_a);
    _mm256_storeu_ps(sb + t, s_b);
    mxa = _mm256_max_ps(mxa, s_a);
    mxb = _mm256_max_ps(mxb, s_b);
  }
  // The rest one key at a time, as attend_one_avx2's tail (B's through its extra key).
  auto one = [&](const float* q, int32_t u) {
    __m256 acc = _mm256_mul_ps(_mm256_loadu_ps(q), load8(k_row(u)));
    for (int c = 1; c < NV; ++c) acc = _mm256_fmadd_ps(_mm256_loadu_ps(q + 8 * c), load8(k_row(u) + 8 * c), acc);
    return hsum8(acc) * a.scale;
  };
  for (int32_t u = t; u < na; ++u) {
    sa[u] = one(qa, u);
    mxa = _mm256_max_ps(mxa, _mm256_set1_ps(sa[u]));
  }
  for (int32_t u = t; u < nb; ++u) {
    sb[u] = one(qb, u);
    mxb = _mm256_max_ps(mxb, _mm256_set1_ps(sb[u]));
  }
  if (adjusts(a)) {
    mxa = _mm256_set1_ps(adjust_scores(a, sa, na));
    mxb = _mm256_set1_ps(adjust_scores(a, sb, nb));
  }
  const __m256 inv_a = softmax_scores(a, sa, lo_a, na, mxa), inv_b = softmax_scores(a, sb, lo_b, nb, mxb);
  for (int32_t u = lo_a; u < lo_b; ++u) sb[u] = 0.0f;  // before B's window: weight 0, as its own call
  const __m512 inv = kernels::join_halves(inv_a, inv_b);
  for (int c0 = 0; c0 < NV; c0 += 8) {
    __m512 acc[8];
    for (int c = 0; c < 8; ++c) acc[c] = _mm512_setzero_ps();
    for (int32_t u = lo_a; u < na; ++u) {
      const float* vt = rows.v + size_t(u) * rows.stride + 8 * c0;
      const __m512 p = _mm512_mul_ps(kernels::join_halves(_mm256_broadcast_ss(sa + u), _mm256_broadcast_ss(sb + u)), inv);
      for (int c = 0; c < 8; ++c) acc[c] = _mm512_fmadd_ps(p, kernels::broadcast8(vt + 8 * c), acc[c]);
    }
    const float* vt = rows.v + size_t(na) * rows.stride + 8 * c0;
    const __m256 pb = _mm256_mul_ps(_mm256_broadcast_ss(sb + na), inv_b);
    for (int c = 0; c < 8; ++c) {
      _mm256_storeu_ps(out_a + 8 * (c0 + c), kernels::low_half(acc[c]));
      _mm256_storeu_ps(out_b + 8 * (c0 + c), _mm256_fmadd_ps(pb, load8(vt + 8 * c), kernels::high_half(acc[c])));
    }
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
    __m256 h[8];
    for (int i = 0; i < 8; ++i) h[i] = kernels::low_half(acc[i]);
    const __m256 s_a = _mm256_mul_ps(hsum8x8(h), scale);
    for (int i = 0; i < 8; ++i) h[i] = kernels::high_half(acc[i]);
    const __m256 s_b = _mm256_mul_ps(hsum8x8(h), scale);
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
  int32_t j = 0;
#if defined(__AVX512F__)
  if constexpr (std::is_same_v<Rows, packed_rows>) {
    if (a.head_dim == 64 || a.head_dim == 128) {
      thread_local std::vector<float> scores_b;
      if (scores_b.size() < size_t(pos0 + n_q)) scores_b.resize(size_t(pos0 + n_q));
      for (; j + 2 <= n_q; j += 2) {
        const float* qa = q + j * q_stride;
        float* oa = out + j * out_stride;
        if (a.head_dim == 64)
          attend_pair_avx512<8>(a, rows, qa, qa + q_stride, pos0 + j, oa, oa + out_stride, scores, scores_b.data());
        else
          attend_pair_avx512<16>(a, rows, qa, qa + q_stride, pos0 + j, oa, oa + out_stride, scores, scores_b.data());
      }
    }
  }
#endif
  for (; j < n_q; ++j) {
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
      const int32_t b0 = a.block_table[window_lo(a, pos0) / a.block_size];  // a block the window holds
      const std::ptrdiff_t v_minus_k = reinterpret_cast<const char*>(a.kv->v<T>(a.layer, b0)) -
                                       reinterpret_cast<const char*>(a.kv->k<T>(a.layer, b0));
      const bool v_early = int64_t(pos0 + n_q) * a.head_dim * int64_t(sizeof(T)) <= (64 << 10);
      const int32_t line_mask = line_mask_of(a.head_dim * int32_t(sizeof(T)));
      attend_avx2(a, paged_rows<T>{a, v_minus_k, v_early, line_mask}, q, q_stride, pos0, n_q, out, out_stride, scores);
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
  const int32_t b0 = a.block_table[window_lo(a, pos) / a.block_size];
  const std::ptrdiff_t v_minus_k = reinterpret_cast<const char*>(a.kv->v<T>(a.layer, b0)) -
                                   reinterpret_cast<const char*>(a.kv->k<T>(a.layer, b0));
  const bool v_early = int64_t(pos + 1) * a.head_dim * int64_t(sizeof(T)) <= (64 << 10);
  const paged_rows<T> rows{a, v_minus_k, v_early, line_mask_of(a.head_dim * int32_t(sizeof(T)))};
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
