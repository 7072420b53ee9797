// Per-format lane decoders for the block formats, and the two loops built on them: the matvec's
// row dot (decode, fp32 activations; matvec.cu) and the prefill GEMM's tile dequantiser
// (dequantize.cu). A decoder gives one lane its share of a block straight from the block's bytes
// (no per-element scale decoding): N quants as floats in S segments, segment s worth
// d[s] * q (+ m[s] for the formats with a min), and where each group of 4 quants sits in the block.
// NOTE: every lane runs the same fmaf sequence per vector for NX = 1 and NX = kChunk, so a row's
// result does not depend on n_x (matvec_kernel's contract); the warp sum is matvec.cu's.
// NOTE: tests/unit/engine/cuda_lanes.cpp compiles this header on the host (a warp's lanes one by one,
// host stand-ins for the device helpers) and checks every decoder against the CPU dequantizer.
#pragma once

#ifndef AGENTQ_CUDA_LANES_ON_HOST
#include "common.cuh"
#endif

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

// One lane's share of a block: q[N] (group g = q[4g .. 4g + 3]), segment s = groups
// [s * N / 4S, (s + 1) * N / 4S), each element of it worth d[s] * q (+ m[s] where has_min).
template <int N, int S>
struct lane_quants {
  float q[N];
  float d[S], m[S];
};

// The decoders: lane_fmt<T> has bytes / elems (one block), lanes (per block), n / segs (quants and
// segments per lane), has_min, unroll (the row dot's block loop: 1 where the quants' registers
// would spill, as measured for Q2_K / Q3_K), at(part, g) (block element of group g's first quant)
// and decode(block, part, out).
template <weight_type T>
struct lane_fmt;

// ---- 32-element formats: 4 lanes per block. Part p takes qs bytes 4p..4p+3: group 0 is elements
// 4p..4p+3 (low nibbles), group 1 elements 16 + 4p.. (high nibbles).
template <int Bytes, bool Min>
struct fmt32_base {
  static constexpr int bytes = Bytes, elems = 32, lanes = 4, n = 8, segs = 1, unroll = 2;
  static constexpr bool has_min = Min;
  using quants = lane_quants<8, 1>;
  static __device__ __forceinline__ int at(int p, int g) { return 16 * g + 4 * p; }
};
// The 8 nibbles of qs as quants through V (value of a nibble).
template <class V>
__device__ __forceinline__ void nibbles8(uint32_t qs, float* q, V value) {
#pragma unroll
  for (int t = 0; t < 4; ++t) {
    q[t] = value((qs >> (8 * t)) & 0xF);
    q[4 + t] = value((qs >> (8 * t + 4)) & 0xF);
  }
}
// Q5_0 / Q5_1: the nibbles of part p plus their fifth bits (bit e of qh for element e), minus sub.
__device__ __forceinline__ void nibbles8_q5(uint32_t qs, uint32_t qh, int p, int sub, float* q) {
#pragma unroll
  for (int t = 0; t < 4; ++t) {
    const int e = 4 * p + t;
    q[t] = float(int(((qs >> (8 * t)) & 0xF) | (((qh >> e) & 1) << 4)) - sub);
    q[4 + t] = float(int(((qs >> (8 * t + 4)) & 0xF) | (((qh >> (e + 16)) & 1) << 4)) - sub);
  }
}

