// Private to kernels/cpu: AVX2 matrix-vector (decode) kernels.
#pragma once
#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "agentq/kernels.h"
#include "cpu/quants_internal.h"
#include "cpu/simd_avx2.h"

namespace agentq::kernels::avx2 {

// ============================================================================
// Matrix-vector (decode) kernels: R consecutive weight rows against one input.
// NOTE: these define each format's float operation order per (row, input); the batched
// micro-kernels (tiles_avx2.h) perform exactly the same operations (integer parts are
// exact, so only their lane layout matters), so a row's value is bit-identical whichever
// path computes it. Interleaving R rows shares the
// input's loads and per-block work and amortizes the per-row call overhead.
// Decode rows are short (768 columns = 3 Q4_K super-blocks in a 110M model), so that
// overhead was a large share of the matvec.

// NOTE: R rows read in parallel are R streams, which the hardware prefetcher follows
// poorly (per-row prefetches measured 35-40% below the one-row kernel). The R rows are
// one contiguous range of R * row_stride bytes (row_stride == row bytes for model
// weights), and the next group follows it, so prefetch the next group as one linear
// stream at the pace of this one: when `done` bytes of each row... i.e. R * done of the
// group are consumed, fetch the next group's bytes [R * done, R * done + len).
inline void prefetch_group(const uint8_t* w, size_t group_bytes, int64_t done, int64_t len) {
  for (int64_t c = 0; c < len; c += 64) prefetch(w + group_bytes + done + c);
}

// Q8_0: sign trick + maddubs -> 8 exact int32 lanes per block, then one FMA with
// (d_w * d_x) into one of two chains (even/odd block); hsum8 of their sum.
template <int R>
void rows_q8_0_avx2(const uint8_t* w, size_t stride, const uint8_t* xp, int64_t n, float* out) {
  auto x = reinterpret_cast<const block_q8_0x*>(xp);
  const block_q8_0* wr[R];
  for (int r = 0; r < R; ++r) wr[r] = reinterpret_cast<const block_q8_0*>(w + static_cast<size_t>(r) * stride);
  const __m256i ones = _mm256_set1_epi16(1);
  __m256 acc[R][2];
  for (int r = 0; r < R; ++r) acc[r][0] = acc[r][1] = _mm256_setzero_ps();
  const int64_t nb = n / qk8_0;
  auto step = [&](int64_t i, int k) {
    const __m256i qx = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[i].qs));
    const float dx = x[i].d;
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      const __m256i qw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wr[r][i].qs));
      const __m256i dot =
          _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_sign_epi8(qw, qw), _mm256_sign_epi8(qx, qw)), ones);
      acc[r][k] = _mm256_fmadd_ps(_mm256_set1_ps(h2f(wr[r][i].d) * dx), _mm256_cvtepi32_ps(dot), acc[r][k]);
    }
  };
  int64_t i = 0;
  for (; i + 2 <= nb; i += 2) {
    prefetch_group(w, R * stride, i * R * static_cast<int64_t>(sizeof(block_q8_0)),
                   2 * R * static_cast<int64_t>(sizeof(block_q8_0)));
    step(i, 0);
    step(i + 1, 1);
  }
  if (i < nb) step(i, 0);
  for (int r = 0; r < R; ++r) out[r] = hsum8(_mm256_add_ps(acc[r][0], acc[r][1]));
}

