// Private to kernels/cpu: AVX2 kernels of the Q4_0 (_x16), Q5_K, IQ4_XS and Q3_K (_x8) layouts
// (block_q4_0x16, block_q5_kx8, block_iq4_xsx8, block_q3_kx8), in the form of x8_avx2.h's: one group of 16 or
// 8 rows against B inputs, each row's sum in its own lane, for decode and prefill. AVX-512 VNNI
// builds run x8_more_avx512.h's forms instead; both give the bits of the scalar definitions
// (repack_more.cpp): the integer sums are exact and the float steps per (row, input) the same.
// Each runs in x8_blocks (x8_avx2.h), the frame of accumulators, block loop, prefetch and store; Q5_K
// and IQ4_XS run their sub-blocks in x8_subblock_sums (x8_avx2.h, as Q4_K_x8), and the chunk
// products, scales and float tails come from x8_avx2.h's helpers.
// NOTE: maddubs saturates int16 pair sums, so each kernel says where its partial sums widen.
#pragma once
#include "cpu/x8_avx2.h"

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
namespace agentq::kernels::avx2 {

// out[b * 16 + r] = dot(row r of the group of 16, x[b]) for B Q8_0 inputs (each followed by 8 *
// its block sums, add_q8_0_sums); per (row, input) exactly detail::dot_q4_0_x16_scalar's float
// operations. Per block and half (rows 0-7, then 8-15): four 32-byte loads (chunk k: 4 bytes of
// each of the 8 rows), the unsigned nibbles against x's dwords 2k / 2k + 1 broadcast; the 8
// maddubs add up in int16 (16 products per lane: |sum| <= 16 * 15 * 127 < 2^15), one madd widens,
// 8 * sum(x) comes off, one fma for the 8 rows.
template <int B>
void mk_q4_0_x16_avx2(const uint8_t* group, const uint8_t* const* xb, int64_t n, float* out, const uint8_t* next) {
  const int64_t nb = n / qk8_0;
  // NOTE: the body captures only nb and makes its constants itself (hoisted out of the loop):
  // with vector constants and the sums' pointers captured, this kernel ran 15-20% slower.
  x8_blocks<block_q4_0x16, block_q8_0x, B, ymm_pair>(group, xb, nb, out, next, [nb](const block_q4_0x16& blk, const block_q8_0x* const* x, int64_t i, ymm_pair* acc) {
    const __m256i m4 = _mm256_set1_epi8(0xF), ones = _mm256_set1_epi16(1);
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
      __m256i lo[4], hi[4];
      for (int k = 0; k < 4; ++k) x8_nibbles(blk.qs + 64 * k + 32 * h, m4, &lo[k], &hi[k]);
      const __m256 d = load_d8(blk.d + 8 * h);
      for (int b = 0; b < B; ++b) {
        const int8_t* xq = x[b][i].qs;
        const __m256i p16 =
            _mm256_add_epi16(maddubs4(lo[0], hi[0], lo[1], hi[1], xq), maddubs4(lo[2], hi[2], lo[3], hi[3], xq + 16));
        const int32_t xsum8 = reinterpret_cast<const int32_t*>(x[b] + nb)[i];  // 8 * sum(x's block i)
        const __m256i s = _mm256_sub_epi32(_mm256_madd_epi16(p16, ones), _mm256_set1_epi32(xsum8));
        acc[b].h[h] = fma_block(d, x[b][i].d, s, acc[b].h[h]);
      }
    }
  });
}

// Bit j of the 32-bit mask at p as byte j: 16 where set, 0 where not (Q5_K_x8's fifth bits of
// one chunk: qh[L][low / high] holds chunks 2L and 2L + 1 as its two dwords).
inline __m256i fifth_bits(const uint64_t* qh, int half) {
  uint32_t m;
  std::memcpy(&m, reinterpret_cast<const uint8_t*>(qh) + 4 * half, 4);
  const __m256i spread = _mm256_setr_epi64x(0, 0x0101010101010101, 0x0202020202020202, 0x0303030303030303);
  const __m256i bit = _mm256_set1_epi64x(int64_t(0x8040201008040201));
  const __m256i v = _mm256_and_si256(_mm256_shuffle_epi8(_mm256_set1_epi32(int32_t(m)), spread), bit);
  return _mm256_and_si256(_mm256_cmpeq_epi8(v, bit), _mm256_set1_epi8(16));
}

// As mk_q4_k_x8_avx2 with 5-bit quants (< 32): two chunks' products add up in int16 (8 per
// lane: |sum| <= 8 * 31 * 127 < 2^15), so a sub-block widens in two madds with its scale; the
// mins and the float tail are Q4_K_x8's (q4_k_x8_tail).
template <int B>
void mk_q5_k_x8_avx2(const uint8_t* group, const uint8_t* const* xb, int64_t n, float* out, const uint8_t* next) {
  x8_blocks<block_q5_kx8, block_q8_k, B>(group, xb, n / qk_k, out, next, [](const block_q5_kx8& blk, const block_q8_k* const* x, int64_t i, __m256* acc) {
    // Chunk k: its nibbles, the fifth bits from dword k % 2 of qh[k / 2] (low / high nibbles' masks).
    auto quants = [&blk](int k, __m256i* lo, __m256i* hi) {
      x8_nibbles(blk.qs + 32 * k, _mm256_set1_epi8(0xF), lo, hi);
      *lo = _mm256_or_si256(*lo, fifth_bits(blk.qh[k / 2] + 0, k % 2));
      *hi = _mm256_or_si256(*hi, fifth_bits(blk.qh[k / 2] + 1, k % 2));
    };
    __m256i sumi[B];
    x8_subblock_sums<B, 2, 2>(quants, [&blk](int p) { return scales16(blk.scales, p); }, prod_maddubs{}, x, i, sumi);
    const q4_k_x8_tail tail(blk);
    for (int b = 0; b < B; ++b) acc[b] = tail.apply(x[b][i], sumi[b], acc[b]);
  });
}

