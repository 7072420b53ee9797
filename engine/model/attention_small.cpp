// Many queries of one head with head_dim 8 (a tiny model: stories260K, dim 64, 8 heads) over
// the paged K/V, AVX2 (AVX-512 where built for it): a prefill run or a verify pass, bit for bit
// as one attend() per query (attention.h), whose kernel for this shape is attention.cpp's
// attend_one_avx2<0>.
// NOTE: why: at head_dim 8 a key's score is one 8-lane multiply, and the one-query kernel
// spent its time around it (a horizontal sum per key, a serial FMA chain over the keys for V,
// per-query setup): attention was 31% of stories260K's prefill on Zen 3 once the matmuls were
// cheap. Here keys lie in the lanes: each group of 8 keys is transposed once per call (K^T,
// shared by every query), a query's 8 scores are 8 multiplies of broadcast q dims by K^T rows
// and the same addition tree hsum8 runs (lane i of ((p0+p4)+(p2+p6))+((p1+p5)+(p3+p7)) is key
// i's hsum8), and the V pass runs 8 queries' chains side by side, each in key order.
// On AVX-512 builds two queries' scores share a zmm (one per half) and the softmax's exp takes
// 16 at a time, lane for lane the 8-wide code's operations (the same bits); each probability is
// multiplied by its query's 1 / sum once before the V pass rather than inside its chain.
// NOTE: compiled with -ffp-contract=off (engine/CMakeLists.txt): a product added to another
// would otherwise be fused into an FMA, which the one-query kernel (a multiply, then hsum8)
// never does.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "agentq/exp_avx2.h"
#include "model/attention_simd.h"

