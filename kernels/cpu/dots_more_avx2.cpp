// AVX2 dots for the quants_more formats: the same exact integer sums per block as
// dots_more.cpp's scalar definitions, and the same float operations in the same order
// (32-element formats: 8 blocks' terms side by side in one register, block i in lane i % 8).
#include "cpu/quants_internal.h"

#if AGENTQ_DOTS_MORE_AVX2
#include <immintrin.h>

#include <cstring>
#include <type_traits>

namespace agentq::kernels::detail {

namespace {

// fp16 -> fp32 inline (F16C is exact, the same value as fp16_to_fp32, without a call per block).
inline float h2f(uint16_t h) { return _cvtsh_ss(h); }

// 32 nibbles of 16 bytes: low nibbles (elements 0..15) in the low half, high in the high.
inline __m256i nibbles(const uint8_t* qs) {
  const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  return _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(b, 4), b), _mm256_set1_epi8(0x0F));
}

// Bit j of a 32-bit mask as byte j: 0x10 where set, 0 where not (the fifth bit of Q5_0/Q5_1).
inline __m256i bits_to_0x10(const uint8_t* qh_bytes) {
  uint32_t qh;
  std::memcpy(&qh, qh_bytes, 4);
  const __m256i shuf = _mm256_setr_epi64x(0x0000000000000000, 0x0101010101010101, 0x0202020202020202, 0x0303030303030303);
  __m256i v = _mm256_shuffle_epi8(_mm256_set1_epi32(static_cast<int32_t>(qh)), shuf);
  const __m256i bit = _mm256_set1_epi64x(0x8040201008040201);
  v = _mm256_cmpeq_epi8(_mm256_and_si256(v, bit), bit);
  return _mm256_and_si256(v, _mm256_set1_epi8(0x10));
}

// Signed int8 q . int8 y over 32 elements as 8 int32 partial sums (|q| <= 127: exact in int16).
inline __m256i dot_s8(__m256i q, __m256i y) {
  const __m256i p = _mm256_maddubs_epi16(_mm256_sign_epi8(q, q), _mm256_sign_epi8(y, q));
  return _mm256_madd_epi16(p, _mm256_set1_epi16(1));
}
// Unsigned q (< 128) . int8 y.
inline __m256i dot_u8(__m256i q, __m256i y) {
  return _mm256_madd_epi16(_mm256_maddubs_epi16(q, y), _mm256_set1_epi16(1));
}

// The 8 totals of 8 vectors of 8 int32 partials, total b in lane b.
inline __m256i sums8(const __m256i* p) {
  const __m256i s01 = _mm256_hadd_epi32(p[0], p[1]), s23 = _mm256_hadd_epi32(p[2], p[3]);
  const __m256i s45 = _mm256_hadd_epi32(p[4], p[5]), s67 = _mm256_hadd_epi32(p[6], p[7]);
  const __m256i a = _mm256_hadd_epi32(s01, s23), b = _mm256_hadd_epi32(s45, s67);
  return _mm256_add_epi32(_mm256_permute2x128_si256(a, b, 0x20), _mm256_permute2x128_si256(a, b, 0x31));
}

inline int32_t hsum_i32(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4E));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xB1));
  return _mm_cvtsi128_si32(s);
}

inline float lane_sum8(const float* acc) {
  float t[4];
  for (int l = 0; l < 4; ++l) t[l] = acc[l] + acc[l + 4];
  return (t[0] + t[2]) + (t[1] + t[3]);
}

inline __m256i load_y(const block_q8_0x& b) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.qs)); }

// Symmetric 32-element formats: Q(b) gives block b's signed quants, D(b) its float scale.
// acc lane l: sum over blocks i = l mod 8 of (d_i * dx_i) * isum_i, as dot_sym32.
template <class Block, class Q, class D>
float dot_sym32_avx2(const uint8_t* w, const uint8_t* x, int64_t n, Q quants, D scale) {
  auto wb = reinterpret_cast<const Block*>(w);
  auto xb = reinterpret_cast<const block_q8_0x*>(x);
  const int64_t nb = n / 32;
  __m256 acc = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= nb; i += 8) {
    __m256i p[8];
    alignas(32) float d[8], dx[8];
    for (int b = 0; b < 8; ++b) {
      p[b] = dot_s8(quants(wb[i + b]), load_y(xb[i + b]));
      d[b] = scale(wb[i + b]);
      dx[b] = xb[i + b].d;
    }
    const __m256 dd = _mm256_mul_ps(_mm256_load_ps(d), _mm256_load_ps(dx));
    acc = _mm256_add_ps(acc, _mm256_mul_ps(dd, _mm256_cvtepi32_ps(sums8(p))));
  }
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, acc);
  for (; i < nb; ++i)
    lanes[i % 8] += (scale(wb[i]) * xb[i].d) * static_cast<float>(hsum_i32(dot_s8(quants(wb[i]), load_y(xb[i]))));
  return lane_sum8(lanes);
}

