// Private to kernels/cpu: AVX2 micro-kernels, R weight rows against B activation vectors
// (prefill and batched decode). Per (row, input) each performs exactly the float operations
// of the decode rows kernel of its format (rows_avx2.h), so batched and solo results are
// bit-identical; see matmul.cpp for the batch-invariance rule.
#pragma once
#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "agentq/hsum_avx2.h"
#include "agentq/kernels.h"
#include "cpu/quants_internal.h"
#include "cpu/simd_avx2.h"

namespace agentq::kernels::avx2 {

// Float formats, micro-kernel: R rows x B inputs, one accumulator register per (row, input)
// over the whole row: per pair exactly rows_float_avx2's operations (one FMA chain,
// hsum8, the scalar tail). Each weight vector is loaded (and converted) once for the B
// inputs and each input vector once for the R rows.
template <class L, int R, int B>
void mk_float_avx2(const uint8_t* w, size_t stride, const uint8_t* const* xb, int64_t n, float* out) {
  const uint8_t* wr[R];
  for (int r = 0; r < R; ++r) wr[r] = w + static_cast<size_t>(r) * stride;
  const float* x[B];
  for (int b = 0; b < B; ++b) x[b] = reinterpret_cast<const float*>(xb[b]);
  __m256 acc[R][B];
  for (int r = 0; r < R; ++r)
    for (int b = 0; b < B; ++b) acc[r][b] = _mm256_setzero_ps();
  const int64_t n8 = n / 8 * 8;
  for (int64_t j = 0; j < n8; j += 8) {
    // NOTE: keep wv and xv in registers (R x B accumulators + R + 1 <= 16): GCC otherwise
    // folds their loads into each FMA that uses them, and the loads, not the FMAs, then
    // bound the loop (F16 prefill 1.46x).
    __m256 wv[R];
    for (int r = 0; r < R; ++r) {
      wv[r] = L::v(wr[r], j);
      asm("" : "+x"(wv[r]));
    }
    for (int b = 0; b < B; ++b) {
      __m256 xv = _mm256_loadu_ps(x[b] + j);
      asm("" : "+x"(xv));
      for (int r = 0; r < R; ++r) acc[r][b] = _mm256_fmadd_ps(wv[r], xv, acc[r][b]);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int b = 0; b < B; ++b) {
      float tail = 0;
      for (int64_t jj = n8; jj < n; ++jj) tail += L::s(wr[r], jj) * x[b][jj];
      out[r * B + b] = hsum8(acc[r][b]) + tail;
    }
}

// Float formats, short rows (k_short_float_cols columns or fewer: a tiny model's 64-256): 8
// consecutive rows against n_x inputs (x_stride bytes apart), one input at a time; the 8 rows'
// accumulators are reduced together (hsum8x8: per row hsum8's additions) and stored as one
// vector y[b * y_stride + 0..7]. Per (row, input) exactly rows_float_avx2's operations: one FMA
// chain, hsum8, plus the scalar tail, here a vector over the 8 rows (the same mul, then add,
// per element; + 0 where there is none, as there).
// NOTE: why: at 64 columns a row is 8 FMAs, and mk_float_avx2's 12 hsum8 and 12 scattered
// stores per 3x4 call cost as much as its 96 FMAs (stories260K prefill on Zen 3: mk_float_avx2
// plus run_tiles were 65% of the forward). Each weight row is read from L1 once per input
// (8 loads per 8 FMAs), which longer rows would pay for in L2 bandwidth: they keep the tiles.
// n_valid < 8: only rows [0, n_valid) are stored (the rest of w's 8 rows is padding).
// What the rows8 kernels (this one and tiles_avx512.h's) set up for a group of 8 rows: their
// pointers, the whole 8-column steps, the tail columns' weights as a vector over the rows, and
// the store of the group's 8 results (only rows [0, n_valid) where the group is padding).
template <class L>
struct rows8_group {
  const uint8_t* wr[8];
  int64_t n8;
  alignas(32) float tail_w[7][8];  // [column - n8][row]
  __m256i store_mask;
  int n_valid;
  rows8_group(const uint8_t* w, size_t stride, int64_t n, int valid) : n8(n / 8 * 8), n_valid(valid) {
    store_mask = _mm256_cmpgt_epi32(_mm256_set1_epi32(n_valid), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    for (int r = 0; r < 8; ++r) wr[r] = w + static_cast<size_t>(r) * stride;
    for (int64_t k = 0; k < n - n8; ++k)
      for (int r = 0; r < 8; ++r) tail_w[k][r] = L::s(wr[r], n8 + k);
  }
  void store(float* dst, __m256 out) const {
    if (n_valid == 8)
      _mm256_storeu_ps(dst, out);
    else
      _mm256_maskstore_ps(dst, store_mask, out);
  }
};

template <class L>
void rows8_float_avx2(const uint8_t* w, size_t stride, const uint8_t* xb, size_t x_stride, int64_t n_x, int64_t n,
                      float* y, int64_t y_stride, int n_valid = 8) {
  const rows8_group<L> g(w, stride, n, n_valid);
  const auto& wr = g.wr;
  const auto& tail_w = g.tail_w;
  const int64_t n8 = g.n8;
  for (int64_t b = 0; b < n_x; ++b) {
    const float* x = reinterpret_cast<const float*>(xb + static_cast<size_t>(b) * x_stride);
    __m256 acc[8];
    for (int r = 0; r < 8; ++r) acc[r] = _mm256_setzero_ps();
    for (int64_t j = 0; j < n8; j += 8) {
      const __m256 xv = _mm256_loadu_ps(x + j);
      for (int r = 0; r < 8; ++r) acc[r] = _mm256_fmadd_ps(L::v(wr[r], j), xv, acc[r]);
    }
    __m256 tail = _mm256_setzero_ps();
    for (int64_t k = 0; k < n - n8; ++k)
      tail = _mm256_add_ps(tail, _mm256_mul_ps(_mm256_load_ps(tail_w[k]), _mm256_set1_ps(x[n8 + k])));
    g.store(y + b * y_stride, _mm256_add_ps(hsum8x8(acc), tail));
  }
}

// Q8_0 micro-kernel: R consecutive weight rows (stride bytes apart) x B inputs,
// out[r * B + b] = dot(W[r], x[b]). Per (row, input) pair the float operations are
// exactly rows_q8_0_avx2's: block i's 8 exact int32 lanes, converted, FMA'd with
// (d_w * d_x) into chain i % 2, the two chains added, then hsum8. The two chains are
// independent, so they run as two passes (even blocks, then odd blocks), which halves
// the live accumulators and lets R rows x B inputs share the loads: each input's quants
// are loaded once per block for the R rows, each row's |w| once for the B inputs, and the
// scale product is one vector multiply of two broadcasts.
template <int R, int B>
void mk_q8_0_avx2(const uint8_t* w, size_t stride, const uint8_t* const* xb, int64_t n, float* out) {
  const block_q8_0* wr[R];
  for (int r = 0; r < R; ++r) wr[r] = reinterpret_cast<const block_q8_0*>(w + static_cast<size_t>(r) * stride);
  const block_q8_0x* x[B];
  for (int b = 0; b < B; ++b) x[b] = reinterpret_cast<const block_q8_0x*>(xb[b]);
  const __m256i ones = _mm256_set1_epi16(1);
  const int64_t nb = n / qk8_0;
  __m256 even[R][B];
  for (int k = 0; k < 2; ++k) {
    __m256 acc[R][B];
    for (int r = 0; r < R; ++r)
      for (int b = 0; b < B; ++b) acc[r][b] = _mm256_setzero_ps();
    for (int64_t i = k; i < nb; i += 2) {
      __m256i aw[R];
      __m256 dw[R];
      // The next row group (R rows further) at the pace of this one: the rows stream from
      // memory in batched decode, and R parallel row streams defeat the hardware prefetcher.
      if (k == 0)
        for (int r = 0; r < R; ++r) prefetch(reinterpret_cast<const uint8_t*>(wr[r] + i) + R * stride);
      for (int r = 0; r < R; ++r) {
        const __m256i qw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wr[r][i].qs));
        aw[r] = _mm256_sign_epi8(qw, qw);
        dw[r] = _mm256_cvtph_ps(_mm_set1_epi16(static_cast<short>(wr[r][i].d)));
      }
      for (int b = 0; b < B; ++b) {
        const __m256i qx = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[b][i].qs));
        const __m256 dx = _mm256_broadcast_ss(&x[b][i].d);
        for (int r = 0; r < R; ++r) {
          const __m256i qw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wr[r][i].qs));
          const __m256i dot = _mm256_madd_epi16(_mm256_maddubs_epi16(aw[r], _mm256_sign_epi8(qx, qw)), ones);
          acc[r][b] = _mm256_fmadd_ps(_mm256_mul_ps(dw[r], dx), _mm256_cvtepi32_ps(dot), acc[r][b]);
        }
      }
    }
    for (int r = 0; r < R; ++r)
      for (int b = 0; b < B; ++b) {
        if (k == 0)
          even[r][b] = acc[r][b];
        else
          out[r * B + b] = hsum8(_mm256_add_ps(even[r][b], acc[r][b]));
      }
  }
}