// As mk_q4_k_x8_avx2 with IQ4_NL's values: a pshufb of each nibble through the value table, then
// maddubs on |value| against x carrying the value's sign (|x| <= 127: a pair of products is below
// 2^15, but not four), so every maddubs widens by one madd with the rows' signed scales; no
// offset to take off, the float tail one fma.
template <int B>
void mk_iq4_xs_x8_avx2(const uint8_t* group, const uint8_t* const* xb, int64_t n, float* out, const uint8_t* next) {
  const __m256i table = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(detail::kvalues_iq4nl)));
  x8_blocks<block_iq4_xsx8, block_q8_k, B>(group, xb, n / qk_k, out, next, [=](const block_iq4_xsx8& blk, const block_q8_k* const* x, int64_t i, __m256* acc) {
    auto quants = [&blk, table](int k, __m256i* lo, __m256i* hi) {
      x8_nibbles(blk.qs + 32 * k, _mm256_set1_epi8(0xF), lo, hi);
      *lo = _mm256_shuffle_epi8(table, *lo);
      *hi = _mm256_shuffle_epi8(table, *hi);
    };
    // maddubs on |value| against x carrying the value's sign.
    auto prod = [](__m256i q, __m256i x4) { return _mm256_maddubs_epi16(_mm256_sign_epi8(q, q), _mm256_sign_epi8(x4, q)); };
    __m256i sumi[B];
    x8_subblock_sums<B, 0, 1>(quants, [&blk](int p) { return scales16(blk.scales, p); }, prod, x, i, sumi);
    const __m256 d = load_d8(blk.d);
    for (int b = 0; b < B; ++b) acc[b] = fma_block(d, x[b][i].d, sumi[b], acc[b]);
  });
}

// Bit K of each byte of h moved to bit 2 (4 where set, 0 where not).
// NOTE: 16-bit shifts move bits across bytes, but the mask keeps only each byte's own bit.
template <int K>
inline __m256i bit_as_4(__m256i h) {
  const __m256i m4 = _mm256_set1_epi8(4);
  if constexpr (K < 2) return _mm256_and_si256(_mm256_slli_epi16(h, 2 - K), m4);
  else if constexpr (K == 2) return _mm256_and_si256(h, m4);
  else return _mm256_and_si256(_mm256_srli_epi16(h, K - 2), m4);
}

// Sub-block 2p + S of a Q3_K_x8 super-block against B inputs: the 2-bit plane's 32 bytes (4
// elements of each row per 2-bit field f) with the high bits (bit 4S + f of the pair's h) as + 4,
// four maddubs of the unsigned quants (0..7) against x's dwords 4c + f add up in int16 (8
// products per lane: |sum| <= 8 * 7 * 127 < 2^15), one madd with the rows' scales widens.
template <int S, int B>
inline void q3_k_x8_sub(const block_q3_kx8& blk, int p, __m256i h, __m256i sc2, const block_q8_k* const* x, int64_t i,
                        __m256i* sumi) {
  const int c = 2 * p + S;
  const __m256i m3 = _mm256_set1_epi8(3);
  const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk.ql + 32 * c));
  const __m256i q0 = _mm256_or_si256(_mm256_and_si256(v, m3), bit_as_4<4 * S>(h));
  const __m256i q1 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(v, 2), m3), bit_as_4<4 * S + 1>(h));
  const __m256i q2 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(v, 4), m3), bit_as_4<4 * S + 2>(h));
  const __m256i q3 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(v, 6), m3), bit_as_4<4 * S + 3>(h));
  const __m256i scale = _mm256_shuffle_epi8(sc2, scale_dup(S));
  for (int b = 0; b < B; ++b) sumi[b] = _mm256_add_epi32(sumi[b], _mm256_madd_epi16(maddubs4(q0, q1, q2, q3, x[b][i].qs + 16 * c), scale));
}

// out[b * 8 + r] = dot(row r of the group, x[b]) for B Q8_K inputs; per (row, input) exactly
// detail::dot_q3_k_x8_scalar's operations, which are dot_q3_k_scalar's: the 16 sub-blocks by
// q3_k_x8_sub over the quants + 4, then 4 * (scales . x's sums per 16) off in int32 and acc +=
// (d * y.d) * isum as a multiply and an add (no fma), so the file layout's bits.
template <int B>
void mk_q3_k_x8_avx2(const uint8_t* group, const uint8_t* const* xb, int64_t n, float* out, const uint8_t* next) {
  x8_blocks<block_q3_kx8, block_q8_k, B>(group, xb, n / qk_k, out, next, [](const block_q3_kx8& blk, const block_q8_k* const* x, int64_t i, __m256* acc) {
    __m256i sumi[B];
    for (int b = 0; b < B; ++b) sumi[b] = _mm256_setzero_si256();
#pragma GCC unroll 2
    for (int p = 0; p < 8; ++p) {
      const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk.qh + 32 * p));
      const __m256i sc2 = scales16(blk.scales, p);
      q3_k_x8_sub<0, B>(blk, p, h, sc2, x, i, sumi);
      q3_k_x8_sub<1, B>(blk, p, h, sc2, x, i, sumi);
    }
    const __m256 d = load_d8(blk.d);
    for (int b = 0; b < B; ++b) acc[b] = q3_k_x8_tail(blk, d, x[b][i], sumi[b], acc[b]);
  });
}

}  // namespace agentq::kernels::avx2
#endif