// Affine formats (x = d q + m): lane l sums dq * isum + dm * ysum, as dot_affine32.
template <class Block, class Q>
float dot_affine32_avx2(const uint8_t* w, const uint8_t* x, int64_t n, Q quants) {
  auto wb = reinterpret_cast<const Block*>(w);
  auto xb = reinterpret_cast<const block_q8_0x*>(x);
  const int64_t nb = n / 32;
  const __m256i ones = _mm256_set1_epi8(1);
  __m256 acc = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= nb; i += 8) {
    __m256i p[8], s[8];
    alignas(32) float d[8], m[8], dx[8];
    for (int b = 0; b < 8; ++b) {
      const __m256i y = load_y(xb[i + b]);
      p[b] = dot_u8(quants(wb[i + b]), y);
      s[b] = dot_u8(ones, y);
      d[b] = h2f(wb[i + b].d);
      m[b] = h2f(wb[i + b].m);
      dx[b] = xb[i + b].d;
    }
    const __m256 vdx = _mm256_load_ps(dx);
    const __m256 dq = _mm256_mul_ps(_mm256_load_ps(d), vdx), dm = _mm256_mul_ps(_mm256_load_ps(m), vdx);
    const __m256 t = _mm256_add_ps(_mm256_mul_ps(dq, _mm256_cvtepi32_ps(sums8(p))), _mm256_mul_ps(dm, _mm256_cvtepi32_ps(sums8(s))));
    acc = _mm256_add_ps(acc, t);
  }
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, acc);
  for (; i < nb; ++i) {
    const __m256i y = load_y(xb[i]);
    const float dq = h2f(wb[i].d) * xb[i].d, dm = h2f(wb[i].m) * xb[i].d;
    lanes[i % 8] += dq * static_cast<float>(hsum_i32(dot_u8(quants(wb[i]), y))) +
                    dm * static_cast<float>(hsum_i32(dot_u8(ones, y)));
  }
  return lane_sum8(lanes);
}

// B inputs against one row: the row's quants and scales unpacked once per 8 blocks, then each
// input's lanes computed exactly as dot_sym32_avx2's (same operations per input, same bits).
template <int B, class Block, class Q, class D>
void tile_sym32_avx2(const uint8_t* w, const uint8_t* const* x, int64_t n, float* out, Q quants, D scale) {
  auto wb = reinterpret_cast<const Block*>(w);
  const block_q8_0x* xb[B];
  for (int k = 0; k < B; ++k) xb[k] = reinterpret_cast<const block_q8_0x*>(x[k]);
  const int64_t nb = n / 32;
  __m256 acc[B];
  for (int k = 0; k < B; ++k) acc[k] = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= nb; i += 8) {
    __m256i q[8];
    alignas(32) float d[8];
    for (int b = 0; b < 8; ++b) q[b] = quants(wb[i + b]), d[b] = scale(wb[i + b]);
    const __m256 vd = _mm256_load_ps(d);
    for (int k = 0; k < B; ++k) {
      __m256i p[8];
      alignas(32) float dx[8];
      for (int b = 0; b < 8; ++b) p[b] = dot_s8(q[b], load_y(xb[k][i + b])), dx[b] = xb[k][i + b].d;
      acc[k] = _mm256_add_ps(acc[k], _mm256_mul_ps(_mm256_mul_ps(vd, _mm256_load_ps(dx)), _mm256_cvtepi32_ps(sums8(p))));
    }
  }
  for (int k = 0; k < B; ++k) {
    alignas(32) float lanes[8];
    _mm256_store_ps(lanes, acc[k]);
    for (int64_t j = i; j < nb; ++j)
      lanes[j % 8] += (scale(wb[j]) * xb[k][j].d) * static_cast<float>(hsum_i32(dot_s8(quants(wb[j]), load_y(xb[k][j]))));
    out[k] = lane_sum8(lanes);
  }
}

