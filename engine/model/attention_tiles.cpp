// Many queries of one head over the paged K/V read in place (a speculative verify pass, a
// prefill run), AVX-512: each K/V row is converted from F16 once per call into a small L1 tile
// that every query then reads, bit for bit as one attend() per query (attention.h).
// NOTE: why: the packed path it replaced on AVX-512 (attention.cpp: the whole head's K and V
// copied to F32, then two queries per zmm over the copy) streamed that copy from L2 once per
// query pair, twice the F16 bytes each time: 110M, 17 queries at position 450, 0.68-0.78x the
// time; a 322-token prefill's attention 0.71-0.76x (agentq-bench_attention, docs/speculative.md).
// NOTE: not an online (flash) softmax: rescaling partial sums would change each query's float
// order against the one-query decode kernel, and speculation's exactness rests on those bits.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#include "agentq/zmm_halves.h"
#include "model/attention_simd.h"

namespace agentq::attn {

#if AGENTQ_ATTENTION_AVX2 && defined(__AVX512F__)
namespace {

constexpr int32_t k_block_queries = 32;  // queries per pass over the keys (a prefill run: transformer.cpp's k_run)
constexpr int32_t k_v_tile = 32;         // V rows converted per tile

// One row of T (F16 bits or F32) as hd floats at dst.
template <int HD, class T>
inline void convert_row(const T* row, float* dst) {
  for (int d = 0; d < HD; d += 16) {
    if constexpr (std::is_same_v<T, float>)
      _mm512_store_ps(dst + d, _mm512_loadu_ps(row + d));
    else
      _mm512_store_ps(dst + d, _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + d))));
  }
}

using kernels::hsum8x8_halves;  // [hsum8x8(A) | hsum8x8(B)] of v[i] = [A_i | B_i], bit for bit

// The V pass of queries j0..j0+QB-1 over V rows [u0, u0 + cnt) (converted at vt): out_j +=
// w_j[u] V_u in key order, w_j = the query's probabilities times 1/sum (the product every kernel
// forms per key). Lanes hold 16 dims of one query, so each lane runs attend_one_avx2's chain for
// its dim. Keys a query does not see (past its position, before its window) are masked off:
// a zero weight would turn an infinite F16 value into NaN.
template <int NV, int QB>
void v_block(const attention_args& a, const float* vt, int32_t u0, int32_t cnt, int32_t pos0, int32_t j0,
             const float* w, int64_t ld, float* out, int64_t out_stride) {
  constexpr int NZ = NV / 2, HD = 8 * NV;  // zmm per query row
  __m512 acc[QB][NZ];
#pragma GCC unroll 16
  for (int jj = 0; jj < QB; ++jj)
#pragma GCC unroll 16
    for (int z = 0; z < NZ; ++z) acc[jj][z] = _mm512_loadu_ps(out + (j0 + jj) * out_stride + 16 * z);
  const float* wj = w + j0 * ld;
  // One key for every query of the block; with `masked`, only for those that see it.
  // NOTE: three loops of one kind each, fully unrolled: with both kinds in one loop body GCC
  // kept the accumulators on the stack, a store and a load per FMA.
  auto step = [&](int32_t u, auto masked) {
    const float* vr = vt + size_t(u - u0) * HD;
    __m512 v[NZ];
#pragma GCC unroll 16
    for (int z = 0; z < NZ; ++z) v[z] = _mm512_load_ps(vr + 16 * z);
#pragma GCC unroll 16
    for (int jj = 0; jj < QB; ++jj) {
      const __m512 p = _mm512_set1_ps(wj[jj * ld + u]);
      if constexpr (masked) {
        const int32_t pos = pos0 + j0 + jj;  // query jj's position: it sees [window_lo(pos), pos]
        const __mmask16 m = u >= window_lo(a, pos) && u <= pos ? 0xFFFF : 0;
#pragma GCC unroll 16
        for (int z = 0; z < NZ; ++z) acc[jj][z] = _mm512_mask3_fmadd_ps(p, v[z], acc[jj][z], m);
      } else {
#pragma GCC unroll 16
        for (int z = 0; z < NZ; ++z) acc[jj][z] = _mm512_fmadd_ps(p, v[z], acc[jj][z]);
      }
    }
  };
  // Every query of the block sees [all_lo, all_hi); the last sees up to pos0 + j0 + QB - 1.
  const int32_t u_end = std::min(u0 + cnt, pos0 + j0 + QB);
  const int32_t all_lo = std::clamp(window_lo(a, pos0 + j0 + QB - 1), u0, u_end);
  const int32_t all_hi = std::clamp(pos0 + j0 + 1, all_lo, u_end);
  for (int32_t u = u0; u < all_lo; ++u) step(u, std::true_type{});
  for (int32_t u = all_lo; u < all_hi; ++u) step(u, std::false_type{});
  for (int32_t u = all_hi; u < u_end; ++u) step(u, std::true_type{});
#pragma GCC unroll 16
  for (int jj = 0; jj < QB; ++jj)
#pragma GCC unroll 16
    for (int z = 0; z < NZ; ++z) _mm512_storeu_ps(out + (j0 + jj) * out_stride + 16 * z, acc[jj][z]);
}

