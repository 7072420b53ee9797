// Private to kernels/cpu: the AVX2 kernels of the repacked layouts (block_q8_0x8,
// block_q4_kx8, block_q6_kx8): one group of 8 rows against B inputs, the 8 rows' sums in the 8 lanes of
// one register. Each serves decode (B = 1) and the batched path alike.
#pragma once
#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "agentq/kernels.h"
#include "cpu/quants_internal.h"
#include "cpu/simd_avx2.h"

namespace agentq::kernels::avx2 {

// Decode's weight stream: read once per step, prefetched non-temporally (prefetch_nta).
inline void prefetch_block(const uint8_t* p, int bytes) {
  for (int c = 0; c < bytes; c += 64) prefetch_nta(p + c);
}

// The frame every interleaved kernel shares (here, x8_more_avx2.h and the AVX-512 forms): B inputs
// of activation blocks XBlk, one accumulator Acc per input (__m256: 8 rows; ymm_pair or __m512: 16),
// the loop over the group's blocks with the prefetch of `next` at the group's pace (block i's bytes
// from next + i * sizeof(Blk): a fixed distance ahead in the group's linear stream), then
// out[b * rows + r] = acc[b]'s lane r. body(blk, x, i, acc) adds block i (blk) against x[b][i] into
// acc[b] for every b < B; it is inlined, so a kernel's loop is what it was written out by hand.
struct ymm_pair {
  __m256 h[2];  // rows 0-7, 8-15
};
inline void acc_zero(__m256& a) { a = _mm256_setzero_ps(); }
inline void acc_zero(ymm_pair& a) { a.h[0] = a.h[1] = _mm256_setzero_ps(); }
inline void acc_store(float* p, __m256 a) { _mm256_storeu_ps(p, a); }
inline void acc_store(float* p, const ymm_pair& a) {
  _mm256_storeu_ps(p, a.h[0]);
  _mm256_storeu_ps(p + 8, a.h[1]);
}
#if defined(__AVX512F__)
inline void acc_zero(__m512& a) { a = _mm512_setzero_ps(); }
inline void acc_store(float* p, __m512 a) { _mm512_storeu_ps(p, a); }
#endif

template <class Blk, class XBlk, int B, class Acc = __m256, class Body>
inline void x8_blocks(const uint8_t* group, const uint8_t* const* xb, int64_t nb, float* out, const uint8_t* next,
                      Body body) {
  constexpr int rows = int(sizeof(Acc) / sizeof(float));
  auto w = reinterpret_cast<const Blk*>(group);
  const XBlk* x[B];
  for (int b = 0; b < B; ++b) x[b] = reinterpret_cast<const XBlk*>(xb[b]);
  Acc acc[B];
  for (int b = 0; b < B; ++b) acc_zero(acc[b]);
  for (int64_t i = 0; i < nb; ++i) {
    if (next) prefetch_block(next + i * int64_t(sizeof(Blk)), int(sizeof(Blk)));
    body(w[i], x, i, acc);
  }
  for (int b = 0; b < B; ++b) acc_store(out + rows * b, acc[b]);
}

// acc + (d * xd) * s for 8 rows: a block's float step where its integer sum s is exact.
inline __m256 fma_block(__m256 d, float xd, __m256i s, __m256 acc) {
  return _mm256_fmadd_ps(_mm256_mul_ps(d, _mm256_set1_ps(xd)), _mm256_cvtepi32_ps(s), acc);
}

// 8 rows' fp16 scales (a layout's d[8], dmin[8]) as floats.
inline __m256 load_d8(const uint16_t* d) { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(d))); }

// 4 bytes at p broadcast to every dword.
inline __m256i bcast4(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm256_set1_epi32(v);
}

// The int16 sum of maddubs(q_k, x's dword k broadcast), k < 4, from xq: four 4-element chunks
// of every row against 16 activation bytes. The caller bounds the sum below 2^15.
inline __m256i maddubs4(__m256i q0, __m256i q1, __m256i q2, __m256i q3, const int8_t* xq) {
  __m256i p16 = _mm256_maddubs_epi16(q0, bcast4(xq));
  p16 = _mm256_add_epi16(p16, _mm256_maddubs_epi16(q1, bcast4(xq + 4)));
  p16 = _mm256_add_epi16(p16, _mm256_maddubs_epi16(q2, bcast4(xq + 8)));
  return _mm256_add_epi16(p16, _mm256_maddubs_epi16(q3, bcast4(xq + 12)));
}

