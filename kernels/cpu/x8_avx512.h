// Private to kernels/cpu: AVX-512 VNNI forms of the _x8 kernels (x8_avx2.h), used where the
// build targets AVX-512 BW + VNNI (e.g. Zen 4/5, Ice Lake and later). Same layouts, same
// results bit for bit: the integer sums are exact whatever instructions form them, and the
// float operations per (row, input) are the AVX2 kernels' (the scalar definitions in repack.cpp).
// NOTE: why: the AVX2 Q4_K kernel spends ~9 vector ops per 32 weight bytes; here one 64-byte
// load covers two chunks and vpdpbusd multiplies, sums and accumulates in one op (~4 per 32
// bytes). Batched (prefill) work is compute-bound and gains (Zen 5, 110M pp512: Q4_K x1.30,
// Q8_0 x1.50); batch-1 decode was already memory-bound and does not change.
#pragma once
#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VNNI__) && defined(__AVX2__) && \
    defined(__FMA__) && defined(__F16C__)
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "agentq/kernels.h"
#include "cpu/quants_internal.h"
#include "cpu/x8_avx2.h"

#define AGENTQ_KERNELS_AVX512VNNI 1

namespace agentq::kernels::avx512 {

using avx2::prefetch_block;
using detail::block_q8_0x;
using detail::block_q8_k;

// Dwords [a, a, a, a, a, a, a, a, b, b, b, b, b, b, b, b]: a permutexvar index that sends dword
// a of the input's 16 bytes to the lanes of chunk k (low 256 bits: 8 rows x 4 bytes) and
// dword b to those of chunk k + 1 (high 256 bits).
inline __m512i pick2(int a, int b) {
  return _mm512_mask_blend_epi32(0xFF00, _mm512_set1_epi32(a), _mm512_set1_epi32(b));
}

// The layouts' scales of a sub-block pair, widened to int32 lanes [row][2]: a permutexvar
// index that picks the first (odd 0) or second (1) sub-block's 8 rows into both halves.
inline __m512i scale_pick(int odd) {
  return _mm512_add_epi32(_mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 0, 2, 4, 6, 8, 10, 12, 14), _mm512_set1_epi32(odd));
}