// Q4_K: as llama.cpp's ggml_vec_dot_q4_K_q8_K (AVX2). Per super-block the quants and the
// mins reduce to exact int32 lanes; one FMA each into acc (8 lanes) / acc_m (4 lanes).
template <int R>
void rows_q4_k_avx2(const uint8_t* w, size_t stride, const uint8_t* xp, int64_t n, float* out) {
  auto x = reinterpret_cast<const block_q8_k*>(xp);
  const block_q4_k* wr[R];
  for (int r = 0; r < R; ++r) wr[r] = reinterpret_cast<const block_q4_k*>(w + static_cast<size_t>(r) * stride);
  const __m256i m4 = _mm256_set1_epi8(0xF);
  __m256 acc[R];
  __m128 acc_m[R];
  for (int r = 0; r < R; ++r) {
    acc[r] = _mm256_setzero_ps();
    acc_m[r] = _mm_setzero_ps();
  }
  for (int64_t i = 0; i < n / qk_k; ++i) {
    const block_q8_k& y = x[i];
    const __m256i q8sums = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(y.bsums));
    const __m128i q8s = _mm_hadd_epi16(_mm256_castsi256_si128(q8sums), _mm256_extracti128_si256(q8sums, 1));
    const __m128 yd = _mm_set1_ps(y.d);
    prefetch_group(w, R * stride, i * R * static_cast<int64_t>(sizeof(block_q4_k)),
                   R * static_cast<int64_t>(sizeof(block_q4_k)));
    // NOTE: unrolled, the R rows' accumulators stay in registers (the loop kept them on the
    // stack): 1.08x on L2-resident 4096-column rows.
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      const block_q4_k& b = wr[r][i];
      __m128i mins;
      __m256i scales;
      q4_k_scales_mins(b, &scales, &mins);
      // [d * y.d, dmin * y.d]; fnmadd with dmin * y.d == fma with (-dmin) * y.d, as the micro-kernel.
      uint32_t d_dmin;
      std::memcpy(&d_dmin, &b.d, 4);
      const __m128 dd = _mm_mul_ps(_mm_cvtph_ps(_mm_cvtsi32_si128(static_cast<int>(d_dmin))), yd);
      acc_m[r] = _mm_fnmadd_ps(_mm_permute_ps(dd, 0x55), _mm_cvtepi32_ps(_mm_madd_epi16(mins, q8s)), acc_m[r]);
      __m256i sumi = _mm256_setzero_si256();
      for (int j = 0; j < qk_k / 64; ++j) {
        const __m256i scale_l =
            _mm256_shuffle_epi8(scales, _mm256_set1_epi16(static_cast<short>((4 * j) | ((4 * j + 1) << 8))));
        const __m256i scale_h =
            _mm256_shuffle_epi8(scales, _mm256_set1_epi16(static_cast<short>((4 * j + 2) | ((4 * j + 3) << 8))));
        const __m256i q4bits = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.qs + 32 * j));
        const __m256i q4l = _mm256_and_si256(q4bits, m4);
        const __m256i q4h = _mm256_and_si256(_mm256_srli_epi16(q4bits, 4), m4);
        const __m256i q8l = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(y.qs + 64 * j));
        const __m256i q8h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(y.qs + 64 * j + 32));
        const __m256i p16l = _mm256_madd_epi16(scale_l, _mm256_maddubs_epi16(q4l, q8l));
        const __m256i p16h = _mm256_madd_epi16(scale_h, _mm256_maddubs_epi16(q4h, q8h));
        sumi = _mm256_add_epi32(sumi, _mm256_add_epi32(p16l, p16h));
      }
      acc[r] = _mm256_fmadd_ps(_mm256_broadcastss_ps(dd), _mm256_cvtepi32_ps(sumi), acc[r]);
    }
  }
  for (int r = 0; r < R; ++r) out[r] = hsum8(acc[r]) + hsum4(acc_m[r]);
}