// Pair p's 16 byte scales ([row][2], the layouts' [pair][row][2] order) widened to int16.
inline __m256i scales16(const uint8_t* scales, int p) {
  return _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(scales + 16 * p)));
}
inline __m256i scales16(const int8_t* scales, int p) {
  return _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(scales + 16 * p)));
}

// Per row sum over the 16 sub-blocks of 16 of scale_s * (x's sum over sub-block s) for the layouts
// with int8 scales per 16 in [pair][row][2] order (Q6_K_x8, Q3_K_x8); |sum| <= 16 * 128 * 16 * 127.
inline __m256i x8_scaled_bsums16(const int8_t* scales, const detail::block_q8_k& y) {
  __m256i summ = _mm256_setzero_si256();
  for (int p = 0; p < 8; ++p) {
    int32_t pair;
    std::memcpy(&pair, y.bsums + 2 * p, 4);  // [bsum_2p, bsum_2p+1]: the sums of x per 16
    const __m256i sc2 = scales16(scales, p);
    summ = _mm256_add_epi32(summ, _mm256_madd_epi16(sc2, _mm256_set1_epi32(pair)));
  }
  return summ;
}

// A byte shuffle that, within each row's [scale_2p, scale_2p+1] int16 pair (the layouts'
// [pair][row][2] scales widened to int16), copies the first (which 0) or the second (1) to
// both halves, so one madd applies one sub-block's scale to both of a row's int16 lanes.
inline __m256i scale_dup(int which) {
  const __m256i first = _mm256_setr_epi8(0, 1, 0, 1, 4, 5, 4, 5, 8, 9, 8, 9, 12, 13, 12, 13,  //
                                         0, 1, 0, 1, 4, 5, 4, 5, 8, 9, 8, 9, 12, 13, 12, 13);
  return _mm256_add_epi8(first, _mm256_set1_epi8(static_cast<char>(2 * which)));
}

// The two 4-bit halves of the quants of one x8 chunk (32 bytes: 4 of each row).
inline void x8_nibbles(const uint8_t* p, __m256i m4, __m256i* lo, __m256i* hi) {
  const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  *lo = _mm256_and_si256(q, m4);
  *hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
}