// The first 8 bytes at p as dwords 0, 1 (the rest zero).
inline __m512i load_x8(const int8_t* p) {
  return _mm512_zextsi128_si512(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
}
// The first 16 bytes at p as dwords 0..3 (the rest zero).
inline __m512i load_x16(const int8_t* p) {
  return _mm512_zextsi128_si512(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

// The 8 rows' int32 sums: the low and high 256 bits hold the even and odd chunks' partial sums.
inline __m256i fold(__m512i v) { return _mm256_add_epi32(_mm512_castsi512_si256(v), _mm512_extracti64x4_epi64(v, 1)); }

// As avx2::mk_q8_0_x8_avx2. Per pair of 4-element chunks (one 64-byte load: 4 weights of each
// row per chunk): |w| against x carrying w's sign (a masked negate, AVX-512 has no vpsignb),
// one vpdpbusd into each row's int32 lanes.
template <int B>
void mk_q8_0_x8(const uint8_t* group, const uint8_t* const* xb, int64_t n, float* out, const uint8_t* next) {
  auto w = reinterpret_cast<const block_q8_0x8*>(group);
  const block_q8_0x* x[B];
  for (int b = 0; b < B; ++b) x[b] = reinterpret_cast<const block_q8_0x*>(xb[b]);
  const __m512i pick = pick2(0, 1), zero = _mm512_setzero_si512();
  __m256 acc[B];
  for (int b = 0; b < B; ++b) acc[b] = _mm256_setzero_ps();
  for (int64_t i = 0; i < n / qk8_0; ++i) {
    const block_q8_0x8& blk = w[i];
    if (next) prefetch_block(next + i * int64_t(sizeof(block_q8_0x8)), int(sizeof(block_q8_0x8)));
    __m512i sumi[B];
    for (int b = 0; b < B; ++b) sumi[b] = _mm512_setzero_si512();
#pragma GCC unroll 4
    for (int k = 0; k < 8; k += 2) {
      const __m512i q = _mm512_loadu_si512(blk.qs + 32 * k);
      const __m512i aq = _mm512_abs_epi8(q);
      const __mmask64 neg = _mm512_movepi8_mask(q);
      for (int b = 0; b < B; ++b) {
        const __m512i xv = _mm512_permutexvar_epi32(pick, load_x8(x[b][i].qs + 4 * k));
        sumi[b] = _mm512_dpbusd_epi32(sumi[b], aq, _mm512_mask_sub_epi8(xv, neg, zero, xv));
      }
    }
    const __m256 d = avx2::load_d8(blk.d);
    for (int b = 0; b < B; ++b)
      acc[b] = _mm256_fmadd_ps(_mm256_mul_ps(d, _mm256_set1_ps(x[b][i].d)), _mm256_cvtepi32_ps(fold(sumi[b])), acc[b]);
  }
  for (int b = 0; b < B; ++b) _mm256_storeu_ps(out + 8 * b, acc[b]);
}

// Two groups side by side (16 rows: lane r < 8 is row r of g0, lane 8 + r row r of g1) against
// B Q8_0 inputs whose quants were biased by +128 (x ^ 0x80, unsigned: q8_0_bias_activations),
// for few inputs (a verify pass). out[b * 16 + lane]. Per 4-element chunk k one 64-byte vector
// holds both groups' chunk k, and each input's 4 bytes are one broadcast load: one vpdpbusd per
// input per chunk, no per-input permute or sign fix-up (mk_q8_0_x8 spends 3 more ops there).
// The bias comes off exactly: sum (x + 128) w = sum x w + 128 sum w, and sum w per row per
// block is one vpdpbusd against ones per chunk, shared by the B inputs. The float steps per
// (row, input) are mk_q8_0_x8's (d_w * d_x, then one fma), so the same bits.
template <int B>
void mk_q8_0_x8_pair(const uint8_t* g0, const uint8_t* g1, const uint8_t* const* xb, int64_t n, float* out,
                     const uint8_t* next0, const uint8_t* next1) {
  auto w0 = reinterpret_cast<const block_q8_0x8*>(g0);
  auto w1 = reinterpret_cast<const block_q8_0x8*>(g1);
  const block_q8_0x* x[B];
  for (int b = 0; b < B; ++b) x[b] = reinterpret_cast<const block_q8_0x*>(xb[b]);
  const __m512i ones = _mm512_set1_epi8(1);
  __m512 acc[B];
  for (int b = 0; b < B; ++b) acc[b] = _mm512_setzero_ps();
  for (int64_t i = 0; i < n / qk8_0; ++i) {
    if (next0) {
      prefetch_block(next0 + i * int64_t(sizeof(block_q8_0x8)), int(sizeof(block_q8_0x8)));
      prefetch_block(next1 + i * int64_t(sizeof(block_q8_0x8)), int(sizeof(block_q8_0x8)));
    }
    __m512i sumi[B];
    for (int b = 0; b < B; ++b) sumi[b] = _mm512_setzero_si512();
    __m512i wsum = _mm512_setzero_si512();
#pragma GCC unroll 8
    for (int k = 0; k < 8; ++k) {
      const __m512i q = _mm512_inserti64x4(
          _mm512_zextsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(w0[i].qs + 32 * k))),
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w1[i].qs + 32 * k)), 1);
      wsum = _mm512_dpbusd_epi32(wsum, ones, q);
      for (int b = 0; b < B; ++b) {
        int32_t xv;
        std::memcpy(&xv, x[b][i].qs + 4 * k, 4);
        sumi[b] = _mm512_dpbusd_epi32(sumi[b], _mm512_set1_epi32(xv), q);
      }
    }
    const __m512i bias = _mm512_slli_epi32(wsum, 7);
    const __m512 d = _mm512_cvtph_ps(_mm256_inserti128_si256(
        _mm256_zextsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w0[i].d))),
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(w1[i].d)), 1));
    for (int b = 0; b < B; ++b)
      acc[b] = _mm512_fmadd_ps(_mm512_mul_ps(d, _mm512_set1_ps(x[b][i].d)),
                               _mm512_cvtepi32_ps(_mm512_sub_epi32(sumi[b], bias)), acc[b]);
  }
  for (int b = 0; b < B; ++b) _mm512_storeu_ps(out + 16 * b, acc[b]);
}

