// Private to kernels/cpu: the AVX-512 form of the float micro-kernel (tiles_avx2.h's
// mk_float_avx2), used where the build targets AVX-512 F (Zen 4/5, recent Intel).
// NOTE: why: F16/BF16/F32 prefill is FMA-bound, and 256-bit FMAs use half of such a core's
// FMA width (Zen 5, 110M F16 pp512: 1120 tok/s, 0.67-0.71 of llama.cpp's CPU backend).
// The result must stay bit-identical to the decode rows kernel's one 8-lane FMA chain per
// (row, input), which a 16-lane chain over one row would reorder; so each zmm register holds
// two rows' 8-lane chains side by side (rows 2p and 2p + 1 in its low and high halves) against
// an input's 8 floats broadcast to both halves. Every lane performs the AVX2 kernel's FMAs in
// the AVX2 kernel's order; the halves are then reduced by the same hsum8 and scalar tail.
#pragma once
#if defined(__AVX512F__) && defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#include <immintrin.h>

#include <algorithm>
#include <cstdint>

#include "agentq/zmm_halves.h"
#include "cpu/simd_avx2.h"
#include "cpu/tiles_avx2.h"

#define AGENTQ_KERNELS_AVX512F 1

namespace agentq::kernels::avx512 {

// Elements j..j+7 of rows a (low half) and b (high half) as floats: the loader L's values
// (conversions to float are exact, so any instruction sequence gives the same bits).
template <class L>
inline __m512 row_pair(const uint8_t* a, const uint8_t* b, int64_t j) {
  return join_halves(L::v(a, j), L::v(b, j));
}
// F16 and BF16: the two rows' 16-bit values in one register, widened once.
inline __m256i halves_pair(const uint8_t* a, const uint8_t* b, int64_t j) {
  const __m128i lo = _mm_loadu_si128(reinterpret_cast<const __m128i*>(reinterpret_cast<const uint16_t*>(a) + j));
  const __m128i hi = _mm_loadu_si128(reinterpret_cast<const __m128i*>(reinterpret_cast<const uint16_t*>(b) + j));
  return _mm256_inserti128_si256(_mm256_castsi128_si256(lo), hi, 1);
}
template <>
inline __m512 row_pair<avx2::load_f16>(const uint8_t* a, const uint8_t* b, int64_t j) {
  return _mm512_cvtph_ps(halves_pair(a, b, j));
}
template <>
inline __m512 row_pair<avx2::load_bf16>(const uint8_t* a, const uint8_t* b, int64_t j) {
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(halves_pair(a, b, j)), 16));
}