template <>
struct lane_fmt<weight_type::q4_0> : fmt32_base<18, false> {
  static __device__ __forceinline__ void decode(const uint8_t* b, int p, quants& o) {
    o.d[0] = f16_bits_to_float(load_u16(b));
    nibbles8(load_u32a<2>(b + 2 + 4 * p), o.q, [](uint32_t v) { return float(int(v) - 8); });
  }
};
template <>
struct lane_fmt<weight_type::q4_1> : fmt32_base<20, true> {
  static __device__ __forceinline__ void decode(const uint8_t* b, int p, quants& o) {
    o.d[0] = f16_bits_to_float(load_u16(b));
    o.m[0] = f16_bits_to_float(load_u16(b + 2));
    nibbles8(load_u32a<4>(b + 4 + 4 * p), o.q, [](uint32_t v) { return float(v); });
  }
};
template <>
struct lane_fmt<weight_type::q5_0> : fmt32_base<22, false> {
  static __device__ __forceinline__ void decode(const uint8_t* b, int p, quants& o) {
    o.d[0] = f16_bits_to_float(load_u16(b));
    nibbles8_q5(load_u32a<2>(b + 6 + 4 * p), load_u32a<2>(b + 2), p, 16, o.q);
  }
};
template <>
struct lane_fmt<weight_type::q5_1> : fmt32_base<24, true> {
  static __device__ __forceinline__ void decode(const uint8_t* b, int p, quants& o) {
    o.d[0] = f16_bits_to_float(load_u16(b));
    o.m[0] = f16_bits_to_float(load_u16(b + 2));
    nibbles8_q5(load_u32a<4>(b + 8 + 4 * p), load_u32a<4>(b + 4), p, 0, o.q);
  }
};
template <>
struct lane_fmt<weight_type::iq4_nl> : fmt32_base<18, false> {
  static __device__ __forceinline__ void decode(const uint8_t* b, int p, quants& o) {
    o.d[0] = f16_bits_to_float(load_u16(b));
    nibbles8(load_u32a<2>(b + 2 + 4 * p), o.q, [](uint32_t v) { return iq4nl_value(v); });
  }
};
template <>
struct lane_fmt<weight_type::mxfp4> : fmt32_base<17, false> {
  static __device__ __forceinline__ void decode(const uint8_t* b, int p, quants& o) {
    o.d[0] = __uint_as_float(b[0] < 2 ? 0x00200000u << b[0] : uint32_t(b[0] - 1) << 23);  // E8M0, halved
    nibbles8(load_u32a<1>(b + 1 + 4 * p), o.q, [](uint32_t v) { return mxfp4_value(v); });
  }
};
// Q8_0 (34 B, 2-byte aligned): part p takes elements 8p..8p+7.
template <>
struct lane_fmt<weight_type::q8_0> : fmt32_base<34, false> {
  static __device__ __forceinline__ int at(int p, int g) { return 8 * p + 4 * g; }
  static __device__ __forceinline__ void decode(const uint8_t* b, int p, quants& o) {
    o.d[0] = f16_bits_to_float(load_u16(b));
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const uint16_t two = load_u16(b + 2 + 8 * p + 2 * k);
      o.q[2 * k] = float(static_cast<int8_t>(two & 0xff));
      o.q[2 * k + 1] = float(static_cast<int8_t>(two >> 8));
    }
  }
};