// Float formats (F32/F16/BF16): per row one 8-lane FMA chain (element j -> lane j % 8),
// hsum8, plus the scalar tail; the R rows share each input load (R independent chains hide the FMA latency).
template <class L, int R>
void rows_float_avx2(const uint8_t* w, size_t stride, const uint8_t* xp, int64_t n, float* out) {
  const float* x = reinterpret_cast<const float*>(xp);
  const uint8_t* wr[R];
  for (int r = 0; r < R; ++r) wr[r] = w + static_cast<size_t>(r) * stride;
  __m256 acc[R];
  for (int r = 0; r < R; ++r) acc[r] = _mm256_setzero_ps();
  // NOTE: for long rows the R rows are R long streams the hardware prefetcher follows well,
  // and the software prefetch of the next group (R rows ahead, 16-64 KiB) only got in its way:
  // F16 at 4096 / 8192 columns, 2 threads, 31-35 -> 36-47 GB/s without it; at 768 columns
  // (a 6 KiB group) it is needed (10-11 GB/s without it on one thread, 16-19 with it).
  // On a Zen 5 host (k_avx512_core) the 2-byte formats want it at every length: F16 at
  // 2048-8192 columns, 2 threads, 44-50 -> 72-78 GB/s with it; F32 within 5% either way
  // there, so it keeps the rule. Zen 1 wants it too; which builds do: k_prefetch_long_2byte_rows.
  const bool soft_prefetch = (k_prefetch_long_2byte_rows && L::size == 2) || R * stride <= 8192;
  int64_t j = 0;
  for (; j + 32 <= n; j += 32) {
    if (soft_prefetch) prefetch_group(w, R * stride, R * j * L::size, R * 32 * L::size);
#pragma GCC unroll 4
    for (int k = 0; k < 4; ++k) {
      const __m256 xv = _mm256_loadu_ps(x + j + 8 * k);
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) acc[r] = _mm256_fmadd_ps(L::v(wr[r], j + 8 * k), xv, acc[r]);
    }
  }
  for (; j + 8 <= n; j += 8) {
    const __m256 xv = _mm256_loadu_ps(x + j);
    for (int r = 0; r < R; ++r) acc[r] = _mm256_fmadd_ps(L::v(wr[r], j), xv, acc[r]);
  }
  for (int r = 0; r < R; ++r) {
    float tail = 0;
    for (int64_t jj = j; jj < n; ++jj) tail += L::s(wr[r], jj) * x[jj];
    out[r] = hsum8(acc[r]) + tail;
  }
}

// Q6_K: as llama.cpp's ggml_vec_dot_q6_K_q8_K (AVX2): per row and super-block exact int32
// lanes (6-bit quants times q8 minus 32 * q8, scaled per 16 elements), then one FMA.
template <int R>
void rows_q6_k_avx2(const uint8_t* w, size_t stride, const uint8_t* xp, int64_t n, float* out) {
  auto x = reinterpret_cast<const block_q8_k*>(xp);
  const block_q6_k* wr[R];
  for (int r = 0; r < R; ++r) wr[r] = reinterpret_cast<const block_q6_k*>(w + static_cast<size_t>(r) * stride);
  const __m256i m32s = _mm256_set1_epi8(32);
  __m256 acc[R];
  for (int r = 0; r < R; ++r) acc[r] = _mm256_setzero_ps();
  for (int64_t i = 0; i < n / qk_k; ++i) {
    prefetch_group(w, R * stride, i * R * static_cast<int64_t>(sizeof(block_q6_k)),
                   R * static_cast<int64_t>(sizeof(block_q6_k)));
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      const block_q6_k& b = wr[r][i];
      const __m128i scales = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b.scales));
      __m256i sumi = _mm256_setzero_si256();
      for (int j = 0; j < qk_k / 128; ++j) {
        __m256i q6[4];
        q6_k_unpack(b, j, q6);
        const int8_t* q8 = x[i].qs + 128 * j;
        for (int k = 0; k < 4; ++k) {
          const __m256i sc = q6_k_scale(scales, 4 * j + k);
          const __m256i q8v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q8 + 32 * k));
          const __m256i p16 = _mm256_sub_epi16(_mm256_maddubs_epi16(q6[k], q8v), _mm256_maddubs_epi16(m32s, q8v));
          sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(sc, p16));
        }
      }
      acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(h2f(b.d) * x[i].d), _mm256_cvtepi32_ps(sumi), acc[r]);
    }
  }
  for (int r = 0; r < R; ++r) out[r] = hsum8(acc[r]);
}

}  // namespace agentq::kernels::avx2
#endif
