// Per-format row dots for matvec.cu (decode, fp32 activations): Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL,
// MXFP4 (32-element blocks), Q5_K, IQ4_XS, Q2_K and Q3_K. Each lane reads its share of a block's
// bytes straight from the weights (no per-element scale decoding, no scratch buffer), decodes
// the scales once per (block, lane), and adds its partial dot to acc[j] for each of NX vectors.
// NOTE: every lane runs the same fmaf sequence per vector for NX = 1 and NX = kChunk, so a row's
// result does not depend on n_x (matvec_kernel's contract); the warp sum is matvec.cu's.
#pragma once

#include "common.cuh"

namespace agentq::kernels::cuda::detail {

// 4 bytes at p (A: the alignment the block layout guarantees there).
template <int A>
__device__ __forceinline__ uint32_t load_u32a(const uint8_t* p) {
  if constexpr (A >= 4) return __ldg(reinterpret_cast<const uint32_t*>(p));
  else if constexpr (A == 2) return uint32_t(load_u16(p)) | (uint32_t(load_u16(p + 2)) << 16);
  else return uint32_t(p[0]) | (uint32_t(p[1]) << 8) | (uint32_t(p[2]) << 16) | (uint32_t(p[3]) << 24);
}

// Entry idx (< 16) of a 16-byte signed table held in 4 words, by two byte permutes (no divergent
// constant-memory reads).
__device__ __forceinline__ float table16(uint32_t w0, uint32_t w1, uint32_t w2, uint32_t w3, uint32_t idx) {
  const uint32_t v = (idx & 8) ? __byte_perm(w2, w3, idx & 7) : __byte_perm(w0, w1, idx & 7);
  return float(int8_t(v & 0xff));
}
// k_iq4nl and k_mxfp4 (common.cuh) as words, little-endian.
__device__ __forceinline__ float iq4nl_value(uint32_t idx) {
  return table16(0xBFAD9881u, 0xF6EADDCFu, 0x26190D01u, 0x71594535u, idx);
}
__device__ __forceinline__ float mxfp4_value(uint32_t idx) {
  return table16(0x03020100u, 0x0C080604u, 0xFDFEFF00u, 0xF4F8FAFCu, idx);
}

__device__ __forceinline__ void load_x4(const float* p, float* v) {  // 4 floats, 16-byte aligned
  const float4 a = *reinterpret_cast<const float4*>(p);
  v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w;
}

// ---- 32-element formats: 4 lanes per block, 8 blocks per warp step. Lane part p takes qs bytes
// 4p..4p+3, i.e. elements 4p + t (low nibbles) and 16 + 4p + t (high), t < 4.
struct quants32 {
  float q[8];   // elements 4p + t, then 16 + 4p + t
  float d, m;   // x = d * q (+ m for the affine formats)
};

template <weight_type T>
struct fmt32;
template <>
struct fmt32<weight_type::q4_0> {
  static constexpr int bytes = 18;
  static constexpr bool affine = false;
  static __device__ __forceinline__ void decode(const uint8_t* b, int p, quants32& o) {
    const uint32_t qs = load_u32a<2>(b + 2 + 4 * p);
    o.d = f16_bits_to_float(load_u16(b));
#pragma unroll
    for (int t = 0; t < 4; ++t) {
      o.q[t] = float(int((qs >> (8 * t)) & 0xF) - 8);
      o.q[4 + t] = float(int((qs >> (8 * t + 4)) & 0xF) - 8);
    }
  }
};
template <>
struct fmt32<weight_type::q4_1> {
  static constexpr int bytes = 20;
  static constexpr bool affine = true;
  static __device__ __forceinline__ void decode(const uint8_t* b, int p, quants32& o) {
    const uint32_t qs = load_u32a<4>(b + 4 + 4 * p);
    o.d = f16_bits_to_float(load_u16(b));
    o.m = f16_bits_to_float(load_u16(b + 2));
#pragma unroll
    for (int t = 0; t < 4; ++t) {
      o.q[t] = float((qs >> (8 * t)) & 0xF);
      o.q[4 + t] = float((qs >> (8 * t + 4)) & 0xF);
    }
  }
};
// Q5_0 / Q5_1: the fifth bit of element e is bit e of qh (32 bits).
template <>
struct fmt32<weight_type::q5_0> {
  static constexpr int bytes = 22;
  static constexpr bool affine = false;
  static __device__ __forceinline__ void decode(const uint8_t* b, int p, quants32& o) {
    const uint32_t qh = load_u32a<2>(b + 2), qs = load_u32a<2>(b + 6 + 4 * p);
    o.d = f16_bits_to_float(load_u16(b));
#pragma unroll
    for (int t = 0; t < 4; ++t) {
      const int e = 4 * p + t;
      o.q[t] = float(int(((qs >> (8 * t)) & 0xF) | (((qh >> e) & 1) << 4)) - 16);
      o.q[4 + t] = float(int(((qs >> (8 * t + 4)) & 0xF) | (((qh >> (e + 16)) & 1) << 4)) - 16);
    }
  }
};
template <>
struct fmt32<weight_type::q5_1> {
  static constexpr int bytes = 24;
  static constexpr bool affine = true;
  static __device__ __forceinline__ void decode(const uint8_t* b, int p, quants32& o) {
    const uint32_t qh = load_u32a<4>(b + 4), qs = load_u32a<4>(b + 8 + 4 * p);
    o.d = f16_bits_to_float(load_u16(b));
    o.m = f16_bits_to_float(load_u16(b + 2));
#pragma unroll
    for (int t = 0; t < 4; ++t) {
      const int e = 4 * p + t;
      o.q[t] = float(((qs >> (8 * t)) & 0xF) | (((qh >> e) & 1) << 4));
      o.q[4 + t] = float(((qs >> (8 * t + 4)) & 0xF) | (((qh >> (e + 16)) & 1) << 4));
    }
  }
};
template <>
struct fmt32<weight_type::iq4_nl> {
  static constexpr int bytes = 18;
  static constexpr bool affine = false;
  static __device__ __forceinline__ void decode(const uint8_t* b, int p, quants32& o) {
    const uint32_t qs = load_u32a<2>(b + 2 + 4 * p);
    o.d = f16_bits_to_float(load_u16(b));
#pragma unroll
    for (int t = 0; t < 4; ++t) {
      o.q[t] = iq4nl_value((qs >> (8 * t)) & 0xF);
      o.q[4 + t] = iq4nl_value((qs >> (8 * t + 4)) & 0xF);
    }
  }
};
template <>
struct fmt32<weight_type::mxfp4> {
  static constexpr int bytes = 17;
  static constexpr bool affine = false;
  static __device__ __forceinline__ void decode(const uint8_t* b, int p, quants32& o) {
    const uint32_t qs = load_u32a<1>(b + 1 + 4 * p);
    const uint32_t bits = b[0] < 2 ? 0x00200000u << b[0] : uint32_t(b[0] - 1) << 23;  // E8M0, halved
    o.d = __uint_as_float(bits);
#pragma unroll
    for (int t = 0; t < 4; ++t) {
      o.q[t] = mxfp4_value((qs >> (8 * t)) & 0xF);
      o.q[4 + t] = mxfp4_value((qs >> (8 * t + 4)) & 0xF);
    }
  }
};

template <weight_type T, int NX>
__device__ __forceinline__ void row_dot_q32(const uint8_t* __restrict__ w, int64_t n_in, const float* const* xs, int lane,
                                            float* acc) {
  using F = fmt32<T>;
  const int64_t n_blocks = n_in / 32;
  const int p = lane % 4;
#pragma unroll 2
  for (int64_t b = lane / 4; b < n_blocks; b += 8) {
    quants32 o;
    F::decode(w + b * F::bytes, p, o);
#pragma unroll
    for (int j = 0; j < NX; ++j) {
      float xv[8];
      load_x4(xs[j] + b * 32 + 4 * p, xv);
      load_x4(xs[j] + b * 32 + 16 + 4 * p, xv + 4);
      float s = 0.0f;
#pragma unroll
      for (int k = 0; k < 8; ++k) s = fmaf(o.q[k], xv[k], s);
      if constexpr (F::affine) {
        const float sx = ((xv[0] + xv[1]) + (xv[2] + xv[3])) + ((xv[4] + xv[5]) + (xv[6] + xv[7]));
        acc[j] = fmaf(o.d, s, fmaf(o.m, sx, acc[j]));
      } else {
        acc[j] = fmaf(o.d, s, acc[j]);
      }
    }
  }
}

// ---- Q5_K (176 B: d, dmin, scales[12], qh[32], qs[128]; 16-byte aligned): Q4_K's split, 8 lanes
// per block, 4 blocks per warp step. Lane l8: 64-element group g = l8 / 2 and half h = l8 % 2, i.e.
// qs bytes 32g + 16h .. +16 (low nibbles: elements 64g + 16h + t, high: + 32) and their fifth bits
// (bits 2g / 2g + 1 of qh[16h + t]).
template <int NX>
__device__ __forceinline__ void row_dot_q5_k(const uint8_t* __restrict__ w, int64_t n_in, const float* const* xs, int lane,
                                             float* acc) {
  const int64_t n_blocks = n_in / 256;
  const int l8 = lane % 8, g = l8 / 2, h = l8 % 2;
#pragma unroll 2
  for (int64_t b = lane / 8; b < n_blocks; b += 4) {
    const uint8_t* blk = w + b * 176;
    const uint4 qv = __ldg(reinterpret_cast<const uint4*>(blk + 48 + 32 * g + 16 * h));
    const uint4 hv = __ldg(reinterpret_cast<const uint4*>(blk + 16 + 16 * h));
    const float d = f16_bits_to_float(load_u16(blk)), dmin = f16_bits_to_float(load_u16(blk + 2));
    int s_lo, m_lo, s_hi, m_hi;
    scale_min_k4(2 * g, blk + 4, &s_lo, &m_lo);
    scale_min_k4(2 * g + 1, blk + 4, &s_hi, &m_hi);
    const float d_lo = d * float(s_lo), d_hi = d * float(s_hi);
    const float m_lo_f = dmin * float(m_lo), m_hi_f = dmin * float(m_hi);
    const uint32_t qw[4] = {qv.x, qv.y, qv.z, qv.w}, hw[4] = {hv.x, hv.y, hv.z, hv.w};
    float q_lo[16], q_hi[16];
#pragma unroll
    for (int k = 0; k < 4; ++k)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const uint32_t byte = (qw[k] >> (8 * e)) & 0xff, hb = (hw[k] >> (8 * e)) & 0xff;
        q_lo[4 * k + e] = float((byte & 0xF) | (((hb >> (2 * g)) & 1) << 4));
        q_hi[4 * k + e] = float((byte >> 4) | (((hb >> (2 * g + 1)) & 1) << 4));
      }
#pragma unroll
    for (int j = 0; j < NX; ++j) {
      const float* x_lo = xs[j] + b * 256 + 64 * g + 16 * h;
      const float* x_hi = x_lo + 32;
      float dot_lo = 0.0f, dot_hi = 0.0f, sum_lo = 0.0f, sum_hi = 0.0f;
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        float a[4], c[4];
        load_x4(x_lo + 4 * k, a);
        load_x4(x_hi + 4 * k, c);
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          dot_lo = fmaf(q_lo[4 * k + e], a[e], dot_lo);
          dot_hi = fmaf(q_hi[4 * k + e], c[e], dot_hi);
          sum_lo += a[e];
          sum_hi += c[e];
        }
      }
      float s = acc[j];
      s = fmaf(d_lo, dot_lo, s);
      s = fmaf(-m_lo_f, sum_lo, s);
      s = fmaf(d_hi, dot_hi, s);
      s = fmaf(-m_hi_f, sum_hi, s);
      acc[j] = s;
    }
  }
}