// Q4_K micro-kernel: R consecutive weight rows (stride bytes apart) x B inputs,
// out[r * B + b] = dot(W[r], x[b]). Per (row, input) pair the float operations are exactly
// rows_q4_k_avx2's: per super-block one FMA of (d_w * d_x) on the
// converted int32 lanes into acc and one FMA of (-dmin_w * d_x) on the mins' int32 lanes into
// acc_m, then hsum8(acc) + hsum4(acc_m). The int32 lanes are exact, so they may be summed in
// any order: lane k of sumi[r][b] is still the decode kernel's lane k (the scaled products of
// elements 4k..4k+3 of every sub-block). The integer work runs sub-block by sub-block with
// R x B sumi in registers, so each input's 32 quants are loaded once for the R rows and each
// row's unpacked quants and scales serve the B inputs; the float accumulators live in memory
// and are touched once per super-block.
template <int R, int B>
void mk_q4_k_avx2(const uint8_t* w, size_t stride, const uint8_t* const* xb, int64_t n, float* out) {
  const block_q4_k* wr[R];
  for (int r = 0; r < R; ++r) wr[r] = reinterpret_cast<const block_q4_k*>(w + static_cast<size_t>(r) * stride);
  const block_q8_k* x[B];
  for (int b = 0; b < B; ++b) x[b] = reinterpret_cast<const block_q8_k*>(xb[b]);
  const __m256i m4 = _mm256_set1_epi8(0xF);
  // The mins' 4-lane accumulators of inputs 2p and 2p + 1 share one vector (lanes 0-3 and
  // 4-7): acc_m2[r][p]; an odd last input has acc_m1[r].
  constexpr int P = B / 2;
  __m256 acc[R][B];
  __m256 acc_m2[R][P > 0 ? P : 1];
  __m128 acc_m1[R];
  for (int r = 0; r < R; ++r) {
    for (int b = 0; b < B; ++b) acc[r][b] = _mm256_setzero_ps();
    for (int p = 0; p < P; ++p) acc_m2[r][p] = _mm256_setzero_ps();
    acc_m1[r] = _mm_setzero_ps();
  }
  for (int64_t i = 0; i < n / qk_k; ++i) {
    __m256i scales[R];
    __m128i mins[R];
    float dw[R], dminw[R];
    for (int r = 0; r < R; ++r) {
      prefetch(reinterpret_cast<const uint8_t*>(wr[r] + i) + R * stride);
      prefetch(reinterpret_cast<const uint8_t*>(wr[r] + i) + R * stride + 64);
      prefetch(reinterpret_cast<const uint8_t*>(wr[r] + i) + R * stride + 128);
      q4_k_scales_mins(wr[r][i], &scales[r], &mins[r]);
      dw[r] = h2f(wr[r][i].d);
      dminw[r] = -h2f(wr[r][i].dmin);
    }
    // Mins, two inputs per vector op. The decode kernel's 4 lanes for one input are
    // madd(mins, hadd(bsums[0..7], bsums[8..15])) = [j0, j1 (from bsums 0..7), j2, j3 (8..15)].
    // hadd256(bsums of 2p, bsums of 2p+1) holds the same pair sums as [lo(2p), lo(2p+1) |
    // hi(2p), hi(2p+1)], so madd with mins as [m0..3, m0..3 | m4..7, m4..7] gives
    // [2p: j0 j1, 2p+1: j0 j1 | 2p: j2 j3, 2p+1: j2 j3]; a 64-bit permute puts each input's
    // 4 lanes together, and the FMA per lane is the decode kernel's (its scale is the same
    // float product dmin_w * d_x).
    for (int p = 0; p < P; ++p) {
      const block_q8_k& y0 = x[2 * p][i];
      const block_q8_k& y1 = x[2 * p + 1][i];
      const __m256i h = _mm256_hadd_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(y0.bsums)),
                                          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(y1.bsums)));
      const __m256 dx = _mm256_set_m128(_mm_set1_ps(y1.d), _mm_set1_ps(y0.d));
      for (int r = 0; r < R; ++r) {
        const __m256i mins2 = _mm256_permute4x64_epi64(_mm256_castsi128_si256(mins[r]), 0x50);
        const __m256i prod = _mm256_permute4x64_epi64(_mm256_madd_epi16(mins2, h), 0xD8);
        acc_m2[r][p] =
            _mm256_fmadd_ps(_mm256_mul_ps(_mm256_set1_ps(dminw[r]), dx), _mm256_cvtepi32_ps(prod), acc_m2[r][p]);
      }
    }
    if constexpr (B % 2 == 1) {
      const block_q8_k& y = x[B - 1][i];
      const __m256i q8sums = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(y.bsums));
      const __m128i q8s = _mm_hadd_epi16(_mm256_extracti128_si256(q8sums, 0), _mm256_extracti128_si256(q8sums, 1));
      for (int r = 0; r < R; ++r)
        acc_m1[r] = _mm_fmadd_ps(_mm_set1_ps(dminw[r] * y.d), _mm_cvtepi32_ps(_mm_madd_epi16(mins[r], q8s)), acc_m1[r]);
    }
    __m256i sumi[R][B];
    for (int r = 0; r < R; ++r)
      for (int b = 0; b < B; ++b) sumi[r][b] = _mm256_setzero_si256();