// ---- Q4_K / Q5_K (144 / 176 B, 16-byte aligned): 8 lanes per block. Part l8: 64-element group
// g = l8 / 2, half h = l8 % 2, i.e. qs bytes 32g + 16h .. +16: segment 0 the low nibbles (elements
// 64g + 16h + t), segment 1 the high ones (+ 32); Q5_K's fifth bits are bits 2g / 2g + 1 of qh[16h + t].
template <int Bytes>
struct fmt_k4_base {
  static constexpr int bytes = Bytes, elems = 256, lanes = 8, n = 32, segs = 2, unroll = 2;
  static constexpr bool has_min = true;
  using quants = lane_quants<32, 2>;
  static __device__ __forceinline__ int at(int l8, int g) { return 64 * (l8 / 2) + 16 * (l8 % 2) + 32 * (g / 4) + 4 * (g % 4); }
  // d[s] = d * scale, m[s] = -dmin * min of sub-blocks 2g + s (scales at sc: ggml's get_scale_min_k4 packing).
  static __device__ __forceinline__ void scales(const uint8_t* blk, int g, quants& o) {
    const float d = f16_bits_to_float(load_u16(blk)), dmin = f16_bits_to_float(load_u16(blk + 2));
#pragma unroll
    for (int s = 0; s < 2; ++s) {
      int sc, mn;
      scale_min_k4(2 * g + s, blk + 4, &sc, &mn);
      o.d[s] = d * float(sc);
      o.m[s] = -(dmin * float(mn));
    }
  }
};
template <>
struct lane_fmt<weight_type::q4_k> : fmt_k4_base<144> {
  static __device__ __forceinline__ void decode(const uint8_t* blk, int l8, quants& o) {
    const int g = l8 / 2;
    const uint4 qv = __ldg(reinterpret_cast<const uint4*>(blk + 16 + 32 * g + 16 * (l8 % 2)));
    scales(blk, g, o);
    const uint32_t qw[4] = {qv.x, qv.y, qv.z, qv.w};
#pragma unroll
    for (int k = 0; k < 16; ++k) {
      const uint32_t byte = (qw[k / 4] >> (8 * (k % 4))) & 0xff;
      o.q[k] = float(byte & 0xF);
      o.q[16 + k] = float(byte >> 4);
    }
  }
};
template <>
struct lane_fmt<weight_type::q5_k> : fmt_k4_base<176> {
  static __device__ __forceinline__ void decode(const uint8_t* blk, int l8, quants& o) {
    const int g = l8 / 2, h = l8 % 2;
    const uint4 qv = __ldg(reinterpret_cast<const uint4*>(blk + 48 + 32 * g + 16 * h));
    const uint4 hv = __ldg(reinterpret_cast<const uint4*>(blk + 16 + 16 * h));
    scales(blk, g, o);
    const uint32_t qw[4] = {qv.x, qv.y, qv.z, qv.w}, hw[4] = {hv.x, hv.y, hv.z, hv.w};
#pragma unroll
    for (int k = 0; k < 16; ++k) {
      const uint32_t byte = (qw[k / 4] >> (8 * (k % 4))) & 0xff, hb = (hw[k / 4] >> (8 * (k % 4))) & 0xff;
      o.q[k] = float((byte & 0xF) | (((hb >> (2 * g)) & 1) << 4));
      o.q[16 + k] = float((byte >> 4) | (((hb >> (2 * g + 1)) & 1) << 4));
    }
  }
};

// ---- IQ4_XS (136 B: d, scales_h, scales_l[4], qs[128]; 8-byte aligned): 8 lanes per block, part ib
// = sub-block ib (32 elements: qs[16 ib + t] low nibble = element t, high = 16 + t); groups
// alternate low / high: group 2k is elements 32 ib + 4k.., group 2k + 1 is 32 ib + 16 + 4k...
template <>
struct lane_fmt<weight_type::iq4_xs> {
  static constexpr int bytes = 136, elems = 256, lanes = 8, n = 32, segs = 1, unroll = 2;
  static constexpr bool has_min = false;
  using quants = lane_quants<32, 1>;
  static __device__ __forceinline__ int at(int ib, int g) { return 32 * ib + 16 * (g % 2) + 4 * (g / 2); }
  static __device__ __forceinline__ void decode(const uint8_t* blk, int ib, quants& o) {
    const uint2 q0 = __ldg(reinterpret_cast<const uint2*>(blk + 8 + 16 * ib));
    const uint2 q1 = __ldg(reinterpret_cast<const uint2*>(blk + 16 + 16 * ib));
    const int ls = ((blk[4 + ib / 2] >> (4 * (ib % 2))) & 0xF) | (((load_u16(blk + 2) >> (2 * ib)) & 3) << 4);
    o.d[0] = f16_bits_to_float(load_u16(blk)) * float(ls - 32);
    const uint32_t qw[4] = {q0.x, q0.y, q1.x, q1.y};
#pragma unroll
    for (int k = 0; k < 4; ++k)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        o.q[8 * k + e] = iq4nl_value((qw[k] >> (8 * e)) & 0xF);
        o.q[8 * k + 4 + e] = iq4nl_value((qw[k] >> (8 * e + 4)) & 0xF);
      }
  }
};