template <int B, class Block, class Q>
void tile_affine32_avx2(const uint8_t* w, const uint8_t* const* x, int64_t n, float* out, Q quants) {
  auto wb = reinterpret_cast<const Block*>(w);
  const block_q8_0x* xb[B];
  for (int k = 0; k < B; ++k) xb[k] = reinterpret_cast<const block_q8_0x*>(x[k]);
  const int64_t nb = n / 32;
  const __m256i ones = _mm256_set1_epi8(1);
  __m256 acc[B];
  for (int k = 0; k < B; ++k) acc[k] = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= nb; i += 8) {
    __m256i q[8];
    alignas(32) float d[8], m[8];
    for (int b = 0; b < 8; ++b) q[b] = quants(wb[i + b]), d[b] = h2f(wb[i + b].d), m[b] = h2f(wb[i + b].m);
    const __m256 vd = _mm256_load_ps(d), vm = _mm256_load_ps(m);
    for (int k = 0; k < B; ++k) {
      __m256i p[8], sy[8];
      alignas(32) float dx[8];
      for (int b = 0; b < 8; ++b) {
        const __m256i y = load_y(xb[k][i + b]);
        p[b] = dot_u8(q[b], y), sy[b] = dot_u8(ones, y), dx[b] = xb[k][i + b].d;
      }
      const __m256 vdx = _mm256_load_ps(dx);
      const __m256 dq = _mm256_mul_ps(vd, vdx), dm = _mm256_mul_ps(vm, vdx);
      const __m256 t = _mm256_add_ps(_mm256_mul_ps(dq, _mm256_cvtepi32_ps(sums8(p))), _mm256_mul_ps(dm, _mm256_cvtepi32_ps(sums8(sy))));
      acc[k] = _mm256_add_ps(acc[k], t);
    }
  }
  for (int k = 0; k < B; ++k) {
    alignas(32) float lanes[8];
    _mm256_store_ps(lanes, acc[k]);
    for (int64_t j = i; j < nb; ++j) {
      const __m256i y = load_y(xb[k][j]);
      const float dq = h2f(wb[j].d) * xb[k][j].d, dm = h2f(wb[j].m) * xb[k][j].d;
      lanes[j % 8] += dq * static_cast<float>(hsum_i32(dot_u8(quants(wb[j]), y))) +
                      dm * static_cast<float>(hsum_i32(dot_u8(ones, y)));
    }
    out[k] = lane_sum8(lanes);
  }
}

// Runtime B (1..4) to the templates.
template <class F>
void by_width(int b, F f) {
  switch (b) {
    case 1: f(std::integral_constant<int, 1>{}); break;
    case 2: f(std::integral_constant<int, 2>{}); break;
    case 3: f(std::integral_constant<int, 3>{}); break;
    default: f(std::integral_constant<int, 4>{}); break;
  }
}

inline __m256i table16(const int8_t* t) {
  const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(t));
  return _mm256_set_m128i(v, v);
}

}  // namespace

namespace {
struct q4_0_q { __m256i operator()(const block_q4_0& b) const { return _mm256_sub_epi8(nibbles(b.qs), _mm256_set1_epi8(8)); } };
struct q5_0_q {
  __m256i operator()(const block_q5_0& b) const {
    return _mm256_sub_epi8(_mm256_or_si256(nibbles(b.qs), bits_to_0x10(b.qh)), _mm256_set1_epi8(16));
  }
};
struct iq4_nl_q { __m256i operator()(const block_iq4_nl& b) const { return _mm256_shuffle_epi8(table16(kvalues_iq4nl), nibbles(b.qs)); } };
struct mxfp4_q { __m256i operator()(const block_mxfp4& b) const { return _mm256_shuffle_epi8(table16(kvalues_mxfp4), nibbles(b.qs)); } };
struct q4_1_q { __m256i operator()(const block_q4_1& b) const { return nibbles(b.qs); } };
struct q5_1_q { __m256i operator()(const block_q5_1& b) const { return _mm256_or_si256(nibbles(b.qs), bits_to_0x10(b.qh)); } };
struct d16 {
  template <class Blk>
  float operator()(const Blk& b) const { return h2f(b.d); }
};
struct d_e8m0 { float operator()(const block_mxfp4& b) const { return e8m0_to_fp32_half(b.e); } };
}  // namespace