// The 8 rows' int32 sums over one super-block of scale_s * (sub-block s's quants . x[b][i]), for
// the layouts in Q4_K_x8's nibble order with [pair][row][2] byte scales (Q4_K, Q5_K, IQ4_XS).
// quants(L, &lo, &hi): the unsigned quants of 64-byte load L (chunks 2L, 2L + 1) in its low and
// high nibbles' order; scales(p): pair p's 16 scales widened to int32 lanes [row][2]. Per load:
// the low quants against x's dwords [16L, 16L + 3] / [16L + 8, 16L + 11], the high ones against
// the next 4 of each, two vpdpbusd into int32 lanes [chunk parity][row]; per 32-element
// sub-block one multiply by the rows' scales (int32: the sums no longer fit int16's madd).
template <int B, class Quants, class Scales>
inline void x8_scaled_sums(Quants quants, Scales scales, const block_q8_k* const* x, int64_t i, __m512i* sumi) {
  const __m512i pick_lo = pick2(0, 2), pick_hi = pick2(1, 3);
  const __m512i sc_even = scale_pick(0), sc_odd = scale_pick(1);
  for (int b = 0; b < B; ++b) sumi[b] = _mm512_setzero_si512();
#pragma GCC unroll 4
  for (int p = 0; p < 4; ++p) {
    const __m512i sc = scales(p);
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {  // sub-block 2p + h: loads 4p + 2h, 4p + 2h + 1
      __m512i a32[B];
      for (int b = 0; b < B; ++b) a32[b] = _mm512_setzero_si512();
#pragma GCC unroll 2
      for (int L = 4 * p + 2 * h; L < 4 * p + 2 * h + 2; ++L) {
        __m512i lo, hi;
        quants(L, &lo, &hi);
        for (int b = 0; b < B; ++b) {
          const __m512i xv = load_x16(x[b][i].qs + 16 * L);
          a32[b] = _mm512_dpbusd_epi32(a32[b], lo, _mm512_permutexvar_epi32(pick_lo, xv));
          a32[b] = _mm512_dpbusd_epi32(a32[b], hi, _mm512_permutexvar_epi32(pick_hi, xv));
        }
      }
      const __m512i scale = _mm512_permutexvar_epi32(h ? sc_odd : sc_even, sc);
      for (int b = 0; b < B; ++b) sumi[b] = _mm512_add_epi32(sumi[b], _mm512_mullo_epi32(a32[b], scale));
    }
  }
}

// The low and high nibbles of 64 bytes.
inline void nibbles64(const uint8_t* p, __m512i* lo, __m512i* hi) {
  const __m512i q = _mm512_loadu_si512(p), m4 = _mm512_set1_epi8(0xF);
  *lo = _mm512_and_si512(q, m4);
  *hi = _mm512_and_si512(_mm512_srli_epi16(q, 4), m4);
}

// Pair p's 16 unsigned / signed byte scales as int32 lanes.
inline __m512i scales_u8(const uint8_t* scales, int p) {
  return _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(scales + 16 * p)));
}
inline __m512i scales_i8(const int8_t* scales, int p) {
  return _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(scales + 16 * p)));
}

// As avx2::mk_q4_k_x8_avx2, the sums by x8_scaled_sums.
template <int B>
void mk_q4_k_x8(const uint8_t* group, const uint8_t* const* xb, int64_t n, float* out, const uint8_t* next) {
  auto w = reinterpret_cast<const block_q4_kx8*>(group);
  const block_q8_k* x[B];
  for (int b = 0; b < B; ++b) x[b] = reinterpret_cast<const block_q8_k*>(xb[b]);
  __m256 acc[B];
  for (int b = 0; b < B; ++b) acc[b] = _mm256_setzero_ps();
  for (int64_t i = 0; i < n / qk_k; ++i) {
    const block_q4_kx8& blk = w[i];
    if (next) prefetch_block(next + i * int64_t(sizeof(block_q4_kx8)), int(sizeof(block_q4_kx8)));
    __m512i sumi[B];
    x8_scaled_sums<B>([&](int L, __m512i* lo, __m512i* hi) { nibbles64(blk.qs + 64 * L, lo, hi); },
                      [&](int p) { return scales_u8(blk.scales, p); }, x, i, sumi);
    // Mins and the float steps: exactly the AVX2 kernel's.
    const avx2::q4_k_x8_tail tail(blk);
    for (int b = 0; b < B; ++b) acc[b] = tail.apply(x[b][i], fold(sumi[b]), acc[b]);
  }
  for (int b = 0; b < B; ++b) _mm256_storeu_ps(out + 8 * b, acc[b]);
}

// acc += vpdpbusd(u, the 4 signed bytes at p broadcast to every dword), the broadcast folded into
// the instruction's memory operand ({1to16}). NOTE: inline asm because GCC emits a separate
// vpbroadcastd per input per chunk for _mm512_set1_epi32 here, and on Zen 5 that op costs what the
// vpdpbusd does (the pair kernel read slower than mk_q4_k_x8 with it).
inline void dpbusd_bcast(__m512i& acc, __m512i u, const int8_t* p) {
  __asm__("vpdpbusd %[m]%{1to16%}, %[u], %[acc]" : [acc] "+v"(acc) : [u] "v"(u), [m] "m"(*reinterpret_cast<const int32_t*>(p)));
}

