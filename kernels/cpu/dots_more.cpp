// Generic dot products for the quants_more formats: each block unpacked to int8, an exact
// int32 sum per (sub-)block against 8-bit activations, then fixed-order float accumulation.
// Q4_0/Q4_1/Q5_0/Q5_1/IQ4_NL/MXFP4 take Q8_0-style activations, Q2_K/Q3_K/Q5_K/IQ4_XS Q8_K's.
#include <cstring>

#include "agentq/kernels.h"
#include "cpu/quants_internal.h"

namespace agentq::kernels::detail {

namespace {

// NOTE: plain loops over unpacked int8 that the compiler vectorizes; the result is exact
// integer arithmetic, so the vector width never changes a value.
inline int32_t idot(const int8_t* a, const int8_t* b, int n) {
  int32_t s = 0;
  for (int i = 0; i < n; ++i) s += int32_t(a[i]) * int32_t(b[i]);
  return s;
}
inline float lane_sum8(const float* acc) {
  float t[4];
  for (int l = 0; l < 4; ++l) t[l] = acc[l] + acc[l + 4];
  return (t[0] + t[2]) + (t[1] + t[3]);
}
inline int32_t isum8(const int8_t* a, int n) {
  int32_t s = 0;
  for (int i = 0; i < n; ++i) s += a[i];
  return s;
}

// 32 nibbles of a 16-byte block (low nibbles first) through a table of 16 values.
inline void unpack_nibbles(const uint8_t* qs, const int8_t* table, int8_t* q) {
  for (int j = 0; j < 16; ++j) {
    q[j] = table[qs[j] & 0xF];
    q[j + 16] = table[qs[j] >> 4];
  }
}

constexpr int8_t k_q4_0[16] = {-8, -7, -6, -5, -4, -3, -2, -1, 0, 1, 2, 3, 4, 5, 6, 7};
constexpr int8_t k_q4_1[16] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};

inline void unpack_q5(const uint8_t* qs, const uint8_t* qh_bytes, int bias, int8_t* q) {
  uint32_t qh;
  std::memcpy(&qh, qh_bytes, 4);
  for (int j = 0; j < 16; ++j) {
    q[j] = static_cast<int8_t>(((qs[j] & 0xF) | (((qh >> j) & 1) << 4)) - bias);
    q[j + 16] = static_cast<int8_t>(((qs[j] >> 4) | (((qh >> (j + 16)) & 1) << 4)) - bias);
  }
}

// ---- against Q8_0 activations ----
// NOTE: the accumulation order is lane_sum8's: block i into lane i % 8, the 8 lanes reduced
// ((l0+l4)+(l2+l6)) + ((l1+l5)+(l3+l7)); the AVX2 kernels (dots_more_avx2.cpp) keep 8 blocks'
// terms in one register in exactly this order, so both give the same bits.

template <class Block, class Unpack>
float dot_sym32(const uint8_t* w, const uint8_t* x, int64_t n, Unpack unpack) {
  auto wb = reinterpret_cast<const Block*>(w);
  auto xb = reinterpret_cast<const block_q8_0x*>(x);
  float acc[8] = {};
  int8_t q[32];
  for (int64_t i = 0; i < n / 32; ++i) {
    const float d = unpack(wb[i], q);
    acc[i % 8] += (d * xb[i].d) * static_cast<float>(idot(q, xb[i].qs, 32));
  }
  return lane_sum8(acc);
}

// x = d * q + m: sum = d * dx * sum(q * y) + m * dx * sum(y).
template <class Block, class Unpack>
float dot_affine32(const uint8_t* w, const uint8_t* x, int64_t n, Unpack unpack) {
  auto wb = reinterpret_cast<const Block*>(w);
  auto xb = reinterpret_cast<const block_q8_0x*>(x);
  float acc[8] = {};
  int8_t q[32];
  for (int64_t i = 0; i < n / 32; ++i) {
    unpack(wb[i], q);
    const float dq = fp16_to_fp32(wb[i].d) * xb[i].d, dm = fp16_to_fp32(wb[i].m) * xb[i].d;
    acc[i % 8] += dq * static_cast<float>(idot(q, xb[i].qs, 32)) + dm * static_cast<float>(isum8(xb[i].qs, 32));
  }
  return lane_sum8(acc);
}

}  // namespace