float dot_q4_0_avx2(const uint8_t* w, const uint8_t* x, int64_t n) {
  return dot_sym32_avx2<block_q4_0>(
      w, x, n, [](const block_q4_0& b) { return _mm256_sub_epi8(nibbles(b.qs), _mm256_set1_epi8(8)); },
      [](const block_q4_0& b) { return h2f(b.d); });
}

float dot_q5_0_avx2(const uint8_t* w, const uint8_t* x, int64_t n) {
  return dot_sym32_avx2<block_q5_0>(
      w, x, n,
      [](const block_q5_0& b) {
        return _mm256_sub_epi8(_mm256_or_si256(nibbles(b.qs), bits_to_0x10(b.qh)), _mm256_set1_epi8(16));
      },
      [](const block_q5_0& b) { return h2f(b.d); });
}

float dot_iq4_nl_avx2(const uint8_t* w, const uint8_t* x, int64_t n) {
  const __m256i t = table16(kvalues_iq4nl);
  return dot_sym32_avx2<block_iq4_nl>(
      w, x, n, [t](const block_iq4_nl& b) { return _mm256_shuffle_epi8(t, nibbles(b.qs)); },
      [](const block_iq4_nl& b) { return h2f(b.d); });
}

float dot_mxfp4_avx2(const uint8_t* w, const uint8_t* x, int64_t n) {
  const __m256i t = table16(kvalues_mxfp4);
  return dot_sym32_avx2<block_mxfp4>(
      w, x, n, [t](const block_mxfp4& b) { return _mm256_shuffle_epi8(t, nibbles(b.qs)); },
      [](const block_mxfp4& b) { return e8m0_to_fp32_half(b.e); });
}

float dot_q4_1_avx2(const uint8_t* w, const uint8_t* x, int64_t n) {
  return dot_affine32_avx2<block_q4_1>(w, x, n, [](const block_q4_1& b) { return nibbles(b.qs); });
}

float dot_q5_1_avx2(const uint8_t* w, const uint8_t* x, int64_t n) {
  return dot_affine32_avx2<block_q5_1>(
      w, x, n, [](const block_q5_1& b) { return _mm256_or_si256(nibbles(b.qs), bits_to_0x10(b.qh)); });
}

namespace {

// Q5_K: per pair of sub-blocks (64 elements), low nibbles + bit 2j of qh -> sub-block 2j, high
// nibbles + bit 2j+1 -> 2j+1; isum exact in int32 as the scalar dot's. B inputs share the unpacking.
template <int B>
void tile_q5_k(const uint8_t* w, const uint8_t* const* x, int64_t n, float* out) {
  auto wb = reinterpret_cast<const block_q5_k*>(w);
  const block_q8_k* xb[B];
  for (int k = 0; k < B; ++k) xb[k] = reinterpret_cast<const block_q8_k*>(x[k]);
  const __m256i m4 = _mm256_set1_epi8(0x0F), m1 = _mm256_set1_epi8(1);
  float acc[B] = {}, acc_m[B] = {};
  for (int64_t i = 0; i < n / qk_k; ++i) {
    const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wb[i].qh));
    __m256i isum[B];
    int32_t msum[B] = {};
    for (int k = 0; k < B; ++k) isum[k] = _mm256_setzero_si256();
    for (int j = 0; j < 4; ++j) {
      uint8_t sc0, m0, sc1, mm1;
      get_scale_min_k4(2 * j, wb[i].scales, &sc0, &m0);
      get_scale_min_k4(2 * j + 1, wb[i].scales, &sc1, &mm1);
      const __m256i ql = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wb[i].qs + 32 * j));
      const __m256i h0 = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2 * j), m1), 4);
      const __m256i h1 = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2 * j + 1), m1), 4);
      const __m256i q0 = _mm256_or_si256(_mm256_and_si256(ql, m4), h0);
      const __m256i q1 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql, 4), m4), h1);
      const __m256i s0 = _mm256_set1_epi16(sc0), s1 = _mm256_set1_epi16(sc1);
      for (int k = 0; k < B; ++k) {
        const __m256i y0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xb[k][i].qs + 64 * j));
        const __m256i y1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xb[k][i].qs + 64 * j + 32));
        isum[k] = _mm256_add_epi32(isum[k], _mm256_madd_epi16(_mm256_maddubs_epi16(q0, y0), s0));
        isum[k] = _mm256_add_epi32(isum[k], _mm256_madd_epi16(_mm256_maddubs_epi16(q1, y1), s1));
        const int16_t* bs = xb[k][i].bsums + 4 * j;
        msum[k] += m0 * (bs[0] + bs[1]) + mm1 * (bs[2] + bs[3]);
      }
    }
    const float d = h2f(wb[i].d), dmin = h2f(wb[i].dmin);
    for (int k = 0; k < B; ++k) {
      acc[k] += (d * xb[k][i].d) * static_cast<float>(hsum_i32(isum[k]));
      acc_m[k] += (-dmin * xb[k][i].d) * static_cast<float>(msum[k]);
    }
  }
  for (int k = 0; k < B; ++k) out[k] = acc[k] + acc_m[k];
}