// ---- Q2_K (84 B: scales[16], qs[64], d, dmin) and Q3_K (110 B: hmask[32], qs[64], scales[12], d):
// 8 lanes per block. Part l8 takes elements 32 l8 .. 32 l8 + 31 (segments: sub-blocks 2 l8, 2 l8 + 1):
// the 2-bit field sh = l8 % 4 of qs[32 k + l], k = l8 / 4, l < 32 (and for Q3_K the hmask bit
// 4k + sh of byte l: - 4 where clear).
template <weight_type T>
struct fmt_k23 {
  static constexpr bool q3 = T == weight_type::q3_k;
  static constexpr int bytes = q3 ? 110 : 84, elems = 256, lanes = 8, n = 32, segs = 2, unroll = 1;
  static constexpr bool has_min = !q3;
  using quants = lane_quants<32, 2>;
  static __device__ __forceinline__ int at(int l8, int g) { return 32 * l8 + 4 * g; }
  static __device__ __forceinline__ void decode(const uint8_t* blk, int l8, quants& o) {
    constexpr int qs_off = q3 ? 32 : 16;
    const int k = l8 / 4, sh = l8 % 4;
#pragma unroll
    for (int u = 0; u < 8; ++u) {
      // Q2_K: qs at 16 (4-byte aligned); Q3_K: qs at 32, hmask at 0 (2-byte aligned blocks).
      const uint32_t qs = q3 ? load_u32a<2>(blk + qs_off + 32 * k + 4 * u) : load_u32a<4>(blk + qs_off + 32 * k + 4 * u);
      const uint32_t hm = q3 ? load_u32a<2>(blk + 4 * u) : 0u;
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int v = int((qs >> (8 * e + 2 * sh)) & 3);
        o.q[4 * u + e] = q3 ? float(v - (((hm >> (8 * e + 4 * k + sh)) & 1) ? 0 : 4)) : float(v);
      }
    }
    if constexpr (q3) {
      const uint8_t* sc = blk + 96;
      const float d = f16_bits_to_float(load_u16(blk + 108));
#pragma unroll
      for (int t = 0; t < 2; ++t) {
        const int is = 2 * l8 + t;
        const int s = (((sc[is % 8] >> (4 * (is / 8))) & 0xF) | (((sc[8 + is % 4] >> (2 * (is / 4))) & 3) << 4)) - 32;
        o.d[t] = d * float(s);
      }
    } else {
      const float d = f16_bits_to_float(load_u16(blk + 80)), dmin = f16_bits_to_float(load_u16(blk + 82));
#pragma unroll
      for (int t = 0; t < 2; ++t) {
        const uint8_t sc = blk[2 * l8 + t];
        o.d[t] = d * float(sc & 0xF);
        o.m[t] = -(dmin * float(sc >> 4));
      }
    }
  }
};
template <>
struct lane_fmt<weight_type::q2_k> : fmt_k23<weight_type::q2_k> {};
template <>
struct lane_fmt<weight_type::q3_k> : fmt_k23<weight_type::q3_k> {};

// ---- Q6_K (210 B: ql[128], qh[64], scales[16], d; 2-byte aligned): 32 lanes per block. Lane:
// half n = lane / 16, quarter c = lane / 4 % 4, u = lane % 4: elements 128 n + 32 c + 8u .. +8
// (l = 8u + t: the low 4 bits in ql[64 n + l + 32 (c % 2)] (high nibble where c >= 2), the high 2
// bits at bit 2c of qh[32 n + l]); one segment (its 8 elements share scale 8n + 2c + u / 2).
template <>
struct lane_fmt<weight_type::q6_k> {
  static constexpr int bytes = 210, elems = 256, lanes = 32, n = 8, segs = 1, unroll = 2;
  static constexpr bool has_min = false;
  using quants = lane_quants<8, 1>;
  static __device__ __forceinline__ int at(int lane, int g) { return 128 * (lane / 16) + 32 * (lane / 4 % 4) + 8 * (lane % 4) + 4 * g; }
  static __device__ __forceinline__ void decode(const uint8_t* blk, int lane, quants& o) {
    const int hn = lane / 16, c = lane / 4 % 4, l = 8 * (lane % 4);
    const uint8_t* ql = blk + 64 * hn + l + 32 * (c % 2);
    const uint8_t* qh = blk + 128 + 32 * hn + l;
    const int8_t sc = static_cast<int8_t>(blk[192 + 8 * hn + 2 * c + l / 16]);
    o.d[0] = f16_bits_to_float(load_u16(blk + 208)) * float(sc);
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const uint16_t lo2 = load_u16(ql + 2 * k), hi2 = load_u16(qh + 2 * k);
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int lo = ((lo2 >> (8 * e)) >> (c >= 2 ? 4 : 0)) & 0xF, hb = ((hi2 >> (8 * e)) >> (2 * c)) & 3;
        o.q[2 * k + e] = float((lo | (hb << 4)) - 32);
      }
    }
  }
};

