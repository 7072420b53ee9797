// Q2_K and Q3_K tiles on the file layout (1 row x up to 4 Q8_K inputs, decode being 1 input):
// AVX2, and AVX-512 where the build has BW + VNNI. Each super-block's integer sums are exact and
// the float steps per input are dot_q2_k_scalar's / dot_q3_k_scalar's (dots_more.cpp), so every
// path gives their bits.
// NOTE: the quants go in unsigned and small (Q2_K 0..3; Q3_K as value + 4, 0..7, with 4 * the
// scaled sums of x per 16 taken off per super-block from Q8_K's bsums), so maddubs never
// saturates (a pair of products <= 2 * 7 * 127) and one madd with the sub-block scales widens.
#include "cpu/quants_internal.h"

#if AGENTQ_DOTS_MORE_AVX2
#include <immintrin.h>

#include <cstring>

namespace agentq::kernels::detail {

namespace {

inline float h2f(uint16_t h) { return _cvtsh_ss(h); }

inline int32_t hsum_i32(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4E));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xB1));
  return _mm_cvtsi128_si32(s);
}

// The sum over the 16 sub-blocks of s16[is] * y.bsums[is] (|s| <= 32, |bsum| <= 16 * 127: exact).
inline int32_t scaled_bsums(__m256i s16, const block_q8_k& y) {
  return hsum_i32(_mm256_madd_epi16(s16, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(y.bsums))));
}

// Per format: the 16 sub-block scales as int16 (Q3_K's signed), the hmask (Q3_K) and the
// super-block's float step for one input, in the scalar dot's order.
struct q2_k_format {
  using block = block_q2_k;
  static const uint8_t* hmask(const block&) { return nullptr; }
  __m256i sc16, m16;  // scales and mins (4 bits each)
  explicit q2_k_format(const block& b) {
    const __m128i s8 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b.scales));
    sc16 = _mm256_cvtepu8_epi16(_mm_and_si128(s8, _mm_set1_epi8(0xF)));
    m16 = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(s8, 4), _mm_set1_epi8(0xF)));
  }
  // isum: the exact sum of scale * (quant . x) over the super-block.
  void finish(const block& b, const block_q8_k& y, int32_t isum, float& acc, float& acc_m) const {
    acc += (h2f(b.d) * y.d) * static_cast<float>(isum);
    acc_m += (-h2f(b.dmin) * y.d) * static_cast<float>(scaled_bsums(m16, y));
  }
  static float result(float acc, float acc_m) { return acc + acc_m; }
};

struct q3_k_format {
  using block = block_q3_k;
  static const uint8_t* hmask(const block& b) { return b.hmask; }
  __m256i sc16;
  explicit q3_k_format(const block& b) {
    int8_t sc[16];
    q3_k_scales(b.scales, sc);
    sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(sc)));
  }
  // isum: over the quants + 4, so 4 * (scales . sums of x per 16) comes off.
  void finish(const block& b, const block_q8_k& y, int32_t isum, float& acc, float&) const {
    acc += (h2f(b.d) * y.d) * static_cast<float>(isum - 4 * scaled_bsums(sc16, y));
  }
  static float result(float acc, float) { return acc; }
};

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VNNI__)
// Elements 64 t .. 64 t + 63 of a super-block (t < 4): qs[32 k ..] with k = t / 2, shifted by
// 2s in the low 256 bits and 2s + 2 in the high (s = 2 (t % 2)), plus 4 * the hmask bits 4k + s
// and 4k + s + 1 where the format has them.
// 32 bytes at p in both 256-bit halves.
// NOTE: not _mm512_broadcast_i64x4, whose undefined source GCC 12 reports as uninitialized.
inline __m512i load_both_halves(const uint8_t* p) {
  const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  return _mm512_inserti64x4(_mm512_zextsi256_si512(v), v, 1);
}

inline __m512i quants64(const uint8_t* qs, const uint8_t* hmask, int t) {
  const int k = t / 2, s = 2 * (t % 2);
  auto halves = [](int lo, int hi) {
    return _mm512_mask_blend_epi32(0xFF00, _mm512_set1_epi16(short(lo)), _mm512_set1_epi16(short(hi)));
  };
  const __m512i q = load_both_halves(qs + 32 * k);
  __m512i v = _mm512_and_si512(_mm512_srlv_epi16(q, halves(2 * s, 2 * s + 2)), _mm512_set1_epi8(3));
  if (hmask) {
    const __m512i h = load_both_halves(hmask);
    // NOTE: 16-bit shifts move bits across bytes; the & 1 keeps each byte's own bit.
    const __m512i hb = _mm512_and_si512(_mm512_srlv_epi16(h, halves(4 * k + s, 4 * k + s + 1)), _mm512_set1_epi8(1));
    v = _mm512_or_si512(v, _mm512_slli_epi16(hb, 2));
  }
  return v;
}

