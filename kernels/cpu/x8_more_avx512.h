// Private to kernels/cpu: AVX-512 VNNI kernels of the Q4_0 (_x16), Q5_K, IQ4_XS and Q3_K (_x8) layouts
// (block_q4_0x16, block_q5_kx8, block_iq4_xsx8, block_q3_kx8), in the form of x8_avx512.h's: one group of 16
// or 8 rows against B inputs, the rows' sums in the lanes of one register, for decode and prefill,
// each in the group frame x8_blocks (x8_avx2.h) that the AVX2 kernels share.
// NOTE: vpdpbusd takes unsigned weights: Q4_0 and IQ4_XS run on value + 8 / value + 128, and the
// offset comes off exactly in int32 (8 * the block's sum of x; 128 * the scaled sums of x per
// sub-block), so the integer sums, and the bits, are those of the scalar definitions (repack_more.cpp).
#pragma once
#include <cstring>

#include "cpu/x8_avx512.h"

#if AGENTQ_KERNELS_AVX512VNNI
namespace agentq::kernels::avx512 {

// out[b * 16 + r] = dot(row r of the group of 16, x[b]) for B Q8_0 inputs (each followed by
// 8 * its block sums, add_q8_0_sums); per (row, input) exactly detail::dot_q4_0_x16_scalar's
// float operations. Per block: four 64-byte loads (chunk k: 4 bytes of each of the 16 rows), the
// unsigned nibbles against x's dwords 2k / 2k + 1 broadcast, eight vpdpbusd into the 16 rows'
// lanes, 8 * sum(x) off, one fma for all 16 rows.
template <int B>
void mk_q4_0_x16(const uint8_t* group, const uint8_t* const* xb, int64_t n, float* out, const uint8_t* next) {
  const int64_t nb = n / qk8_0;
  // NOTE: the body captures only nb (as avx2::mk_q4_0_x16_avx2's; with captured vector constants
  // and pointer arrays the 110M Q4_0 decode ran ~20% slower).
  avx2::x8_blocks<block_q4_0x16, block_q8_0x, B, __m512>(group, xb, nb, out, next, [nb](const block_q4_0x16& blk, const block_q8_0x* const* x, int64_t i, __m512* acc) {
    auto bcast4 = [](const int8_t* p) {
      int32_t v;
      std::memcpy(&v, p, 4);
      return _mm512_set1_epi32(v);
    };
    __m512i lo[4], hi[4];
    for (int k = 0; k < 4; ++k) nibbles64(blk.qs + 64 * k, &lo[k], &hi[k]);
    const __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk.d)));
    for (int b = 0; b < B; ++b) {
      const int8_t* xq = x[b][i].qs;
      __m512i a = _mm512_dpbusd_epi32(_mm512_setzero_si512(), lo[0], bcast4(xq));
      __m512i c = _mm512_dpbusd_epi32(_mm512_setzero_si512(), lo[1], bcast4(xq + 8));
      a = _mm512_dpbusd_epi32(a, hi[0], bcast4(xq + 4));
      c = _mm512_dpbusd_epi32(c, hi[1], bcast4(xq + 12));
      a = _mm512_dpbusd_epi32(a, lo[2], bcast4(xq + 16));
      c = _mm512_dpbusd_epi32(c, lo[3], bcast4(xq + 24));
      a = _mm512_dpbusd_epi32(a, hi[2], bcast4(xq + 20));
      c = _mm512_dpbusd_epi32(c, hi[3], bcast4(xq + 28));
      const int32_t xsum8 = reinterpret_cast<const int32_t*>(x[b] + nb)[i];  // 8 * sum(x's block i)
      const __m512i s = _mm512_sub_epi32(_mm512_add_epi32(a, c), _mm512_set1_epi32(xsum8));
      acc[b] = _mm512_fmadd_ps(_mm512_mul_ps(d, _mm512_set1_ps(x[b][i].d)), _mm512_cvtepi32_ps(s), acc[b]);
    }
  });
}