// ---- IQ4_XS (136 B: d, scales_h, scales_l[4], qs[128]; 8-byte aligned): 8 lanes per block, lane
// l8 = sub-block ib (32 elements: qs[16 ib + t] low nibble = element t, high = 16 + t), 4 blocks per
// warp step.
template <int NX>
__device__ __forceinline__ void row_dot_iq4_xs(const uint8_t* __restrict__ w, int64_t n_in, const float* const* xs,
                                               int lane, float* acc) {
  const int64_t n_blocks = n_in / 256;
  const int ib = lane % 8;
#pragma unroll 2
  for (int64_t b = lane / 8; b < n_blocks; b += 4) {
    const uint8_t* blk = w + b * 136;
    const uint2 q0 = __ldg(reinterpret_cast<const uint2*>(blk + 8 + 16 * ib));
    const uint2 q1 = __ldg(reinterpret_cast<const uint2*>(blk + 16 + 16 * ib));
    const int ls = ((blk[4 + ib / 2] >> (4 * (ib % 2))) & 0xF) | (((load_u16(blk + 2) >> (2 * ib)) & 3) << 4);
    const float dl = f16_bits_to_float(load_u16(blk)) * float(ls - 32);
    const uint32_t qw[4] = {q0.x, q0.y, q1.x, q1.y};
    float q_lo[16], q_hi[16];
#pragma unroll
    for (int k = 0; k < 4; ++k)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        q_lo[4 * k + e] = iq4nl_value((qw[k] >> (8 * e)) & 0xF);
        q_hi[4 * k + e] = iq4nl_value((qw[k] >> (8 * e + 4)) & 0xF);
      }
#pragma unroll
    for (int j = 0; j < NX; ++j) {
      const float* x0 = xs[j] + b * 256 + 32 * ib;
      float s = 0.0f;
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        float a[4], c[4];
        load_x4(x0 + 4 * k, a);
        load_x4(x0 + 16 + 4 * k, c);
#pragma unroll
        for (int e = 0; e < 4; ++e) s = fmaf(q_lo[4 * k + e], a[e], s);
#pragma unroll
        for (int e = 0; e < 4; ++e) s = fmaf(q_hi[4 * k + e], c[e], s);
      }
      acc[j] = fmaf(dl, s, acc[j]);
    }
  }
}