// Up to k_block_queries queries at pos0.. (see attend_tiles).
template <int NV, class T>
void attend_block(const attention_args& a, const float* q, int64_t q_stride, int32_t pos0, int32_t n_q, float* out,
                  int64_t out_stride) {
  constexpr int HD = 8 * NV;
  constexpr int QB = NV == 8 ? 6 : 2;  // queries a V pass holds: QB * NV / 2 accumulators + NV / 2 rows in 32 zmm
  const int32_t n_max = pos0 + n_q, lo = window_lo(a, pos0), n_pairs = (n_q + 1) / 2;
  // Scores, then weights, one row per query (and one for an odd count's unused partner), ld
  // apart: whole 8-key tiles are written, keys past a query's own position included (unread).
  const int64_t ld = ((n_max + 7) & ~7) + 8;
  thread_local std::vector<float> s_buf;
  if (s_buf.size() < size_t(2 * n_pairs * ld)) s_buf.resize(size_t(2 * n_pairs * ld));
  float* s = s_buf.data();
  // Query pairs as the paired kernels hold them: [q_2p chunk c | q_2p+1 chunk c] (an odd
  // count's last query with itself).
  alignas(64) __m512 qp[k_block_queries / 2 * NV];
  for (int32_t p = 0; p < n_pairs; ++p) {
    const float* qa = q + 2 * p * q_stride;
    const float* qb = 2 * p + 1 < n_q ? qa + q_stride : qa;
    for (int c = 0; c < NV; ++c)
      qp[p * NV + c] = kernels::join_halves(_mm256_loadu_ps(qa + 8 * c), _mm256_loadu_ps(qb + 8 * c));
  }

  // Scores: 8 keys at a time, every pair that sees one of them (pair p's last key is
  // pos0 + 2p + 1): A in the low half of each zmm, B in the high, K broadcast to both, one FMA
  // chain per key per lane and hsum8x8 per half, attend_one_avx2's operations lane for lane.
  const paged_rows<T> rows = paged_rows_of<T>(a, pos0, n_max);
  alignas(64) float kt[8 * HD];
  const __m512 scale = _mm512_set1_ps(a.scale);
  auto score_tile = [&](int32_t t0) {
    for (int32_t p = t0 > pos0 ? (t0 - pos0) / 2 : 0; p < n_pairs; ++p) {
      const __m512* qv = qp + p * NV;
      __m512 acc[8];
      for (int i = 0; i < 8; ++i) acc[i] = _mm512_mul_ps(qv[0], kernels::broadcast8(kt + i * HD));
      for (int c = 1; c < NV; ++c)
        for (int i = 0; i < 8; ++i) acc[i] = _mm512_fmadd_ps(qv[c], kernels::broadcast8(kt + i * HD + 8 * c), acc[i]);
      const __m512 sc = _mm512_mul_ps(hsum8x8_halves(acc), scale);
      _mm256_storeu_ps(s + 2 * p * ld + t0, kernels::low_half(sc));
      _mm256_storeu_ps(s + (2 * p + 1) * ld + t0, kernels::high_half(sc));
    }
  };
  rows.template each<false>(lo, n_max, [&](int32_t t, const T* row) {
    rows.prefetch_v(t, row);
    convert_row<HD>(row, kt + (t & 7) * HD);
    if ((t & 7) == 7) score_tile(t - 7);
  });
  if (n_max & 7) {  // lo is a multiple of 8, so the last tile holds keys n_max & ~7 .. n_max - 1
    std::memset(kt + (n_max & 7) * HD, 0, sizeof(float) * size_t(8 - (n_max & 7)) * HD);
    score_tile(n_max & ~7);
  }

  // Each query's softmax, as attend_one_avx2's (the max is exact in any order), then its
  // weights p * (1 / sum) in place.
  for (int32_t j = 0; j < n_q; ++j) {
    float* sj = s + j * ld;
    const int32_t n = pos0 + j + 1, lo_j = window_lo(a, pos0 + j);
    __m256 vmx = _mm256_set1_ps(-INFINITY);
    int32_t t = lo_j;
    for (; t + 8 <= n; t += 8) vmx = _mm256_max_ps(vmx, _mm256_loadu_ps(sj + t));
    for (; t < n; ++t) vmx = _mm256_max_ps(vmx, _mm256_set1_ps(sj[t]));
    if (adjusts(a)) vmx = _mm256_set1_ps(adjust_scores(a, sj, n));
    const __m256 inv = softmax_scores(a, sj, lo_j, n, vmx);
    for (t = lo_j; t + 8 <= n; t += 8) _mm256_storeu_ps(sj + t, _mm256_mul_ps(_mm256_loadu_ps(sj + t), inv));
    for (; t < n; ++t) sj[t] *= _mm256_cvtss_f32(inv);
    std::memset(out + j * out_stride, 0, sizeof(float) * HD);
  }

  // V: tiles of k_v_tile rows, each converted once and added into every query block.
  alignas(64) float vt[k_v_tile * HD];
  auto v_tile = [&](int32_t u0, int32_t cnt) {
    for (int32_t j0 = 0; j0 < n_q; j0 += QB) {
      switch (std::min<int32_t>(QB, n_q - j0)) {
#define AGENTQ_V_BLOCK(nb) \
  case nb:                 \
    if constexpr (nb <= QB) v_block<NV, nb>(a, vt, u0, cnt, pos0, j0, s, ld, out, out_stride); \
    break;
        AGENTQ_V_BLOCK(1)
        AGENTQ_V_BLOCK(2)
        AGENTQ_V_BLOCK(3)
        AGENTQ_V_BLOCK(4)
        AGENTQ_V_BLOCK(5)
        AGENTQ_V_BLOCK(6)
#undef AGENTQ_V_BLOCK
      }
    }
  };
  int32_t u0 = lo;
  rows.template each<true>(lo, n_max, [&](int32_t u, const T* row) {
    convert_row<HD>(row, vt + size_t(u - u0) * HD);
    if (u + 1 - u0 == k_v_tile) {
      v_tile(u0, k_v_tile);
      u0 = u + 1;
    }
  });
  if (u0 < n_max) v_tile(u0, n_max - u0);
}