// As mk_q4_k_x8 (x8_avx512.h) with the fifth bits: per 64-byte load, its two byte masks add 16
// to the low / high nibbles they mark (|sub-block sum| <= 32 * 31 * 128, times a 6-bit scale: int32).
template <int B>
void mk_q5_k_x8(const uint8_t* group, const uint8_t* const* xb, int64_t n, float* out, const uint8_t* next) {
  avx2::x8_blocks<block_q5_kx8, block_q8_k, B>(group, xb, n / qk_k, out, next, [](const block_q5_kx8& blk, const block_q8_k* const* x, int64_t i, __m256* acc) {
    const __m512i v16 = _mm512_set1_epi8(16);
    auto quants = [&](int L, __m512i* lo, __m512i* hi) {
      nibbles64(blk.qs + 64 * L, lo, hi);
      *lo = _mm512_mask_add_epi8(*lo, _cvtu64_mask64(blk.qh[L][0]), *lo, v16);
      *hi = _mm512_mask_add_epi8(*hi, _cvtu64_mask64(blk.qh[L][1]), *hi, v16);
    };
    __m512i sumi[B];
    x8_scaled_sums<B>(quants, [&](int p) { return scales_u8(blk.scales, p); }, x, i, sumi);
    const avx2::q4_k_x8_tail tail(blk);
    for (int b = 0; b < B; ++b) acc[b] = tail.apply(x[b][i], fold(sumi[b]), acc[b]);
  });
}

// Per row sum over sub-blocks s of scale_s * (x's sum over sub-block s) for IQ4_XS_x8's signed
// scales ([pair][row][2]); |sum| <= 8 * 32 * 32 * 128, int32.
inline __m256i iq4_xs_x8_scaled_xsums(const block_iq4_xsx8& blk, const block_q8_k& y) {
  const __m256i bs = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(y.bsums));
  const __m256i s16 = _mm256_madd_epi16(bs, _mm256_set1_epi16(1));  // sub-block sums, |S| <= 32 * 128
  const __m256i pairs = _mm256_packs_epi32(s16, s16);  // dwords 0, 1 | 4, 5: [S0, S1], [S2, S3] | [S4, S5], [S6, S7]
  __m256i summ = _mm256_setzero_si256();
  for (int p = 0; p < 4; ++p) {
    const __m256i sc = avx2::scales16(blk.scales, p);
    const __m256i pair = _mm256_permutevar8x32_epi32(pairs, _mm256_set1_epi32(p < 2 ? p : p + 2));
    summ = _mm256_add_epi32(summ, _mm256_madd_epi16(sc, pair));
  }
  return summ;
}

// As mk_q4_k_x8 with IQ4_NL's values: a vpshufb of each nibble through the value table + 128
// (unsigned, 1..241) feeds vpdpbusd; per sub-block one multiply by the rows' signed scales
// (|sum| <= 32 * 241 * 128 * 32 * 8 < 2^31); 128 * the scaled sums of x come off per super-block.
// NOTE: GCC 12's _mm512_shuffle_i32x4 (as _mm512_broadcast_i32x4) passes an _mm512_undefined_epi32()
// merge source that -Wuninitialized reports once inlined; the value is never read (zmm_halves.h).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
template <int B>
void mk_iq4_xs_x8(const uint8_t* group, const uint8_t* const* xb, int64_t n, float* out, const uint8_t* next) {
  const __m512i t128 = _mm512_zextsi128_si512(
      _mm_xor_si128(_mm_loadu_si128(reinterpret_cast<const __m128i*>(detail::kvalues_iq4nl)), _mm_set1_epi8(char(0x80))));
  const __m512i table = _mm512_shuffle_i32x4(t128, t128, 0);
  avx2::x8_blocks<block_iq4_xsx8, block_q8_k, B>(group, xb, n / qk_k, out, next, [=](const block_iq4_xsx8& blk, const block_q8_k* const* x, int64_t i, __m256* acc) {
    auto quants = [&blk, table](int L, __m512i* lo, __m512i* hi) {
      nibbles64(blk.qs + 64 * L, lo, hi);
      *lo = _mm512_shuffle_epi8(table, *lo);
      *hi = _mm512_shuffle_epi8(table, *hi);
    };
    __m512i sumi[B];
    x8_scaled_sums<B>(quants, [&blk](int p) { return scales_i8(blk.scales, p); }, x, i, sumi);
    const __m256 d = avx2::load_d8(blk.d);
    for (int b = 0; b < B; ++b) {
      const __m256i total = _mm256_sub_epi32(fold(sumi[b]), _mm256_slli_epi32(iq4_xs_x8_scaled_xsums(blk, x[b][i]), 7));
      acc[b] = avx2::fma_block(d, x[b][i].d, total, acc[b]);
    }
  });
}
#pragma GCC diagnostic pop