// ---- Q2_K (84 B: scales[16], qs[64], d, dmin) and Q3_K (110 B: hmask[32], qs[64], scales[12], d):
// 8 lanes per block, 4 blocks per warp step. Lane l8 takes elements 32 l8 .. 32 l8 + 31 (sub-blocks
// 2 l8, 2 l8 + 1): the 2-bit field sh = l8 % 4 of qs[32 k + l], k = l8 / 4, l < 32 (and for Q3_K the
// hmask bit 4k + sh of byte l, + 4 where set, - 4 from every quant).
template <weight_type T, int NX>
__device__ __forceinline__ void row_dot_q23_k(const uint8_t* __restrict__ w, int64_t n_in, const float* const* xs,
                                              int lane, float* acc) {
  constexpr bool q3 = T == weight_type::q3_k;
  constexpr int bytes = q3 ? 110 : 84, qs_off = q3 ? 32 : 16;
  const int64_t n_blocks = n_in / 256;
  const int l8 = lane % 8, k = l8 / 4, sh = l8 % 4;
#pragma unroll 1
  for (int64_t b = lane / 8; b < n_blocks; b += 4) {
    const uint8_t* blk = w + b * bytes;
    float q[32];
#pragma unroll
    for (int u = 0; u < 8; ++u) {
      // Q2_K: qs at 16 (4-byte aligned); Q3_K: qs at 32, hmask at 0 (2-byte aligned blocks).
      const uint32_t qs = q3 ? load_u32a<2>(blk + qs_off + 32 * k + 4 * u) : load_u32a<4>(blk + qs_off + 32 * k + 4 * u);
      const uint32_t hm = q3 ? load_u32a<2>(blk + 4 * u) : 0u;
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int v = int((qs >> (8 * e + 2 * sh)) & 3);
        q[4 * u + e] = q3 ? float(v - (((hm >> (8 * e + 4 * k + sh)) & 1) ? 0 : 4)) : float(v);
      }
    }
    float dl[2], ml[2] = {0.0f, 0.0f};
    if constexpr (q3) {
      const uint8_t* sc = blk + 96;
      const float d = f16_bits_to_float(load_u16(blk + 108));
#pragma unroll
      for (int t = 0; t < 2; ++t) {
        const int is = 2 * l8 + t;
        const int s = (((sc[is % 8] >> (4 * (is / 8))) & 0xF) | (((sc[8 + is % 4] >> (2 * (is / 4))) & 3) << 4)) - 32;
        dl[t] = d * float(s);
      }
    } else {
      const float d = f16_bits_to_float(load_u16(blk + 80)), dmin = f16_bits_to_float(load_u16(blk + 82));
#pragma unroll
      for (int t = 0; t < 2; ++t) {
        const uint8_t sc = blk[2 * l8 + t];
        dl[t] = d * float(sc & 0xF);
        ml[t] = dmin * float(sc >> 4);
      }
    }
#pragma unroll
    for (int j = 0; j < NX; ++j) {
      const float* x0 = xs[j] + b * 256 + 32 * l8;
      float s = acc[j];
#pragma unroll
      for (int t = 0; t < 2; ++t) {
        float dot = 0.0f, sum = 0.0f;
#pragma unroll
        for (int u = 0; u < 4; ++u) {
          float a[4];
          load_x4(x0 + 16 * t + 4 * u, a);
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            dot = fmaf(q[16 * t + 4 * u + e], a[e], dot);
            sum += a[e];
          }
        }
        s = fmaf(dl[t], dot, s);
        if constexpr (!q3) s = fmaf(-ml[t], sum, s);
      }
      acc[j] = s;
    }
  }
}