#pragma GCC unroll 8
    for (int sb = 0; sb < qk_k / 32; ++sb) {
      // Sub-blocks 2j and 2j + 1 share one 32-byte load of quants (low and high nibbles).
      __m256i q4[R], sc[R];
      for (int r = 0; r < R; ++r) {
        const __m256i q4bits = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wr[r][i].qs + 32 * (sb / 2)));
        q4[r] = _mm256_and_si256(sb % 2 ? _mm256_srli_epi16(q4bits, 4) : q4bits, m4);
        sc[r] = _mm256_shuffle_epi8(scales[r], _mm256_set1_epi16(static_cast<short>((2 * sb) | ((2 * sb + 1) << 8))));
      }
      for (int b = 0; b < B; ++b) {
        const __m256i q8 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[b][i].qs + 32 * sb));
        for (int r = 0; r < R; ++r) {
          sumi[r][b] = _mm256_add_epi32(sumi[r][b], _mm256_madd_epi16(sc[r], _mm256_maddubs_epi16(q4[r], q8)));
          // NOTE: keeps the running sums in registers: left alone, GCC reassociates the exact
          // integer adds into "store every product, sum them afterwards" (1.5x slower).
          asm("" : "+x"(sumi[r][b]));
        }
      }
    }
    for (int r = 0; r < R; ++r)
      for (int b = 0; b < B; ++b)
        acc[r][b] = _mm256_fmadd_ps(_mm256_set1_ps(dw[r] * x[b][i].d), _mm256_cvtepi32_ps(sumi[r][b]), acc[r][b]);
  }
  for (int r = 0; r < R; ++r)
    for (int b = 0; b < B; ++b) {
      const __m128 acc_m = b == B - 1 && B % 2 == 1 ? acc_m1[r]
                           : b % 2 == 0             ? _mm256_castps256_ps128(acc_m2[r][b / 2])
                                                    : _mm256_extractf128_ps(acc_m2[r][b / 2], 1);
      out[r * B + b] = hsum8(acc[r][b]) + hsum4(acc_m);
    }
}