// The sub-block loop of the layouts in Q4_K_x8's nibble order with [pair][row][2] byte scales (Q4_K,
// Q5_K, IQ4_XS; x8_avx512.h's x8_scaled_sums is its AVX-512 form): per row and input b, the int32
// sum over one super-block of scale_s * (sub-block s's quants . x[b][i]). quants(k, &lo, &hi): chunk
// k's quants, 4 bytes of each row (low: elements 8k..8k+3, high: 8k+4..); scales(p): pair p's
// scales widened to int16 (scales16); prod(q, x4): int16 pair sums of a half-chunk against x's
// dword broadcast. W > 0: the products of W chunks add up in int16 before one madd with the
// sub-block's scale widens them (the caller's bound); W = 0: each half widens on its own. U chunks
// are unpacked before the loop over inputs (U = W: one int16 chain per input, no running sums).
// NOTE: Q5_K wants U = 2: with U = 1 its 4 inputs' running int16 sums no longer fit the 16 ymm
// registers (prefill 10-15% slower at kernel level).
template <int B, int W, int U, class Quants, class Scales, class Prod>
inline void x8_subblock_sums(Quants quants, Scales scales, Prod prod, const block_q8_k* const* x, int64_t i,
                             __m256i* sumi) {
  static_assert((W == 0 && U == 1) || (W > 0 && 4 % W == 0 && W % U == 0));
  const __m256i dup_a = scale_dup(0), dup_b = scale_dup(1);
  for (int b = 0; b < B; ++b) sumi[b] = _mm256_setzero_si256();
#pragma GCC unroll 4
  for (int p = 0; p < 4; ++p) {
    const __m256i sc = scales(p);
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
      const __m256i scale = _mm256_shuffle_epi8(sc, h ? dup_b : dup_a);
      const int s = 2 * p + h;  // sub-block: chunks 4s .. 4s + 3
      __m256i acc16[B];
#pragma GCC unroll 4
      for (int k0 = 4 * s; k0 < 4 * s + 4; k0 += U) {
        __m256i lo[U], hi[U];
        for (int u = 0; u < U; ++u) quants(k0 + u, &lo[u], &hi[u]);
        for (int b = 0; b < B; ++b) {
          const int8_t* xq = x[b][i].qs + 8 * k0;
          if constexpr (W == 0) {
            const __m256i pl = prod(lo[0], bcast4(xq)), ph = prod(hi[0], bcast4(xq + 4));
            sumi[b] = _mm256_add_epi32(sumi[b], _mm256_add_epi32(_mm256_madd_epi16(pl, scale), _mm256_madd_epi16(ph, scale)));
          } else {
            __m256i p16 = _mm256_add_epi16(prod(lo[0], bcast4(xq)), prod(hi[0], bcast4(xq + 4)));
            for (int u = 1; u < U; ++u) {
              p16 = _mm256_add_epi16(p16, prod(lo[u], bcast4(xq + 8 * u)));
              p16 = _mm256_add_epi16(p16, prod(hi[u], bcast4(xq + 8 * u + 4)));
            }
            if constexpr (U == W) sumi[b] = _mm256_add_epi32(sumi[b], _mm256_madd_epi16(p16, scale));
            else acc16[b] = k0 % W == 0 ? p16 : _mm256_add_epi16(acc16[b], p16);
          }
        }
        if constexpr (W > 0 && U < W) {
          if ((k0 + U) % W == 0)
            for (int b = 0; b < B; ++b) sumi[b] = _mm256_add_epi32(sumi[b], _mm256_madd_epi16(acc16[b], scale));
        }
      }
    }
  }
}

// maddubs as x8_subblock_sums' prod: unsigned quants against signed x.
struct prod_maddubs {
  __m256i operator()(__m256i q, __m256i x4) const { return _mm256_maddubs_epi16(q, x4); }
};

// out[b * 8 + r] = dot(row r of the group, x[b]) for B Q8_0 inputs; per (row, input) exactly
// detail::dot_q8_0_x8_scalar's float operations. Per 4-element chunk k: one 32-byte load
// holds 4 weights of each row, against the input's 4 bytes broadcast; the sign trick
// (maddubs takes one unsigned operand) and one madd leave each row's exact int32 in its lane.
template <int B>
void mk_q8_0_x8_avx2(const uint8_t* group, const uint8_t* const* xb, int64_t n, float* out, const uint8_t* next) {
  x8_blocks<block_q8_0x8, block_q8_0x, B>(group, xb, n / qk8_0, out, next, [](const block_q8_0x8& blk, const block_q8_0x* const* x, int64_t i, __m256* acc) {
    const __m256i ones = _mm256_set1_epi16(1);
    __m256i sumi[B];
    for (int b = 0; b < B; ++b) sumi[b] = _mm256_setzero_si256();
#pragma GCC unroll 8
    for (int k = 0; k < 8; ++k) {
      const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk.qs + 32 * k));
      const __m256i aq = _mm256_sign_epi8(q, q);
      for (int b = 0; b < B; ++b) {
        const __m256i p16 = _mm256_maddubs_epi16(aq, _mm256_sign_epi8(bcast4(x[b][i].qs + 4 * k), q));
        sumi[b] = _mm256_add_epi32(sumi[b], _mm256_madd_epi16(p16, ones));
      }
    }
    const __m256 d = load_d8(blk.d);
    for (int b = 0; b < B; ++b) acc[b] = fma_block(d, x[b][i].d, sumi[b], acc[b]);
  });
}

