// Shared pieces of the CPU attention kernels (attention.cpp: one query, head pairs, the packed
// path; attention_tiles.cpp: many queries over the cache in place): walking a head's paged K/V
// rows with prefetch, the window / soft-cap / sink score adjustments, and the AVX2 score
// reductions and softmax whose float order every kernel keeps (attention.h: batch-invariant).
// Private to engine/model.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>

#include "agentq/exp_avx2.h"
#include "agentq/hsum_avx2.h"
#include "agentq/kernels.h"
#include "agentq/zmm_halves.h"

#include "kv/kv_store.h"
#include "model/attention.h"

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#include <immintrin.h>
#define AGENTQ_ATTENTION_AVX2 1
#endif

namespace agentq::attn {

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

// The paged rows of one head for queries up to position n - 1 (window from window_lo(a, pos)):
// the V-row offset from a block the window holds, and V-early prefetch while the head's V rows
// fit in 64 KiB (paged_rows::prefetch_v).
template <class T>
paged_rows<T> paged_rows_of(const attention_args& a, int32_t pos, int32_t n) {
  const int32_t b0 = a.block_table[window_lo(a, pos) / a.block_size];
  const std::ptrdiff_t v_minus_k = reinterpret_cast<const char*>(a.kv->v<T>(a.layer, b0)) -
                                   reinterpret_cast<const char*>(a.kv->k<T>(a.layer, b0));
  const bool v_early = int64_t(n) * a.head_dim * int64_t(sizeof(T)) <= (64 << 10);
  return paged_rows<T>{a, v_minus_k, v_early, line_mask_of(a.head_dim * int32_t(sizeof(T)))};
}

// attention_tiles.cpp: n_q queries of one head at consecutive positions pos0.. over the paged
// K/V read in place, bit for bit as one attend() per query; false where this build or head_dim
// has none (AVX-512 and head_dim 64 or 128 only): the caller takes its own path.
bool attend_tiles(const attention_args& a, const float* q, int64_t q_stride, int32_t pos0, int32_t n_q, float* out,
                  int64_t out_stride);
// attention_small.cpp: the same for head_dim 8 (keys in the lanes, K^T
// shared by the queries), any n_q, AVX2 and AVX-512 builds alike; false elsewhere (other head
// dims, a window).
bool attend_small(const attention_args& a, const float* q, int64_t q_stride, int32_t pos0, int32_t n_q, float* out,
                  int64_t out_stride);
// The fewest queries of one head that take attend_tiles (fewer: one query at a time in place).
// NOTE: a variable so that agentq-bench_attention and unit.attention_pair can also run the
// packed path (a large value: the head's K/V copied to F32, one query per call) against it;
// the engine never changes it.
inline int32_t tiles_min_queries = 2;
// The fewest queries of one head that take attend_small (fewer: one query at a time in place,
// which is also the reference it must match; a variable for the same reason).
// NOTE: 4, where attention.cpp's packed copy starts too: below it, copying the head's rows
// costs more than the queries share.
inline int32_t small_min_queries = 4;

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

// hsum8 of 8 vectors at once, bit for bit as hsum8 of each (agentq/hsum_avx2.h).
using kernels::hsum8x8;

// The max of v's 8 lanes (a max is exact in any order: every kernel's scores get the same one).
inline float max8(__m256 v) {
  v = _mm256_max_ps(v, _mm256_permute2f128_ps(v, v, 1));
  v = _mm256_max_ps(v, _mm256_permute_ps(v, _MM_SHUFFLE(1, 0, 3, 2)));
  v = _mm256_max_ps(v, _mm256_permute_ps(v, _MM_SHUFFLE(2, 3, 0, 1)));
  return _mm256_cvtss_f32(v);
}

// scores[0..n) (their running max in vmx's lanes) -> probabilities exp(s - max), in place;
// returns 1 / their sum in every lane.
inline __m256 softmax_scores(const attention_args& a, float* scores, int32_t lo, int32_t n, __m256 vmx) {
  const __m256 mx = _mm256_set1_ps(max8(vmx));
  // Probabilities and their sum (4 double lanes by t mod 8 halves, fixed tree; tail scalar).
  __m256d sum4 = _mm256_setzero_pd();
  int32_t t = lo;  // a multiple of 8 (window_lo)
#if defined(__AVX512F__)
  // NOTE: 16 at a time where the CPU has it: exp_avx512 is exp_avx2 lane for lane, and the two
  // halves' sums are added to sum4 in the order the 8-wide loop adds them, so the same bits.
  const __m512 mx16 = kernels::join_halves(mx, mx);
  for (; t + 16 <= n; t += 16) {
    const __m512 p16 = kernels::exp_avx512(_mm512_sub_ps(_mm512_loadu_ps(scores + t), mx16));
    _mm512_storeu_ps(scores + t, p16);
    const __m256 p = kernels::low_half(p16), q = kernels::high_half(p16);
    sum4 = _mm256_add_pd(
        sum4, _mm256_add_pd(_mm256_cvtps_pd(_mm256_castps256_ps128(p)), _mm256_cvtps_pd(_mm256_extractf128_ps(p, 1))));
    sum4 = _mm256_add_pd(
        sum4, _mm256_add_pd(_mm256_cvtps_pd(_mm256_castps256_ps128(q)), _mm256_cvtps_pd(_mm256_extractf128_ps(q, 1))));
  }
#endif
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
#endif

}  // namespace agentq::attn