// Two Q4_K_x8 groups side by side (16 rows: lane r < 8 is row r of g0, lane 8 + r row r of g1)
// against B Q8_K inputs, for few inputs (a verify pass); out[b * 16 + lane]. As mk_q8_0_x8_pair:
// per 8-element chunk k one 64-byte vector holds both groups' chunk k (its low nibbles elements
// 8k..8k+3 of each row, its high ones 8k+4..8k+7), and the input's dwords 2k / 2k + 1 are each
// one broadcast: two vpdpbusd per input per chunk for 16 rows, no per-input permute (mk_q4_k_x8
// spends a load and two permutes per input per two chunks for 8 rows). The scale multiply per
// sub-block and the mins' tail now serve 16 rows per op. spairs[b]: per super-block i, x[b]'s
// sub-block sums S_s (bsums added in pairs, exact in int16) as the 4 dwords [S_2p, S_2p+1]
// (q4_k_sub_sums), computed once per matmul instead of per group. Integer sums are exact and the
// float steps per (row, input) are q4_k_x8_tail's, so the bits are mk_q4_k_x8's.
template <int B>
void mk_q4_k_x8_pair(const uint8_t* g0, const uint8_t* g1, const uint8_t* const* xb, const int32_t* const* spairs,
                     int64_t n, float* out, const uint8_t* next0, const uint8_t* next1) {
  auto w0 = reinterpret_cast<const block_q4_kx8*>(g0);
  auto w1 = reinterpret_cast<const block_q4_kx8*>(g1);
  const block_q8_k* x[B];
  for (int b = 0; b < B; ++b) x[b] = reinterpret_cast<const block_q8_k*>(xb[b]);
  const __m512i m4 = _mm512_set1_epi8(0xF);
  // permutex2var indices: lanes 0-7 take g0's [row][2] scale of sub-block 2p + h, 8-15 g1's.
  const __m512i pick_even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i pick_odd = _mm512_add_epi32(pick_even, _mm512_set1_epi32(1));
  __m512 acc[B];
  for (int b = 0; b < B; ++b) acc[b] = _mm512_setzero_ps();
  for (int64_t i = 0; i < n / qk_k; ++i) {
    const block_q4_kx8& a = w0[i];
    const block_q4_kx8& c = w1[i];
    if (next0) {
      prefetch_block(next0 + i * int64_t(sizeof(block_q4_kx8)), int(sizeof(block_q4_kx8)));
      prefetch_block(next1 + i * int64_t(sizeof(block_q4_kx8)), int(sizeof(block_q4_kx8)));
    }
    __m512i sumi[B];
    for (int b = 0; b < B; ++b) sumi[b] = _mm512_setzero_si512();
#pragma GCC unroll 4
    for (int p = 0; p < 4; ++p) {
      const __m512i sa = scales_u8(a.scales, p), sc = scales_u8(c.scales, p);
#pragma GCC unroll 2
      for (int h = 0; h < 2; ++h) {
        const int s = 2 * p + h;  // sub-block: chunks 4s .. 4s + 3
        // NOTE: one accumulator chain per input: two (low / high nibbles, to hide vpdpbusd's
        // latency at few inputs) read slower at 4-8 inputs (registers), 1-3 inputs never come here.
        __m512i a32[B];
        for (int b = 0; b < B; ++b) a32[b] = _mm512_setzero_si512();
#pragma GCC unroll 4
        for (int k = 4 * s; k < 4 * s + 4; ++k) {
          const __m512i q = _mm512_inserti64x4(
              _mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(a.qs + 32 * k))),
              _mm256_loadu_si256(reinterpret_cast<const __m256i*>(c.qs + 32 * k)), 1);
          const __m512i lo = _mm512_and_si512(q, m4), hi = _mm512_and_si512(_mm512_srli_epi16(q, 4), m4);
          for (int b = 0; b < B; ++b) {
            dpbusd_bcast(a32[b], lo, x[b][i].qs + 8 * k);
            dpbusd_bcast(a32[b], hi, x[b][i].qs + 8 * k + 4);
          }
        }
        const __m512i scale = _mm512_permutex2var_epi32(sa, h ? pick_odd : pick_even, sc);
        for (int b = 0; b < B; ++b) sumi[b] = _mm512_add_epi32(sumi[b], _mm512_mullo_epi32(a32[b], scale));
      }
    }
    // Mins: per row sum over pairs p of [m_2p, m_2p+1] . [S_2p, S_2p+1] (one madd per pair).
    __m512i mins[4];
    for (int p = 0; p < 4; ++p)
      mins[p] = _mm512_inserti64x4(
          _mm512_castsi256_si512(_mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(a.mins + 16 * p)))),
          _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(c.mins + 16 * p))), 1);
    const __m512 d = _mm512_cvtph_ps(_mm256_inserti128_si256(
        _mm256_castsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(a.d))),
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(c.d)), 1));
    const __m512 dmin = _mm512_cvtph_ps(_mm256_inserti128_si256(
        _mm256_castsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(a.dmin))),
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(c.dmin)), 1));
    for (int b = 0; b < B; ++b) {
      const int32_t* sp = spairs[b] + 4 * i;
      __m512i summ = _mm512_madd_epi16(mins[0], _mm512_set1_epi32(sp[0]));
      for (int p = 1; p < 4; ++p) summ = _mm512_add_epi32(summ, _mm512_madd_epi16(mins[p], _mm512_set1_epi32(sp[p])));
      const __m512 yd = _mm512_set1_ps(x[b][i].d);
      acc[b] = _mm512_fmadd_ps(_mm512_mul_ps(d, yd), _mm512_cvtepi32_ps(sumi[b]), acc[b]);
      acc[b] = _mm512_fnmadd_ps(_mm512_mul_ps(dmin, yd), _mm512_cvtepi32_ps(summ), acc[b]);
    }
  }
  for (int b = 0; b < B; ++b) _mm512_storeu_ps(out + 16 * b, acc[b]);
}