// The end of one Q4_K_x8 super-block: per row the mins' dot with x's sub-block sums, then
// acc += (d * y.d) * sumi and acc -= (dmin * y.d) * summ (the scalar definition's two fmas).
struct q4_k_x8_tail {
  __m256i mins[4];  // [pair][row][2] widened to int16
  __m256 d, dmin;
  // Blk: block_q4_kx8 or block_q5_kx8 (the same d, dmin and mins).
  template <class Blk>
  explicit q4_k_x8_tail(const Blk& blk) {
    for (int p = 0; p < 4; ++p) mins[p] = scales16(blk.mins, p);
    d = load_d8(blk.d);
    dmin = load_d8(blk.dmin);
  }
  // sumi: the 8 rows' scaled quant sums for input y.
  __m256 apply(const block_q8_k& y, __m256i sumi, __m256 acc) const {
    // Mins: per row sum over pairs p of [m_2p, m_2p+1] . [S_2p, S_2p+1], S_s the sub-block
    // sums of x (its bsums per 16, added in pairs: |S| <= 32 * 127, exact in int16). The
    // packs leave dwords 0, 1 | 4, 5 holding [S_0, S_1], [S_2, S_3] | [S_4, S_5], [S_6, S_7].
    const __m256i bs = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(y.bsums));
    const __m256i s16 = _mm256_madd_epi16(bs, _mm256_set1_epi16(1));
    const __m256i pairs = _mm256_packs_epi32(s16, s16);
    __m256i summ = _mm256_setzero_si256();
    for (int p = 0; p < 4; ++p) {
      const __m256i pair = _mm256_permutevar8x32_epi32(pairs, _mm256_set1_epi32(p < 2 ? p : p + 2));
      summ = _mm256_add_epi32(summ, _mm256_madd_epi16(mins[p], pair));
    }
    const __m256 yd = _mm256_set1_ps(y.d);
    acc = _mm256_fmadd_ps(_mm256_mul_ps(d, yd), _mm256_cvtepi32_ps(sumi), acc);
    return _mm256_fnmadd_ps(_mm256_mul_ps(dmin, yd), _mm256_cvtepi32_ps(summ), acc);
  }
};

// out[b * 8 + r] = dot(row r of the group, x[b]) for B inputs; per (row, input) exactly
// detail::dot_q4_k_x8_scalar's float operations (its integer sums are exact whatever the
// lane layout). `next` (may be null) is prefetched at this group's pace: block i's bytes
// from next + i * sizeof(block), i.e. a fixed distance ahead in the group's linear stream.
// Per 8-element chunk k: one 32-byte load holds 4 bytes of each row; its low nibbles are
// elements 8k..8k+3, its high nibbles 8k+4..8k+7, against the input's 4 bytes broadcast,
// so maddubs gives each row two int16 lanes. Four chunks (one 32-element sub-block, 16
// elements per lane: |sum| <= 16 * 15 * 127 < 2^15) accumulate in int16, then one madd with
// the row's scale widens to int32.
template <int B>
void mk_q4_k_x8_avx2(const uint8_t* group, const uint8_t* const* xb, int64_t n, float* out, const uint8_t* next) {
  x8_blocks<block_q4_kx8, block_q8_k, B>(group, xb, n / qk_k, out, next, [](const block_q4_kx8& blk, const block_q8_k* const* x, int64_t i, __m256* acc) {
    __m256i sumi[B];
    x8_subblock_sums<B, 4, 1>([&blk](int k, __m256i* lo, __m256i* hi) { x8_nibbles(blk.qs + 32 * k, _mm256_set1_epi8(0xF), lo, hi); },
                           [&blk](int p) { return scales16(blk.scales, p); }, prod_maddubs{}, x, i, sumi);
    const q4_k_x8_tail tail(blk);
    for (int b = 0; b < B; ++b) acc[b] = tail.apply(x[b][i], sumi[b], acc[b]);
  });
}

// The end of one Q6_K_x8 super-block for input y: the +32 of the stored quants comes off as
// 32 * (scales . x's sums per 16), exact in int32, then acc += (d * y.d) * total (one fma).
inline __m256 q6_k_x8_tail(const block_q6_kx8& blk, __m256 d, const block_q8_k& y, __m256i sumi, __m256 acc) {
  const __m256i total = _mm256_sub_epi32(sumi, _mm256_slli_epi32(x8_scaled_bsums16(blk.scales, y), 5));
  return fma_block(d, y.d, total, acc);
}