template <class T>
bool attend_tiles_typed(const attention_args& a, const float* q, int64_t q_stride, int32_t pos0, int32_t n_q,
                        float* out, int64_t out_stride) {
  if (a.head_dim != 64 && a.head_dim != 128) return false;
  for (int32_t j = 0; j < n_q; j += k_block_queries) {
    const int32_t nb = std::min(k_block_queries, n_q - j);
    if (a.head_dim == 64)
      attend_block<8, T>(a, q + j * q_stride, q_stride, pos0 + j, nb, out + j * out_stride, out_stride);
    else
      attend_block<16, T>(a, q + j * q_stride, q_stride, pos0 + j, nb, out + j * out_stride, out_stride);
  }
  return true;
}

}  // namespace
#endif

bool attend_tiles(const attention_args& a, const float* q, int64_t q_stride, int32_t pos0, int32_t n_q, float* out,
                  int64_t out_stride) {
#if AGENTQ_ATTENTION_AVX2 && defined(__AVX512F__)
  if (a.kv->layout().dtype == kv_dtype::f16)
    return attend_tiles_typed<uint16_t>(a, q, q_stride, pos0, n_q, out, out_stride);
  return attend_tiles_typed<float>(a, q, q_stride, pos0, n_q, out, out_stride);
#else
  (void)a, (void)q, (void)q_stride, (void)pos0, (void)n_q, (void)out, (void)out_stride;
  return false;
#endif
}

}  // namespace agentq::attn