float dot_q4_0_scalar(const uint8_t* w, const uint8_t* x, int64_t n) {
  return dot_sym32<block_q4_0>(w, x, n, [](const block_q4_0& b, int8_t* q) {
    unpack_nibbles(b.qs, k_q4_0, q);
    return fp16_to_fp32(b.d);
  });
}
float dot_q5_0_scalar(const uint8_t* w, const uint8_t* x, int64_t n) {
  return dot_sym32<block_q5_0>(w, x, n, [](const block_q5_0& b, int8_t* q) {
    unpack_q5(b.qs, b.qh, 16, q);
    return fp16_to_fp32(b.d);
  });
}
float dot_iq4_nl_scalar(const uint8_t* w, const uint8_t* x, int64_t n) {
  return dot_sym32<block_iq4_nl>(w, x, n, [](const block_iq4_nl& b, int8_t* q) {
    unpack_nibbles(b.qs, kvalues_iq4nl, q);
    return fp16_to_fp32(b.d);
  });
}
float dot_mxfp4_scalar(const uint8_t* w, const uint8_t* x, int64_t n) {
  return dot_sym32<block_mxfp4>(w, x, n, [](const block_mxfp4& b, int8_t* q) {
    unpack_nibbles(b.qs, kvalues_mxfp4, q);
    return e8m0_to_fp32_half(b.e);
  });
}
float dot_q4_1_scalar(const uint8_t* w, const uint8_t* x, int64_t n) {
  return dot_affine32<block_q4_1>(w, x, n, [](const block_q4_1& b, int8_t* q) { unpack_nibbles(b.qs, k_q4_1, q); });
}
float dot_q5_1_scalar(const uint8_t* w, const uint8_t* x, int64_t n) {
  return dot_affine32<block_q5_1>(w, x, n, [](const block_q5_1& b, int8_t* q) { unpack_q5(b.qs, b.qh, 0, q); });
}

// ---- against Q8_K activations: exact int32 per super-block, one float chain ----

// Q2_K / Q3_K element order: per 128, for each 2-bit shift, two runs of 16 (sub-blocks 2s, 2s+1).
float dot_q2_k_scalar(const uint8_t* w, const uint8_t* x, int64_t n) {
  auto wb = reinterpret_cast<const block_q2_k*>(w);
  auto xb = reinterpret_cast<const block_q8_k*>(x);
  float acc = 0, acc_m = 0;
  int8_t q[qk_k];
  for (int64_t i = 0; i < n / qk_k; ++i) {
    for (int k = 0; k < 2; ++k)
      for (int s = 0; s < 4; ++s)
        for (int l = 0; l < 32; ++l) q[128 * k + 32 * s + l] = static_cast<int8_t>((wb[i].qs[32 * k + l] >> (2 * s)) & 3);
    int32_t isum = 0, msum = 0;
    for (int is = 0; is < 16; ++is) {
      isum += (wb[i].scales[is] & 0xF) * idot(q + 16 * is, xb[i].qs + 16 * is, 16);
      msum += (wb[i].scales[is] >> 4) * xb[i].bsums[is];
    }
    acc += (fp16_to_fp32(wb[i].d) * xb[i].d) * static_cast<float>(isum);
    acc_m += (-fp16_to_fp32(wb[i].dmin) * xb[i].d) * static_cast<float>(msum);
  }
  return acc + acc_m;
}