// Per 64 elements: one maddubs and one vpdpwssd with the 4 sub-blocks' scales (int16, sub-block
// 4t + j in 128-bit lane j, by one vpermw shared by the B inputs).
template <class F, int B>
void tile_q23(const uint8_t* w, const uint8_t* const* x, int64_t n, float* out) {
  auto wb = reinterpret_cast<const typename F::block*>(w);
  const block_q8_k* xb[B];
  for (int k = 0; k < B; ++k) xb[k] = reinterpret_cast<const block_q8_k*>(x[k]);
  alignas(64) static constexpr int16_t lane_sub[32] = {0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1,
                                                       2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3};
  const __m512i sub = _mm512_load_si512(lane_sub);
  float acc[B] = {}, acc_m[B] = {};
  for (int64_t i = 0; i < n / qk_k; ++i) {
    const F f(wb[i]);
    const __m512i sc = _mm512_castsi256_si512(f.sc16);
    __m512i isum[B];
    for (int k = 0; k < B; ++k) isum[k] = _mm512_setzero_si512();
#pragma GCC unroll 4
    for (int t = 0; t < 4; ++t) {
      const __m512i q = quants64(wb[i].qs, F::hmask(wb[i]), t);
      const __m512i scale = _mm512_permutexvar_epi16(_mm512_add_epi16(sub, _mm512_set1_epi16(short(4 * t))), sc);
      for (int k = 0; k < B; ++k) {
        const __m512i y = _mm512_loadu_si512(xb[k][i].qs + 64 * t);
        isum[k] = _mm512_dpwssd_epi32(isum[k], _mm512_maddubs_epi16(q, y), scale);
      }
    }
    for (int k = 0; k < B; ++k) f.finish(wb[i], xb[k][i], _mm512_reduce_add_epi32(isum[k]), acc[k], acc_m[k]);
  }
  for (int k = 0; k < B; ++k) out[k] = F::result(acc[k], acc_m[k]);
}
#else
// Elements 32 u .. 32 u + 31 of a super-block (u = 4k + s < 8): qs[32 k ..] >> 2s, plus 4 * hmask
// bit 4k + s where the format has one.
inline __m256i quants32(const uint8_t* qs, const uint8_t* hmask, int u) {
  const int k = u / 4, s = u % 4;
  const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs + 32 * k));
  __m256i v = _mm256_and_si256(_mm256_srl_epi16(q, _mm_cvtsi32_si128(2 * s)), _mm256_set1_epi8(3));
  if (hmask) {
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(hmask));
    // NOTE: 16-bit shifts move bits across bytes; the & 1 keeps each byte's own bit.
    const __m256i hb = _mm256_and_si256(_mm256_srl_epi16(h, _mm_cvtsi32_si128(4 * k + s)), _mm256_set1_epi8(1));
    v = _mm256_or_si256(v, _mm256_slli_epi16(hb, 2));
  }
  return v;
}

// Per 32 elements (sub-blocks 2u, 2u + 1): one maddubs and one madd with the two scales
// (one per 128-bit half) per input.
template <class F, int B>
void tile_q23(const uint8_t* w, const uint8_t* const* x, int64_t n, float* out) {
  auto wb = reinterpret_cast<const typename F::block*>(w);
  const block_q8_k* xb[B];
  for (int k = 0; k < B; ++k) xb[k] = reinterpret_cast<const block_q8_k*>(x[k]);
  float acc[B] = {}, acc_m[B] = {};
  for (int64_t i = 0; i < n / qk_k; ++i) {
    const F f(wb[i]);
    alignas(32) int16_t s16[16];
    _mm256_store_si256(reinterpret_cast<__m256i*>(s16), f.sc16);
    __m256i isum[B];
    for (int k = 0; k < B; ++k) isum[k] = _mm256_setzero_si256();
#pragma GCC unroll 8
    for (int u = 0; u < 8; ++u) {
      const __m256i q = quants32(wb[i].qs, F::hmask(wb[i]), u);
      const __m256i scale = _mm256_set_m128i(_mm_set1_epi16(s16[2 * u + 1]), _mm_set1_epi16(s16[2 * u]));
      for (int k = 0; k < B; ++k) {
        const __m256i y = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xb[k][i].qs + 32 * u));
        isum[k] = _mm256_add_epi32(isum[k], _mm256_madd_epi16(_mm256_maddubs_epi16(q, y), scale));
      }
    }
    for (int k = 0; k < B; ++k) f.finish(wb[i], xb[k][i], hsum_i32(isum[k]), acc[k], acc_m[k]);
  }
  for (int k = 0; k < B; ++k) out[k] = F::result(acc[k], acc_m[k]);
}
#endif

template <class F>
void tile_by_width(const uint8_t* w, const uint8_t* const* x, int64_t n, float* out, int n_x) {
  switch (n_x) {
    case 1: tile_q23<F, 1>(w, x, n, out); break;
    case 2: tile_q23<F, 2>(w, x, n, out); break;
    case 3: tile_q23<F, 3>(w, x, n, out); break;
    default: tile_q23<F, 4>(w, x, n, out); break;
  }
}

}  // namespace

void tile_q2_k(const uint8_t* w, const uint8_t* const* x, int64_t n, float* out, int n_x) {
  tile_by_width<q2_k_format>(w, x, n, out, n_x);
}
void tile_q3_k(const uint8_t* w, const uint8_t* const* x, int64_t n, float* out, int n_x) {
  tile_by_width<q3_k_format>(w, x, n, out, n_x);
}

}  // namespace agentq::kernels::detail
#endif