// 32 bytes at p in both 256-bit halves.
// NOTE: not _mm512_broadcast_i64x4, whose undefined source GCC 12 reports as uninitialized.
inline __m512i both_halves(const uint8_t* p) {
  const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  return _mm512_inserti64x4(_mm512_zextsi256_si512(v), v, 1);
}

// As avx2::mk_q3_k_x8_avx2. Per 16-element sub-block c (pair p = c / 2, S = c % 2): the 2-bit
// plane's 32 bytes in both halves, shifted per half (fields 0 | 1, then 2 | 3: two 64-byte vectors
// in the chunk order of x8_scaled_sums), + 4 by a byte mask where the high bit (bit 4S + f of the
// pair's h, tested per half) is set; two vpdpbusd against x's dwords, one multiply by the rows'
// signed scales (|sum| <= 16 * 7 * 127 * 32: int32). The float tail is the AVX2 kernel's.
template <int B>
void mk_q3_k_x8(const uint8_t* group, const uint8_t* const* xb, int64_t n, float* out, const uint8_t* next) {
  auto halves16 = [](int lo, int hi) {
    return _mm512_mask_blend_epi32(0xFF00, _mm512_set1_epi16(short(lo)), _mm512_set1_epi16(short(hi)));
  };
  auto halves8 = [](int lo, int hi) {
    return _mm512_mask_blend_epi32(0xFF00, _mm512_set1_epi8(char(lo)), _mm512_set1_epi8(char(hi)));
  };
  const __m512i shift_a = halves16(0, 2), shift_b = halves16(4, 6);
  const __m512i bits_a[2] = {halves8(1, 2), halves8(16, 32)}, bits_b[2] = {halves8(4, 8), halves8(64, 128)};
  avx2::x8_blocks<block_q3_kx8, block_q8_k, B>(group, xb, n / qk_k, out, next, [=](const block_q3_kx8& blk, const block_q8_k* const* x, int64_t i, __m256* acc) {
    const __m512i m3 = _mm512_set1_epi8(3), four = _mm512_set1_epi8(4);
    const __m512i pick_a = pick2(0, 1), pick_b = pick2(2, 3);
    __m512i sumi[B];
    for (int b = 0; b < B; ++b) sumi[b] = _mm512_setzero_si512();
#pragma GCC unroll 2
    for (int c = 0; c < 16; ++c) {
      const int p = c / 2, S = c % 2;
      const __m512i h = both_halves(blk.qh + 32 * p);
      const __m512i sc = scales_i8(blk.scales, p);
      const __m512i scale = _mm512_permutexvar_epi32(scale_pick(S), sc);
      const __m512i v = both_halves(blk.ql + 32 * c);
      __m512i qa = _mm512_and_si512(_mm512_srlv_epi16(v, shift_a), m3);
      __m512i qb = _mm512_and_si512(_mm512_srlv_epi16(v, shift_b), m3);
      qa = _mm512_mask_add_epi8(qa, _mm512_test_epi8_mask(h, bits_a[S]), qa, four);
      qb = _mm512_mask_add_epi8(qb, _mm512_test_epi8_mask(h, bits_b[S]), qb, four);
      for (int b = 0; b < B; ++b) {
        const __m512i xv = load_x16(x[b][i].qs + 16 * c);
        __m512i a32 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), qa, _mm512_permutexvar_epi32(pick_a, xv));
        a32 = _mm512_dpbusd_epi32(a32, qb, _mm512_permutexvar_epi32(pick_b, xv));
        sumi[b] = _mm512_add_epi32(sumi[b], _mm512_mullo_epi32(a32, scale));
      }
    }
    const __m256 d = avx2::load_d8(blk.d);
    for (int b = 0; b < B; ++b) acc[b] = avx2::q3_k_x8_tail(blk, d, x[b][i], fold(sumi[b]), acc[b]);
  });
}

}  // namespace agentq::kernels::avx512
#endif