// IQ4_XS: per 32-element sub-block the code book values times y, scaled by ls - 32.
template <int B>
void tile_iq4_xs(const uint8_t* w, const uint8_t* const* x, int64_t n, float* out) {
  auto wb = reinterpret_cast<const block_iq4_xs*>(w);
  const block_q8_k* xb[B];
  for (int k = 0; k < B; ++k) xb[k] = reinterpret_cast<const block_q8_k*>(x[k]);
  const __m256i t = table16(kvalues_iq4nl);
  float acc[B] = {};
  for (int64_t i = 0; i < n / qk_k; ++i) {
    __m256i isum[B];
    for (int k = 0; k < B; ++k) isum[k] = _mm256_setzero_si256();
    for (int ib = 0; ib < 8; ++ib) {
      const __m256i q = _mm256_shuffle_epi8(t, nibbles(wb[i].qs + 16 * ib));
      const __m256i aq = _mm256_sign_epi8(q, q);
      const __m256i sc = _mm256_set1_epi16(static_cast<int16_t>(iq4_xs_scale(wb[i], ib) - 32));
      for (int k = 0; k < B; ++k) {
        const __m256i y = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xb[k][i].qs + 32 * ib));
        isum[k] = _mm256_add_epi32(isum[k], _mm256_madd_epi16(_mm256_maddubs_epi16(aq, _mm256_sign_epi8(y, q)), sc));
      }
    }
    const float d = h2f(wb[i].d);
    for (int k = 0; k < B; ++k) acc[k] += (d * xb[k][i].d) * static_cast<float>(hsum_i32(isum[k]));
  }
  for (int k = 0; k < B; ++k) out[k] = acc[k];
}

}  // namespace

float dot_q5_k_avx2(const uint8_t* w, const uint8_t* x, int64_t n) {
  float out;
  tile_q5_k<1>(w, &x, n, &out);
  return out;
}

float dot_iq4_xs_avx2(const uint8_t* w, const uint8_t* x, int64_t n) {
  float out;
  tile_iq4_xs<1>(w, &x, n, &out);
  return out;
}

void tile_more_avx2(weight_type t, const uint8_t* w, const uint8_t* const* x, int64_t n, float* out, int n_x) {
  by_width(n_x, [&](auto B) {
    constexpr int b = decltype(B)::value;
    switch (t) {
      case weight_type::q4_0: tile_sym32_avx2<b, block_q4_0>(w, x, n, out, q4_0_q{}, d16{}); break;
      case weight_type::q5_0: tile_sym32_avx2<b, block_q5_0>(w, x, n, out, q5_0_q{}, d16{}); break;
      case weight_type::iq4_nl: tile_sym32_avx2<b, block_iq4_nl>(w, x, n, out, iq4_nl_q{}, d16{}); break;
      case weight_type::mxfp4: tile_sym32_avx2<b, block_mxfp4>(w, x, n, out, mxfp4_q{}, d_e8m0{}); break;
      case weight_type::q4_1: tile_affine32_avx2<b, block_q4_1>(w, x, n, out, q4_1_q{}); break;
      case weight_type::q5_1: tile_affine32_avx2<b, block_q5_1>(w, x, n, out, q5_1_q{}); break;
      case weight_type::q5_k: tile_q5_k<b>(w, x, n, out); break;
      case weight_type::iq4_xs: tile_iq4_xs<b>(w, x, n, out); break;
      case weight_type::q2_k: tile_q2_k(w, x, n, out, b); break;
      case weight_type::q3_k: tile_q3_k(w, x, n, out, b); break;
      default: for (int k = 0; k < b; ++k) out[k] = dot_more(t)(w, x[k], n); break;
    }
  });
}

}  // namespace agentq::kernels::detail

#endif  // AGENTQ_DOTS_MORE_AVX2