// Whether matvec.cu has a dedicated row dot here for T (the rest of the non-float formats go
// through dequant_elem_more).
template <weight_type T>
constexpr bool has_quant_row_dot =
    T == weight_type::q4_0 || T == weight_type::q4_1 || T == weight_type::q5_0 || T == weight_type::q5_1 ||
    T == weight_type::iq4_nl || T == weight_type::mxfp4 || T == weight_type::q5_k || T == weight_type::iq4_xs ||
    T == weight_type::q2_k || T == weight_type::q3_k;

template <weight_type T, int NX>
__device__ __forceinline__ void quant_row_dot(const uint8_t* __restrict__ w, int64_t n_in, const float* const* xs, int lane,
                                              float* acc) {
  if constexpr (T == weight_type::q5_k) row_dot_q5_k<NX>(w, n_in, xs, lane, acc);
  else if constexpr (T == weight_type::iq4_xs) row_dot_iq4_xs<NX>(w, n_in, xs, lane, acc);
  else if constexpr (T == weight_type::q2_k || T == weight_type::q3_k) row_dot_q23_k<T, NX>(w, n_in, xs, lane, acc);
  else row_dot_q32<T, NX>(w, n_in, xs, lane, acc);
}

}  // namespace agentq::kernels::cuda::detail