// The end of one Q3_K_x8 super-block for input y (both ISAs' kernels): the + 4 of the stored quants
// comes off as 4 * (scales . x's sums per 16), exact in int32, then acc += (d * y.d) * isum as a
// multiply and an add, no fma: dot_q3_k_scalar's float step, so the file layout's bits.
inline __m256 q3_k_x8_tail(const block_q3_kx8& blk, __m256 d, const block_q8_k& y, __m256i sumi, __m256 acc) {
  const __m256i isum = _mm256_sub_epi32(sumi, _mm256_slli_epi32(x8_scaled_bsums16(blk.scales, y), 2));
  return _mm256_add_ps(acc, _mm256_mul_ps(_mm256_mul_ps(d, _mm256_set1_ps(y.d)), _mm256_cvtepi32_ps(isum)));
}

// out[b * 8 + r] = dot(row r of the group, x[b]) for B Q8_K inputs; per (row, input) exactly
// detail::dot_q6_k_x8_scalar's float operations. Per pair of 8-element chunks (one 16-element
// sub-block of every row): two ql loads give the low 4 bits of 4 x 4 elements per row as in
// mk_q4_k_x8_avx2, one qh load their high 2 bits; the unsigned quants (value + 32, < 64) go
// through maddubs in two int16 sums of 8 products each (|sum| <= 8 * 63 * 127 < 2^15), each
// widened by one madd with the row's scale. The +32 is taken off once per super-block with
// the scaled sums of x per 16 (Q8_K's bsums).
template <int B>
void mk_q6_k_x8_avx2(const uint8_t* group, const uint8_t* const* xb, int64_t n, float* out, const uint8_t* next) {
  x8_blocks<block_q6_kx8, block_q8_k, B>(group, xb, n / qk_k, out, next, [](const block_q6_kx8& blk, const block_q8_k* const* x, int64_t i, __m256* acc) {
    const __m256i m4 = _mm256_set1_epi8(0xF), m30 = _mm256_set1_epi8(0x30);
    const __m256i dup_a = scale_dup(0), dup_b = scale_dup(1);
    __m256i sumi[B];
    for (int b = 0; b < B; ++b) sumi[b] = _mm256_setzero_si256();
#pragma GCC unroll 2
    for (int c = 0; c < 16; ++c) {
      const __m256i scale = _mm256_shuffle_epi8(scales16(blk.scales, c / 2), c % 2 ? dup_b : dup_a);
      const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk.qh + 32 * c));
      __m256i lo0, hi0, lo1, hi1;
      x8_nibbles(blk.ql + 64 * c, m4, &lo0, &hi0);
      x8_nibbles(blk.ql + 64 * c + 32, m4, &lo1, &hi1);
      // NOTE: 16-bit shifts move bits across bytes, but the 0x30 mask keeps only each byte's own.
      lo0 = _mm256_or_si256(lo0, _mm256_and_si256(_mm256_slli_epi16(h, 4), m30));
      hi0 = _mm256_or_si256(hi0, _mm256_and_si256(_mm256_slli_epi16(h, 2), m30));
      lo1 = _mm256_or_si256(lo1, _mm256_and_si256(h, m30));
      hi1 = _mm256_or_si256(hi1, _mm256_and_si256(_mm256_srli_epi16(h, 2), m30));
      for (int b = 0; b < B; ++b) {
        const int8_t* xq = x[b][i].qs + 16 * c;
        const __m256i pa = _mm256_add_epi16(_mm256_maddubs_epi16(lo0, bcast4(xq)), _mm256_maddubs_epi16(hi0, bcast4(xq + 4)));
        const __m256i pb = _mm256_add_epi16(_mm256_maddubs_epi16(lo1, bcast4(xq + 8)), _mm256_maddubs_epi16(hi1, bcast4(xq + 12)));
        sumi[b] = _mm256_add_epi32(sumi[b], _mm256_add_epi32(_mm256_madd_epi16(pa, scale), _mm256_madd_epi16(pb, scale)));
      }
    }
    const __m256 d = load_d8(blk.d);
    for (int b = 0; b < B; ++b) acc[b] = q6_k_x8_tail(blk, d, x[b][i], sumi[b], acc[b]);
  });
}

}  // namespace agentq::kernels::avx2
#endif