// Q6_K micro-kernel: R rows x B inputs (prefill), per (row, input) exactly
// rows_q6_k_avx2's operations: the super-block's exact int32 lanes, then one FMA with
// d_w * d_x and hsum8 at the end. One 32-element sub-block at a time, so a row's unpacked
// quants and scales (2 registers) serve all B inputs while the B running sums stay in
// registers.
template <int R, int B>
void mk_q6_k_avx2(const uint8_t* w, size_t stride, const uint8_t* const* xb, int64_t n, float* out) {
  const block_q6_k* wr[R];
  for (int r = 0; r < R; ++r) wr[r] = reinterpret_cast<const block_q6_k*>(w + static_cast<size_t>(r) * stride);
  const block_q8_k* x[B];
  for (int b = 0; b < B; ++b) x[b] = reinterpret_cast<const block_q8_k*>(xb[b]);
  const __m256i m32s = _mm256_set1_epi8(32);
  __m256 acc[R][B];
  for (int r = 0; r < R; ++r)
    for (int b = 0; b < B; ++b) acc[r][b] = _mm256_setzero_ps();
  for (int64_t i = 0; i < n / qk_k; ++i) {
    __m128i scales[R];
    for (int r = 0; r < R; ++r) {
      for (int c = 0; c < 4; ++c) prefetch(reinterpret_cast<const uint8_t*>(wr[r] + i) + R * stride + 64 * c);
      scales[r] = _mm_loadu_si128(reinterpret_cast<const __m128i*>(wr[r][i].scales));
    }
    __m256i sumi[R][B];
    for (int r = 0; r < R; ++r)
      for (int b = 0; b < B; ++b) sumi[r][b] = _mm256_setzero_si256();
    for (int j = 0; j < qk_k / 128; ++j) {
      __m256i q6[R][4];
      for (int r = 0; r < R; ++r) q6_k_unpack(wr[r][i], j, q6[r]);
      for (int k = 0; k < 4; ++k) {
        __m256i sc[R];
        for (int r = 0; r < R; ++r) sc[r] = q6_k_scale(scales[r], 4 * j + k);
        for (int b = 0; b < B; ++b) {
          const __m256i q8v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[b][i].qs + 128 * j + 32 * k));
          const __m256i q8m = _mm256_maddubs_epi16(m32s, q8v);
          for (int r = 0; r < R; ++r) {
            const __m256i p16 = _mm256_sub_epi16(_mm256_maddubs_epi16(q6[r][k], q8v), q8m);
            sumi[r][b] = _mm256_add_epi32(sumi[r][b], _mm256_madd_epi16(sc[r], p16));
            // NOTE: keeps the running sums in registers (as mk_q4_k_avx2).
            asm("" : "+x"(sumi[r][b]));
          }
        }
      }
    }
    for (int r = 0; r < R; ++r) {
      const float dw = h2f(wr[r][i].d);
      for (int b = 0; b < B; ++b)
        acc[r][b] = _mm256_fmadd_ps(_mm256_set1_ps(dw * x[b][i].d), _mm256_cvtepi32_ps(sumi[r][b]), acc[r][b]);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int b = 0; b < B; ++b) out[r * B + b] = hsum8(acc[r][b]);
}

}  // namespace agentq::kernels::avx2
#endif