float dot_q3_k_scalar(const uint8_t* w, const uint8_t* x, int64_t n) {
  auto wb = reinterpret_cast<const block_q3_k*>(w);
  auto xb = reinterpret_cast<const block_q8_k*>(x);
  float acc = 0;
  int8_t q[qk_k];
  int8_t sc[16];
  for (int64_t i = 0; i < n / qk_k; ++i) {
    for (int k = 0; k < 2; ++k)
      for (int s = 0; s < 4; ++s)
        for (int l = 0; l < 32; ++l) {
          const int lo = (wb[i].qs[32 * k + l] >> (2 * s)) & 3;
          const int hi = (wb[i].hmask[l] >> (4 * k + s)) & 1;
          q[128 * k + 32 * s + l] = static_cast<int8_t>(lo - (hi ? 0 : 4));
        }
    q3_k_scales(wb[i].scales, sc);
    int32_t isum = 0;
    for (int is = 0; is < 16; ++is) isum += sc[is] * idot(q + 16 * is, xb[i].qs + 16 * is, 16);
    acc += (fp16_to_fp32(wb[i].d) * xb[i].d) * static_cast<float>(isum);
  }
  return acc;
}

// Q5_K: Q4_K's order (per 64: low nibbles, then high) with bit j of qh[l] on sub-block j.
float dot_q5_k_scalar(const uint8_t* w, const uint8_t* x, int64_t n) {
  auto wb = reinterpret_cast<const block_q5_k*>(w);
  auto xb = reinterpret_cast<const block_q8_k*>(x);
  float acc = 0, acc_m = 0;
  int8_t q[qk_k];
  for (int64_t i = 0; i < n / qk_k; ++i) {
    for (int j = 0; j < 8; ++j)
      for (int l = 0; l < 32; ++l)
        q[32 * j + l] = static_cast<int8_t>(((wb[i].qs[32 * (j / 2) + l] >> (4 * (j % 2))) & 0xF) |
                                            (((wb[i].qh[l] >> j) & 1) << 4));
    int32_t isum = 0, msum = 0;
    for (int j = 0; j < 8; ++j) {
      uint8_t sc, m;
      get_scale_min_k4(j, wb[i].scales, &sc, &m);
      isum += sc * idot(q + 32 * j, xb[i].qs + 32 * j, 32);
      msum += m * (xb[i].bsums[2 * j] + xb[i].bsums[2 * j + 1]);
    }
    acc += (fp16_to_fp32(wb[i].d) * xb[i].d) * static_cast<float>(isum);
    acc_m += (-fp16_to_fp32(wb[i].dmin) * xb[i].d) * static_cast<float>(msum);
  }
  return acc + acc_m;
}

float dot_iq4_xs_scalar(const uint8_t* w, const uint8_t* x, int64_t n) {
  auto wb = reinterpret_cast<const block_iq4_xs*>(w);
  auto xb = reinterpret_cast<const block_q8_k*>(x);
  float acc = 0;
  int8_t q[qk_k];
  for (int64_t i = 0; i < n / qk_k; ++i) {
    for (int ib = 0; ib < 8; ++ib) unpack_nibbles(wb[i].qs + 16 * ib, kvalues_iq4nl, q + 32 * ib);
    int32_t isum = 0;
    for (int ib = 0; ib < 8; ++ib) isum += (iq4_xs_scale(wb[i], ib) - 32) * idot(q + 32 * ib, xb[i].qs + 32 * ib, 32);
    acc += (fp16_to_fp32(wb[i].d) * xb[i].d) * static_cast<float>(isum);
  }
  return acc;
}