// ---- The row dot (matvec): each lane adds its share of dot(row, xs[j]) to acc[j], j < NX, blocks
// lane / lanes, + 32 / lanes, ...; per block and segment one fmaf chain over its quants in group
// order (and a plain sum of x where the format has a min), then acc = fmaf(d, dot, acc) (and
// acc = fmaf(m, sum, acc)).
template <weight_type T, int NX>
__device__ __forceinline__ void quant_row_dot(const uint8_t* __restrict__ w, int64_t n_in, const float* const* xs, int lane,
                                              float* acc) {
  using F = lane_fmt<T>;
  constexpr int per_seg = F::n / 4 / F::segs;  // groups per segment
  const int64_t n_blocks = n_in / F::elems;
  const int part = lane % F::lanes;
#pragma unroll(F::unroll)
  for (int64_t b = lane / F::lanes; b < n_blocks; b += 32 / F::lanes) {
    typename F::quants o;
    F::decode(w + b * F::bytes, part, o);
#pragma unroll
    for (int j = 0; j < NX; ++j) {
      const float* x = xs[j] + b * F::elems;
      float s = acc[j];
#pragma unroll
      for (int sg = 0; sg < F::segs; ++sg) {
        float dot = 0.0f, sum = 0.0f;
#pragma unroll
        for (int g = sg * per_seg; g < (sg + 1) * per_seg; ++g) {
          float a[4];
          load_x4(x + F::at(part, g), a);
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            dot = fmaf(o.q[4 * g + e], a[e], dot);
            if constexpr (F::has_min) sum += a[e];
          }
        }
        s = fmaf(o.d[sg], dot, s);
        if constexpr (F::has_min) s = fmaf(o.m[sg], sum, s);
      }
      acc[j] = s;
    }
  }
}

// Whether matvec.cu runs quant_row_dot for T. NOTE: Q8_0, Q4_K and Q6_K keep matvec.cu's own row
// dots, measured on an H200 (docs/bench/cuda_h200.md); their decoders here serve the GEMM's tiles.
template <weight_type T>
constexpr bool has_quant_row_dot =
    T == weight_type::q4_0 || T == weight_type::q4_1 || T == weight_type::q5_0 || T == weight_type::q5_1 ||
    T == weight_type::iq4_nl || T == weight_type::mxfp4 || T == weight_type::q5_k || T == weight_type::iq4_xs ||
    T == weight_type::q2_k || T == weight_type::q3_k;

// Every block format has a lane decoder (the GEMM's tiles use all of them).
template <weight_type T>
constexpr bool has_lane_decoder = has_quant_row_dot<T> || T == weight_type::q8_0 || T == weight_type::q4_k ||
                                  T == weight_type::q6_k;

// ---- The tile dequantiser (GEMM): lane `part`'s share of the block at blk as floats, ggml's
// values bit for bit (d * q, or d * q + m with m the negated min: x - y is x + (-y) exactly), group by
// group: out(element of the block, float[4]).
// NOTE: __fmul_rn / __fadd_rn keep nvcc from contracting d * q + m into one fma (ggml rounds twice).
template <weight_type T, class Out>
__device__ __forceinline__ void dequant_lane(const uint8_t* __restrict__ blk, int part, Out out) {
  using F = lane_fmt<T>;
  constexpr int per_seg = F::n / 4 / F::segs;
  typename F::quants o;
  F::decode(blk, part, o);
#pragma unroll
  for (int g = 0; g < F::n / 4; ++g) {
    const int sg = g / per_seg;
    float v[4];
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const float dq = __fmul_rn(o.d[sg], o.q[4 * g + e]);
      if constexpr (F::has_min) v[e] = __fadd_rn(dq, o.m[sg]);
      else v[e] = dq;
    }
    out(F::at(part, g), v);
  }
}

}  // namespace agentq::kernels::cuda::detail