// R rows x B inputs, out[r * B + b] = dot(W[r], x[b]), per pair exactly mk_float_avx2's (and
// rows_float_avx2's) operations. pair(p, j): elements j..j+7 of rows 2p and 2p + 1 as one
// zmm (an odd R's last pair repeats its row in the high half; those sums are dropped). The
// scalar tail reads the rows (w, stride) themselves.
template <class L, int R, int B, class Pair>
void mk_pairs(const Pair& pair, const uint8_t* w, size_t stride, const uint8_t* const* xb, int64_t n, float* out) {
  constexpr int P = (R + 1) / 2;
  const float* x[B];
  for (int b = 0; b < B; ++b) x[b] = reinterpret_cast<const float*>(xb[b]);
  __m512 acc[P][B];
  for (int p = 0; p < P; ++p)
    for (int b = 0; b < B; ++b) acc[p][b] = _mm512_setzero_ps();
  const int64_t n8 = n / 8 * 8;
  for (int64_t j = 0; j < n8; j += 8) {
    // NOTE: registers pinned as in mk_float_avx2 (GCC would fold the loads into every FMA).
    __m512 wv[P];
    for (int p = 0; p < P; ++p) {
      wv[p] = pair(p, j);
      asm("" : "+v"(wv[p]));
    }
    for (int b = 0; b < B; ++b) {
      __m512 xv = broadcast8(x[b] + j);
      asm("" : "+v"(xv));
      for (int p = 0; p < P; ++p) acc[p][b] = _mm512_fmadd_ps(wv[p], xv, acc[p][b]);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int b = 0; b < B; ++b) {
      const __m256 half = r % 2 ? high_half(acc[r / 2][b]) : low_half(acc[r / 2][b]);
      const uint8_t* wr = w + static_cast<size_t>(r) * stride;
      float tail = 0;
      for (int64_t jj = n8; jj < n; ++jj) tail += L::s(wr, jj) * x[b][jj];
      out[r * B + b] = avx2::hsum8(half) + tail;
    }
}

// Pairs read from the rows, converted per use (R >= 2).
template <class L, int R, int B>
void mk_float_pairs(const uint8_t* w, size_t stride, const uint8_t* const* xb, int64_t n, float* out) {
  const uint8_t* wr[R + 1];
  for (int r = 0; r <= R; ++r) wr[r] = w + static_cast<size_t>(std::min(r, R - 1)) * stride;
  mk_pairs<L, R, B>([&](int p, int64_t j) { return row_pair<L>(wr[2 * p], wr[2 * p + 1], j); }, w, stride, xb, n, out);
}

// Prefill form: rows converted to F32 once per chunk and stored pair-interleaved, so the
// micro-kernel's weight vectors are single zmm loads (no per-use convert or insert, which the
// 8 x 6 kernel spends on every weight vector it shares among only 6 inputs).
// pack_float_pairs: rows [0, rows) of w as pairs, elements j..j+7 of rows 2p and 2p + 1 (an
// odd last row repeated) as 16 floats at dst + p * 2 * n8 + 2 * j (n8: whole 8-element steps).
template <class L>
void pack_float_pairs(const uint8_t* w, size_t stride, int64_t rows, int64_t n8, float* dst) {
  for (int64_t p = 0; p < (rows + 1) / 2; ++p) {
    const uint8_t* a = w + static_cast<size_t>(2 * p) * stride;
    const uint8_t* b = w + static_cast<size_t>(std::min(2 * p + 1, rows - 1)) * stride;
    float* d = dst + static_cast<size_t>(p) * 2 * static_cast<size_t>(n8);
    for (int64_t j = 0; j < n8; j += 8) _mm512_storeu_ps(d + 2 * j, row_pair<L>(a, b, j));
  }
}

// Pairs read from pack_float_pairs' output for these R rows (pk, n8 as there).
template <class L, int R, int B>
void mk_float_packed(const float* pk, int64_t n8, const uint8_t* w, size_t stride, const uint8_t* const* xb, int64_t n,
                     float* out) {
  mk_pairs<L, R, B>(
      [&](int p, int64_t j) { return _mm512_loadu_ps(pk + static_cast<size_t>(p) * 2 * static_cast<size_t>(n8) + 2 * j); },
      w, stride, xb, n, out);
}

// The micro-kernel the tile set takes: one row runs as the AVX2 kernel (a pair would be half idle).
template <class L, int R, int B>
void mk_float_avx512(const uint8_t* w, size_t stride, const uint8_t* const* xb, int64_t n, float* out) {
  if constexpr (R == 1)
    avx2::mk_float_avx2<L, 1, B>(w, stride, xb, n, out);
  else
    mk_float_pairs<L, R, B>(w, stride, xb, n, out);
}

// Elements j..j+7 of one row in both halves (the loader L's values: conversions are exact).
template <class L>
inline __m512 row_both(const uint8_t* w, int64_t j) {
  return broadcast8(reinterpret_cast<const float*>(w) + j);
}
template <>
inline __m512 row_both<avx2::load_f16>(const uint8_t* w, int64_t j) {
  return _mm512_cvtph_ps(_mm256_broadcastsi128_si256(
      _mm_loadu_si128(reinterpret_cast<const __m128i*>(reinterpret_cast<const uint16_t*>(w) + j))));
}
template <>
inline __m512 row_both<avx2::load_bf16>(const uint8_t* w, int64_t j) {
  const __m256i h = _mm256_broadcastsi128_si256(
      _mm_loadu_si128(reinterpret_cast<const __m128i*>(reinterpret_cast<const uint16_t*>(w) + j)));
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

// rows8_float_avx2 (tiles_avx2.h) two inputs at a time: lanes 0-7 of each zmm accumulator are
// input b's 8-lane chain for one row, lanes 8-15 input b + 1's, against the row's 8 weights in
// both halves; the halves then reduced by the same hsum8x8 and the same tail (mul, then add,
// per lane), so per (row, input) exactly that kernel's operations and bits. Four inputs at a
// time where there are four: two such accumulators per row share each weight vector. An odd last
// input runs the AVX2 kernel itself.
// NOTE: why: at 64 columns (stories260K) a 256-bit FMA uses half a Zen 4/5 core's FMA width,
// and the packed 8 x 6 tiles spend as much on packing, hsums and scattered stores as on FMAs.
// Two inputs a step load a weight vector for every FMA (plus the inputs' own loads), more loads
// than FMAs; four inputs share it between two FMAs (16 accumulators + 3 vectors of 32 zmm).
// For L::size == 4 only whole rows of floats; the F16/BF16 forms convert each weight vector
// once per step.
template <class L>
void rows8_float_avx512(const uint8_t* w, size_t stride, const uint8_t* xb, size_t x_stride, int64_t n_x, int64_t n,
                        float* y, int64_t y_stride, int n_valid = 8) {
  const avx2::rows8_group<L> g(w, stride, n, n_valid);
  const auto& wr = g.wr;
  const int64_t n8 = g.n8;
  const auto input = [&](int64_t b) { return reinterpret_cast<const float*>(xb + static_cast<size_t>(b) * x_stride); };
  // Inputs x0 (low halves) and x1 (high halves) of acc: the tail columns, the halves' sums, the stores.
  const auto finish_pair = [&](const __m512 (&acc)[8], const float* x0, const float* x1, float* y0) {
    __m512 tail = _mm512_setzero_ps();
    for (int64_t k = 0; k < n - n8; ++k)
      tail = _mm512_add_ps(tail, _mm512_mul_ps(broadcast8(g.tail_w[k]),
                                               join_halves(_mm256_set1_ps(x0[n8 + k]), _mm256_set1_ps(x1[n8 + k]))));
    __m256 lo[8], hi[8];
    for (int r = 0; r < 8; ++r) lo[r] = low_half(acc[r]), hi[r] = high_half(acc[r]);
    g.store(y0, _mm256_add_ps(hsum8x8(lo), low_half(tail)));
    g.store(y0 + y_stride, _mm256_add_ps(hsum8x8(hi), high_half(tail)));
  };
  int64_t b = 0;
  for (; b + 4 <= n_x; b += 4) {
    const float *x0 = input(b), *x1 = input(b + 1), *x2 = input(b + 2), *x3 = input(b + 3);
    __m512 acc01[8], acc23[8];
    for (int r = 0; r < 8; ++r) acc01[r] = acc23[r] = _mm512_setzero_ps();
    for (int64_t j = 0; j < n8; j += 8) {
      const __m512 x01 = join_halves(_mm256_loadu_ps(x0 + j), _mm256_loadu_ps(x1 + j));
      const __m512 x23 = join_halves(_mm256_loadu_ps(x2 + j), _mm256_loadu_ps(x3 + j));
      for (int r = 0; r < 8; ++r) {
        const __m512 wv = row_both<L>(wr[r], j);
        acc01[r] = _mm512_fmadd_ps(wv, x01, acc01[r]);
        acc23[r] = _mm512_fmadd_ps(wv, x23, acc23[r]);
      }
    }
    finish_pair(acc01, x0, x1, y + b * y_stride);
    finish_pair(acc23, x2, x3, y + (b + 2) * y_stride);
  }
  for (; b + 2 <= n_x; b += 2) {
    const float *x0 = input(b), *x1 = input(b + 1);
    __m512 acc[8];
    for (int r = 0; r < 8; ++r) acc[r] = _mm512_setzero_ps();
    for (int64_t j = 0; j < n8; j += 8) {
      const __m512 xv = join_halves(_mm256_loadu_ps(x0 + j), _mm256_loadu_ps(x1 + j));
      for (int r = 0; r < 8; ++r) acc[r] = _mm512_fmadd_ps(row_both<L>(wr[r], j), xv, acc[r]);
    }
    finish_pair(acc, x0, x1, y + b * y_stride);
  }
  if (b < n_x)
    avx2::rows8_float_avx2<L>(w, stride, xb + static_cast<size_t>(b) * x_stride, x_stride, 1, n, y + b * y_stride,
                              y_stride, n_valid);
}

}  // namespace agentq::kernels::avx512

#endif