// The dots matmul runs: the AVX2 kernels where built (the same bits), else the scalar ones.
#if AGENTQ_DOTS_MORE_AVX2
float dot_q4_0(const uint8_t* w, const uint8_t* x, int64_t n) { return dot_q4_0_avx2(w, x, n); }
float dot_q4_1(const uint8_t* w, const uint8_t* x, int64_t n) { return dot_q4_1_avx2(w, x, n); }
float dot_q5_0(const uint8_t* w, const uint8_t* x, int64_t n) { return dot_q5_0_avx2(w, x, n); }
float dot_q5_1(const uint8_t* w, const uint8_t* x, int64_t n) { return dot_q5_1_avx2(w, x, n); }
float dot_iq4_nl(const uint8_t* w, const uint8_t* x, int64_t n) { return dot_iq4_nl_avx2(w, x, n); }
float dot_mxfp4(const uint8_t* w, const uint8_t* x, int64_t n) { return dot_mxfp4_avx2(w, x, n); }
float dot_q5_k(const uint8_t* w, const uint8_t* x, int64_t n) { return dot_q5_k_avx2(w, x, n); }
float dot_iq4_xs(const uint8_t* w, const uint8_t* x, int64_t n) { return dot_iq4_xs_avx2(w, x, n); }
#else
float dot_q4_0(const uint8_t* w, const uint8_t* x, int64_t n) { return dot_q4_0_scalar(w, x, n); }
float dot_q4_1(const uint8_t* w, const uint8_t* x, int64_t n) { return dot_q4_1_scalar(w, x, n); }
float dot_q5_0(const uint8_t* w, const uint8_t* x, int64_t n) { return dot_q5_0_scalar(w, x, n); }
float dot_q5_1(const uint8_t* w, const uint8_t* x, int64_t n) { return dot_q5_1_scalar(w, x, n); }
float dot_iq4_nl(const uint8_t* w, const uint8_t* x, int64_t n) { return dot_iq4_nl_scalar(w, x, n); }
float dot_mxfp4(const uint8_t* w, const uint8_t* x, int64_t n) { return dot_mxfp4_scalar(w, x, n); }
float dot_q5_k(const uint8_t* w, const uint8_t* x, int64_t n) { return dot_q5_k_scalar(w, x, n); }
float dot_iq4_xs(const uint8_t* w, const uint8_t* x, int64_t n) { return dot_iq4_xs_scalar(w, x, n); }
#endif
#if AGENTQ_DOTS_MORE_AVX2
float dot_q2_k(const uint8_t* w, const uint8_t* x, int64_t n) {
  float out;
  tile_q2_k(w, &x, n, &out, 1);
  return out;
}
float dot_q3_k(const uint8_t* w, const uint8_t* x, int64_t n) {
  float out;
  tile_q3_k(w, &x, n, &out, 1);
  return out;
}
#else
float dot_q2_k(const uint8_t* w, const uint8_t* x, int64_t n) { return dot_q2_k_scalar(w, x, n); }
float dot_q3_k(const uint8_t* w, const uint8_t* x, int64_t n) { return dot_q3_k_scalar(w, x, n); }
#endif

dot_fn dot_more_scalar(weight_type t) {
  switch (t) {
    case weight_type::q4_0: return dot_q4_0_scalar;
    case weight_type::q4_1: return dot_q4_1_scalar;
    case weight_type::q5_0: return dot_q5_0_scalar;
    case weight_type::q5_1: return dot_q5_1_scalar;
    case weight_type::iq4_nl: return dot_iq4_nl_scalar;
    case weight_type::mxfp4: return dot_mxfp4_scalar;
    case weight_type::q2_k: return dot_q2_k_scalar;
    case weight_type::q3_k: return dot_q3_k_scalar;
    case weight_type::q5_k: return dot_q5_k_scalar;
    case weight_type::iq4_xs: return dot_iq4_xs_scalar;
    default: return nullptr;
  }
}

dot_fn dot_more(weight_type t) {
  switch (t) {
    case weight_type::q4_0: return dot_q4_0;
    case weight_type::q4_1: return dot_q4_1;
    case weight_type::q5_0: return dot_q5_0;
    case weight_type::q5_1: return dot_q5_1;
    case weight_type::iq4_nl: return dot_iq4_nl;
    case weight_type::mxfp4: return dot_mxfp4;
    case weight_type::q2_k: return dot_q2_k;
    case weight_type::q3_k: return dot_q3_k;
    case weight_type::q5_k: return dot_q5_k;
    case weight_type::iq4_xs: return dot_iq4_xs;
    default: return nullptr;
  }
}

}  // namespace agentq::kernels::detail