namespace agentq::attn {

#if AGENTQ_ATTENTION_AVX2
namespace {

// r[i] = row i of an 8x8 block -> r[d] = column d (lane i = row i's element d).
inline void transpose8x8(__m256 r[8]) {
  const __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
  const __m256 t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
  const __m256 t4 = _mm256_unpacklo_ps(r[4], r[5]), t5 = _mm256_unpackhi_ps(r[4], r[5]);
  const __m256 t6 = _mm256_unpacklo_ps(r[6], r[7]), t7 = _mm256_unpackhi_ps(r[6], r[7]);
  const __m256 u0 = _mm256_shuffle_ps(t0, t2, _MM_SHUFFLE(1, 0, 1, 0));
  const __m256 u1 = _mm256_shuffle_ps(t0, t2, _MM_SHUFFLE(3, 2, 3, 2));
  const __m256 u2 = _mm256_shuffle_ps(t1, t3, _MM_SHUFFLE(1, 0, 1, 0));
  const __m256 u3 = _mm256_shuffle_ps(t1, t3, _MM_SHUFFLE(3, 2, 3, 2));
  const __m256 u4 = _mm256_shuffle_ps(t4, t6, _MM_SHUFFLE(1, 0, 1, 0));
  const __m256 u5 = _mm256_shuffle_ps(t4, t6, _MM_SHUFFLE(3, 2, 3, 2));
  const __m256 u6 = _mm256_shuffle_ps(t5, t7, _MM_SHUFFLE(1, 0, 1, 0));
  const __m256 u7 = _mm256_shuffle_ps(t5, t7, _MM_SHUFFLE(3, 2, 3, 2));
  r[0] = _mm256_permute2f128_ps(u0, u4, 0x20);
  r[1] = _mm256_permute2f128_ps(u1, u5, 0x20);
  r[2] = _mm256_permute2f128_ps(u2, u6, 0x20);
  r[3] = _mm256_permute2f128_ps(u3, u7, 0x20);
  r[4] = _mm256_permute2f128_ps(u0, u4, 0x31);
  r[5] = _mm256_permute2f128_ps(u1, u5, 0x31);
  r[6] = _mm256_permute2f128_ps(u2, u6, 0x31);
  r[7] = _mm256_permute2f128_ps(u3, u7, 0x31);
}

// The V pass of Q queries (their weights p_j = probability / sum at p + j * p_stride) over keys
// [0, n) (V rows at vr, 8 floats each) into out_j: attend_one_avx2's chain per query,
// out = sum_t (p_t * inv) V_t in key order from 0 (the products p_t * inv made beforehand: one
// rounding either way, so the same bits).
template <int Q>
inline void v_common(const float* vr, int32_t n, const float* p, int64_t p_stride, float* out, int64_t out_stride) {
  __m256 acc[Q];
  for (int j = 0; j < Q; ++j) acc[j] = _mm256_setzero_ps();
  for (int32_t t = 0; t < n; ++t) {
    const __m256 v = _mm256_load_ps(vr + 8 * size_t(t));
    for (int j = 0; j < Q; ++j) acc[j] = _mm256_fmadd_ps(_mm256_broadcast_ss(p + j * p_stride + t), v, acc[j]);
  }
  for (int j = 0; j < Q; ++j) _mm256_storeu_ps(out + j * out_stride, acc[j]);
}

// Contexts up to this many keys read their K/V rows without a prefetch cursor (attend_hd8).
constexpr int32_t k_direct_max_keys = 512;

template <class T>
void attend_hd8(const attention_args& a, const float* q, int64_t q_stride, int32_t pos0, int32_t n_q, float* out,
                int64_t out_stride) {
  const int32_t n = pos0 + n_q, n_groups = (n + 7) / 8;
  const int64_t s_stride = int64_t(n_groups) * 8;
  thread_local std::vector<float> buf;
  const size_t need = size_t(n_groups) * 64 + size_t(n) * 8 + size_t(n_q) * size_t(s_stride) + size_t(n_q) + 8;
  if (buf.size() < need) buf.resize(need);
  // kt: [n_groups][8 dims][8 keys] (K^T per group; keys past n are 0); vr: [n][8]; sc: [n_q][s_stride]
  // scores, then probabilities; inv: [n_q]. 32-byte aligned: a vector's offset is a multiple of 8 floats.
  float* kt = reinterpret_cast<float*>((reinterpret_cast<uintptr_t>(buf.data()) + 31) & ~uintptr_t(31));
  float* vr = kt + size_t(n_groups) * 64;
  float* sc = vr + size_t(n) * 8;
  float* inv = sc + size_t(n_q) * size_t(s_stride);

  if (n <= k_direct_max_keys && a.block_size % 8 == 0) {
    // NOTE: a short context walks its rows group by group (a group of 8 never straddles a block),
    // K and V together, without for_rows' prefetch cursor: its rows were written this step or
    // lately (in cache), and the two cursors' per-row bookkeeping cost more than the loads did
    // (dropping it: -16 % of a 17-query run over 56 keys, Zen 5). The loads are exact: the same bits.
    for (int32_t g = 0; g < n_groups; ++g) {
      const int32_t t0 = 8 * g, m = std::min<int32_t>(8, n - t0);
      const size_t at = size_t(t0 % a.block_size) * size_t(a.token_stride) + size_t(a.head_offset);
      const T* kb = a.kv->k<T>(a.layer, a.block_table[t0 / a.block_size]) + at;
      const T* vb = a.kv->v<T>(a.layer, a.block_table[t0 / a.block_size]) + at;
      __m256 r[8];
      for (int i = 0; i < 8; ++i) r[i] = i < m ? load8(kb + size_t(i) * a.token_stride) : _mm256_setzero_ps();
      transpose8x8(r);
      for (int d = 0; d < 8; ++d) _mm256_store_ps(kt + size_t(g) * 64 + 8 * d, r[d]);
      for (int i = 0; i < m; ++i) _mm256_store_ps(vr + 8 * size_t(t0 + i), load8(vb + size_t(i) * a.token_stride));
    }
  } else {
    __m256 rows[8];
    for_rows<false, T>(a, 0, n, [&](int32_t t, const T* row) {
      rows[t % 8] = load8(row);
      if (t % 8 == 7 || t == n - 1) {
        for (int i = t % 8 + 1; i < 8; ++i) rows[i] = _mm256_setzero_ps();
        transpose8x8(rows);
        for (int d = 0; d < 8; ++d) _mm256_store_ps(kt + size_t(t / 8) * 64 + 8 * d, rows[d]);
      }
    });
    for_rows<true, T>(a, 0, n, [&](int32_t t, const T* row) { _mm256_store_ps(vr + 8 * size_t(t), load8(row)); });
  }

  // Scores (attend_one_avx2's: q . k_t as hsum8 of the 8 products, times scale); each query's
  // max over its keys (exact in any order) into inv[j].
  const __m256 scale = _mm256_set1_ps(a.scale);
  const __m256 lane = _mm256_setr_ps(0, 1, 2, 3, 4, 5, 6, 7);
  int32_t j = 0;
#if defined(__AVX512F__)
  // NOTE: two queries at a time where the CPU has AVX-512: query j in the low half, j + 1 in the
  // high half, against the group's K^T rows in both; every lane does the 8-wide code's operations
  // in its order, so the same bits. The pair runs to the second query's last group; the first's
  // row gets that group's values too (inside its row: s_stride covers n keys), never read.
  {
    const __m512 scale16 = _mm512_set1_ps(a.scale);
    const __m512 lane16 = kernels::join_halves(lane, lane);
    for (; j + 2 <= n_q; j += 2) {
      const float* qa = q + j * q_stride;
      const float* qb = qa + q_stride;
      __m512 qd[8];
      for (int d = 0; d < 8; ++d) qd[d] = kernels::join_halves(_mm256_set1_ps(qa[d]), _mm256_set1_ps(qb[d]));
      const int32_t na = pos0 + j + 1, nb = na + 1;
      const __m512 lim = kernels::join_halves(_mm256_set1_ps(float(na)), _mm256_set1_ps(float(nb)));
      float* sa = sc + j * s_stride;
      float* sb = sa + s_stride;
      __m512 vmx = _mm512_set1_ps(-INFINITY);
      for (int32_t g = 0; 8 * g < nb; ++g) {
        const float* k = kt + size_t(g) * 64;
        __m512 p[8];
        for (int d = 0; d < 8; ++d) p[d] = _mm512_mul_ps(qd[d], kernels::broadcast8(k + 8 * d));
        const __m512 v =
            _mm512_mul_ps(_mm512_add_ps(_mm512_add_ps(_mm512_add_ps(p[0], p[4]), _mm512_add_ps(p[2], p[6])),
                                        _mm512_add_ps(_mm512_add_ps(p[1], p[5]), _mm512_add_ps(p[3], p[7]))),
                          scale16);
        _mm256_store_ps(sa + 8 * g, kernels::low_half(v));
        _mm256_store_ps(sb + 8 * g, kernels::high_half(v));
        // Lanes past a query's last key (a padded group) do not take part in its max.
        const __mmask16 seen = _mm512_cmp_ps_mask(lane16, _mm512_sub_ps(lim, _mm512_set1_ps(float(8 * g))), _CMP_LT_OQ);
        vmx = _mm512_mask_max_ps(vmx, seen, vmx, v);
      }
      inv[j] = max8(kernels::low_half(vmx));
      inv[j + 1] = max8(kernels::high_half(vmx));
    }
  }
#endif
  for (; j < n_q; ++j) {
    const float* qj = q + j * q_stride;
    __m256 qb[8];
    for (int d = 0; d < 8; ++d) qb[d] = _mm256_broadcast_ss(qj + d);
    const int32_t nj = pos0 + j + 1;
    float* s = sc + j * s_stride;
    __m256 vmx = _mm256_set1_ps(-INFINITY);
    for (int32_t g = 0; 8 * g < nj; ++g) {
      const float* k = kt + size_t(g) * 64;
      __m256 p[8];
      for (int d = 0; d < 8; ++d) p[d] = _mm256_mul_ps(qb[d], _mm256_load_ps(k + 8 * d));
      const __m256 v = _mm256_mul_ps(_mm256_add_ps(_mm256_add_ps(_mm256_add_ps(p[0], p[4]), _mm256_add_ps(p[2], p[6])),
                                                   _mm256_add_ps(_mm256_add_ps(p[1], p[5]), _mm256_add_ps(p[3], p[7]))),
                                     scale);
      _mm256_store_ps(s + 8 * g, v);
      // Lanes past the query's last key (a padded group) do not take part in its max.
      const __m256 seen = _mm256_cmp_ps(lane, _mm256_set1_ps(float(nj - 8 * g)), _CMP_LT_OQ);
      vmx = _mm256_max_ps(vmx, _mm256_blendv_ps(_mm256_set1_ps(-INFINITY), v, seen));
    }
    inv[j] = max8(vmx);  // the max, until the softmax below
  }
  if (adjusts(a))  // soft-cap, sink: softmax_scores itself, one query at a time
    for (j = 0; j < n_q; ++j) {
      const int32_t nj = pos0 + j + 1;
      float* s = sc + j * s_stride;
      inv[j] = _mm256_cvtss_f32(softmax_scores(a, s, 0, nj, _mm256_set1_ps(adjust_scores(a, s, nj))));
    }
  // Without adjustments, softmax_scores for every query in phases, so that the queries' latency
  // chains (max, exp, the double sums, the division) overlap: exp is per element, so a tail
  // group's 8 lanes give its keys the values the one-query tail buffer does (lanes past the
  // query's keys are never read); sums as softmax_scores adds them (4 double lanes by key mod 4
  // over the full groups, their fixed tree, then the tail keys in order); 1 / sum four queries
  // at a time (the same correctly rounded division and conversion to float per lane).
  if (!adjusts(a)) {
    for (int32_t j = 0; j < n_q; ++j) {
      const int32_t nj = pos0 + j + 1;
      float* s = sc + j * s_stride;
      const __m256 mx = _mm256_set1_ps(inv[j]);
      int32_t t = 0;
#if defined(__AVX512F__)
      // 16 at a time within the query's 8-key groups: exp_avx512 is exp_avx2 lane for lane.
      const __m512 mx16 = _mm512_set1_ps(inv[j]);
      for (const int32_t n8 = (nj + 7) & ~7; t + 16 <= n8; t += 16)
        _mm512_storeu_ps(s + t, kernels::exp_avx512(_mm512_sub_ps(_mm512_loadu_ps(s + t), mx16)));
#endif
      for (; t < nj; t += 8) _mm256_store_ps(s + t, kernels::exp_avx2(_mm256_sub_ps(_mm256_load_ps(s + t), mx)));
    }
    alignas(32) double sums[4] = {1.0, 1.0, 1.0, 1.0};  // a last batch of fewer than 4 divides ones
    for (int32_t j = 0; j < n_q; ++j) {
      const int32_t nj = pos0 + j + 1, n8 = nj / 8 * 8;
      const float* s = sc + j * s_stride;
      __m256d sum4 = _mm256_setzero_pd();
      for (int32_t t = 0; t < n8; t += 8) {
        const __m256 p = _mm256_load_ps(s + t);
        sum4 = _mm256_add_pd(
            sum4, _mm256_add_pd(_mm256_cvtps_pd(_mm256_castps256_ps128(p)), _mm256_cvtps_pd(_mm256_extractf128_ps(p, 1))));
      }
      double lanes[4];
      _mm256_storeu_pd(lanes, sum4);
      double sum = (lanes[0] + lanes[1]) + (lanes[2] + lanes[3]);
      for (int32_t t = n8; t < nj; ++t) sum += double(s[t]);
      sums[j % 4] = sum;
      if (j % 4 == 3 || j == n_q - 1) {
        const __m128 r = _mm256_cvtpd_ps(_mm256_div_pd(_mm256_set1_pd(1.0), _mm256_load_pd(sums)));
        alignas(16) float r4[4];
        _mm_store_ps(r4, r);
        for (int32_t i = j / 4 * 4; i <= j; ++i) inv[i] = r4[i % 4];
      }
    }
  }

  // Each probability times its query's 1 / sum, in place (the V chain's multiply, done once per
  // (query, key) rather than in the chain: one rounding, the same value).
  for (j = 0; j < n_q; ++j) {
    const int32_t nj = pos0 + j + 1;
    float* s = sc + j * s_stride;
    int32_t t = 0;
#if defined(__AVX512F__)
    const __m512 iv16 = _mm512_set1_ps(inv[j]);
    for (; t + 16 <= nj; t += 16) _mm512_storeu_ps(s + t, _mm512_mul_ps(_mm512_loadu_ps(s + t), iv16));
#endif
    const __m256 iv = _mm256_set1_ps(inv[j]);
    for (; t + 8 <= nj; t += 8) _mm256_storeu_ps(s + t, _mm256_mul_ps(_mm256_loadu_ps(s + t), iv));
    for (; t < nj; ++t) s[t] = s[t] * inv[j];
  }

  // V: 8 (then 4, 2, 1) queries at a time over the keys they all see, then each one's own
  // last keys (fewer than the block) continue its chain from out.
  for (int32_t j0 = 0; j0 < n_q;) {
    const int32_t left = n_q - j0;
    const int qn = left >= 8 ? 8 : left >= 4 ? 4 : left >= 2 ? 2 : 1;
    const float* p = sc + j0 * s_stride;
    float* o = out + j0 * out_stride;
    const int32_t n_common = pos0 + j0 + 1;
    switch (qn) {
      case 8: v_common<8>(vr, n_common, p, s_stride, o, out_stride); break;
      case 4: v_common<4>(vr, n_common, p, s_stride, o, out_stride); break;
      case 2: v_common<2>(vr, n_common, p, s_stride, o, out_stride); break;
      default: v_common<1>(vr, n_common, p, s_stride, o, out_stride); break;
    }
    for (int j = 1; j < qn; ++j) {
      float* oj = o + j * out_stride;
      const float* pj = p + j * s_stride;
      __m256 acc = _mm256_loadu_ps(oj);
      for (int32_t t = n_common; t < n_common + j; ++t)
        acc = _mm256_fmadd_ps(_mm256_broadcast_ss(pj + t), _mm256_load_ps(vr + 8 * size_t(t)), acc);
      _mm256_storeu_ps(oj, acc);
    }
    j0 += qn;
  }
}

}  // namespace
#endif

bool attend_small(const attention_args& a, const float* q, int64_t q_stride, int32_t pos0, int32_t n_q, float* out,
                  int64_t out_stride) {
#if AGENTQ_ATTENTION_AVX2
  if (a.head_dim != 8 || a.window > 0) return false;
  if (a.kv->layout().dtype == kv_dtype::f16)
    attend_hd8<uint16_t>(a, q, q_stride, pos0, n_q, out, out_stride);
  else
    attend_hd8<float>(a, q, q_stride, pos0, n_q, out, out_stride);
  return true;
#else
  (void)a, (void)q, (void)q_stride, (void)pos0, (void)n_q, (void)out, (void)out_stride;
  return false;
#endif
}

}  // namespace agentq::attn