// As avx2::mk_q6_k_x8_avx2. Per 16-element sub-block c (one 64-byte ql load: chunks 2c and
// 2c + 1, one 32-byte qh load into both halves): a per-half shift of qh (4 / 0 bits) lines up
// the high 2 bits of elements 16c + j / 16c + 8 + j with the low nibbles and, shifted 2 more,
// those of 16c + 4 + j / 16c + 12 + j with the high ones; two vpdpbusd against x's dwords,
// one multiply by the rows' (signed) scales.
template <int B>
void mk_q6_k_x8(const uint8_t* group, const uint8_t* const* xb, int64_t n, float* out, const uint8_t* next) {
  avx2::x8_blocks<block_q6_kx8, block_q8_k, B>(group, xb, n / qk_k, out, next, [](const block_q6_kx8& blk, const block_q8_k* const* x, int64_t i, __m256* acc) {
    const __m512i m4 = _mm512_set1_epi8(0xF), m30 = _mm512_set1_epi8(0x30);
    const __m512i h_shift = _mm512_mask_blend_epi32(0xFF00, _mm512_set1_epi16(4), _mm512_setzero_si512());
    const __m512i pick_lo = pick2(0, 2), pick_hi = pick2(1, 3);
    const __m512i sc_even = scale_pick(0), sc_odd = scale_pick(1);
    __m512i sumi[B];
    for (int b = 0; b < B; ++b) sumi[b] = _mm512_setzero_si512();
#pragma GCC unroll 2
    for (int c = 0; c < 16; ++c) {
      const __m512i sc = _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk.scales + 16 * (c / 2))));
      const __m512i scale = _mm512_permutexvar_epi32(c % 2 ? sc_odd : sc_even, sc);
      const __m512i q = _mm512_loadu_si512(blk.ql + 64 * c);
      const __m512i h = _mm512_sllv_epi16(_mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk.qh + 32 * c))), h_shift);
      // NOTE: 16-bit shifts move bits across bytes, but the 0x30 mask keeps only each byte's own.
      const __m512i lo = _mm512_ternarylogic_epi32(_mm512_and_si512(q, m4), h, m30, 0xF8);  // a | (b & c)
      const __m512i hi = _mm512_ternarylogic_epi32(_mm512_and_si512(_mm512_srli_epi16(q, 4), m4), _mm512_srli_epi16(h, 2), m30, 0xF8);
      for (int b = 0; b < B; ++b) {
        const __m512i xv = load_x16(x[b][i].qs + 16 * c);
        __m512i a32 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), lo, _mm512_permutexvar_epi32(pick_lo, xv));
        a32 = _mm512_dpbusd_epi32(a32, hi, _mm512_permutexvar_epi32(pick_hi, xv));
        sumi[b] = _mm512_add_epi32(sumi[b], _mm512_mullo_epi32(a32, scale));
      }
    }
    const __m256 d = avx2::load_d8(blk.d);
    for (int b = 0; b < B; ++b) acc[b] = avx2::q6_k_x8_tail(blk, d, x[b][i], fold(sumi[b]), acc[b]);
  });
}

}  // namespace agentq::kernels::avx512
#endif
