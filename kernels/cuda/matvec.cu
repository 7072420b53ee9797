// Dequantising matrix-vector products for decode (memory-bound): one warp per
// weight row, four rows per block, fp32 accumulation; every format has its own row dot
// (Q4_0 ... MXFP4, Q5_K, IQ4_XS, Q2_K, Q3_K in matvec_quants.cuh). Weights stream once per
// chunk of up to 8 vectors; 128-bit loads where the block layout is 16-byte aligned
// (f32, f16, bf16, Q4_K, Q5_K); Q8_0 (34 B) and Q6_K (210 B) blocks are only 2-byte aligned.
#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "common.cuh"
#include "matvec_quants.cuh"

namespace agentq::kernels::cuda {

namespace {

constexpr int kRowsPerBlock = 4;  // warps per block
constexpr int kChunk = 8;         // vectors per pass when n_x > 1

__device__ __forceinline__ void load_x8(const float* x, float* v) {  // 8 floats, 16-byte aligned
  const float4 a = *reinterpret_cast<const float4*>(x);
  const float4 b = *reinterpret_cast<const float4*>(x + 4);
  v[0] = a.x; v[1] = a.y; v[2] = a.z; v[3] = a.w;
  v[4] = b.x; v[5] = b.y; v[6] = b.z; v[7] = b.w;
}

// The 8 16-bit weights (f16 or bf16) of a 16-byte load, as floats.
template <weight_type T>
__device__ __forceinline__ void unpack16x8(uint4 raw, float* wv) {
  const uint32_t words[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    if constexpr (T == weight_type::f16) {
      wv[2 * k] = detail::f16_bits_to_float(uint16_t(words[k]));
      wv[2 * k + 1] = detail::f16_bits_to_float(uint16_t(words[k] >> 16));
    } else {
      wv[2 * k] = __uint_as_float(words[k] << 16);
      wv[2 * k + 1] = __uint_as_float(words[k] & 0xffff0000u);
    }
  }
}

// acc[j] += dot(8 16-bit weights in raw, xs[j][i..i+8)), in element order.
template <weight_type T, int NX>
__device__ __forceinline__ void dot16x8(uint4 raw, const float* const* xs, int64_t i, float* acc) {
  float wv[8];
  unpack16x8<T>(raw, wv);
#pragma unroll
  for (int j = 0; j < NX; ++j) {
    float xv[8];
    load_x8(xs[j] + i, xv);
    float s = acc[j];
#pragma unroll
    for (int k = 0; k < 8; ++k) s = fmaf(wv[k], xv[k], s);
    acc[j] = s;
  }
}

// Each lane adds its share of dot(row, x[j]) to acc[j], j < NX. xs[j] points at vector j.
// NOTE: the per-vector arithmetic is identical for NX = 1 and NX = kChunk (explicit
// fmaf in a fixed order), so a row's result does not depend on n_x.
template <weight_type T, int NX>
__device__ __forceinline__ void row_dot(const uint8_t* __restrict__ w, int64_t n_in, const float* const* xs,
                                        int lane, float* acc) {
  if constexpr (T == weight_type::f32) {
    const float* wr = reinterpret_cast<const float*>(w);
#pragma unroll 4
    for (int64_t i = int64_t(lane) * 4; i < n_in; i += 128) {
      const float4 wv = __ldg(reinterpret_cast<const float4*>(wr + i));
#pragma unroll
      for (int j = 0; j < NX; ++j) {
        const float4 xv = *reinterpret_cast<const float4*>(xs[j] + i);
        float s = acc[j];
        s = fmaf(wv.x, xv.x, s); s = fmaf(wv.y, xv.y, s); s = fmaf(wv.z, xv.z, s); s = fmaf(wv.w, xv.w, s);
        acc[j] = s;
      }
    }
  } else if constexpr (T == weight_type::f16 || T == weight_type::bf16) {
    // NOTE: kLoads 16-byte loads are issued before any arithmetic (2 KiB in flight per warp:
    // one launch of a 4096-row matrix is otherwise latency-bound); the tail goes one load at
    // a time. Each lane still adds its chunks in increasing order, for any NX.
    constexpr int kLoads = 4;
    int64_t i = int64_t(lane) * 8;
    for (; i + (kLoads - 1) * 256 < n_in; i += kLoads * 256) {
      uint4 raw[kLoads];
#pragma unroll
      for (int u = 0; u < kLoads; ++u) raw[u] = __ldg(reinterpret_cast<const uint4*>(w + 2 * (i + u * 256)));
#pragma unroll
      for (int u = 0; u < kLoads; ++u) dot16x8<T, NX>(raw[u], xs, i + u * 256, acc);
    }
    for (; i < n_in; i += 256) dot16x8<T, NX>(__ldg(reinterpret_cast<const uint4*>(w + 2 * i)), xs, i, acc);
  } else if constexpr (T == weight_type::q8_0) {
    // 4 lanes per block (8 quants each), 8 blocks per warp step.
    const int64_t n_blocks = n_in / 32;
    const int part = lane % 4;
#pragma unroll 2
    for (int64_t b = lane / 4; b < n_blocks; b += 8) {
      const uint8_t* blk = w + b * 34;
      const float d = detail::f16_bits_to_float(detail::load_u16(blk));
      float q[8];
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        const uint16_t two = detail::load_u16(blk + 2 + 8 * part + 2 * k);
        q[2 * k] = float(static_cast<int8_t>(two & 0xff));
        q[2 * k + 1] = float(static_cast<int8_t>(two >> 8));
      }
#pragma unroll
      for (int j = 0; j < NX; ++j) {
        float xv[8];
        load_x8(xs[j] + b * 32 + 8 * part, xv);
        float s = 0.0f;
#pragma unroll
        for (int k = 0; k < 8; ++k) s = fmaf(q[k], xv[k], s);
        acc[j] = fmaf(d, s, acc[j]);
      }
    }
  } else if constexpr (T == weight_type::q4_k) {
    // 8 lanes per block (16 qs bytes = 32 quants each), 4 blocks per warp step.
    const int64_t n_blocks = n_in / 256;
    const int l8 = lane % 8, grp = l8 / 2, half = l8 % 2;  // grp: 64-element group, half: which 16 of its 32 bytes
#pragma unroll 2
    for (int64_t b = lane / 8; b < n_blocks; b += 4) {
      const uint8_t* blk = w + b * 144;
      const uint4 head = __ldg(reinterpret_cast<const uint4*>(blk));  // d, dmin, scales[12]
      const uint4 qv = __ldg(reinterpret_cast<const uint4*>(blk + 16 + 32 * grp + 16 * half));
      const float d = detail::f16_bits_to_float(uint16_t(head.x));
      const float dmin = detail::f16_bits_to_float(uint16_t(head.x >> 16));
      const uint32_t sw[3] = {head.y, head.z, head.w};
      auto sc_byte = [&](int k) { return int((sw[k / 4] >> (8 * (k % 4))) & 0xff); };
      int s_lo, m_lo, s_hi, m_hi;
      const int is = 2 * grp;
      if (is < 4) {  // is and is+1 both < 4 (is is even)
        s_lo = sc_byte(is) & 63; m_lo = sc_byte(is + 4) & 63;
        s_hi = sc_byte(is + 1) & 63; m_hi = sc_byte(is + 5) & 63;
      } else {
        s_lo = (sc_byte(is + 4) & 0xF) | ((sc_byte(is - 4) >> 6) << 4);
        m_lo = (sc_byte(is + 4) >> 4) | ((sc_byte(is) >> 6) << 4);
        s_hi = (sc_byte(is + 5) & 0xF) | ((sc_byte(is - 3) >> 6) << 4);
        m_hi = (sc_byte(is + 5) >> 4) | ((sc_byte(is + 1) >> 6) << 4);
      }
      const float d_lo = d * float(s_lo), d_hi = d * float(s_hi);
      const float m_lo_f = dmin * float(m_lo), m_hi_f = dmin * float(m_hi);
      const uint32_t qw[4] = {qv.x, qv.y, qv.z, qv.w};
#pragma unroll
      for (int j = 0; j < NX; ++j) {
        const float* x_lo = xs[j] + b * 256 + 64 * grp + 16 * half;  // 16 floats, low nibbles
        const float* x_hi = x_lo + 32;                               // 16 floats, high nibbles
        float dot_lo = 0.0f, dot_hi = 0.0f, sum_lo = 0.0f, sum_hi = 0.0f;
#pragma unroll
        for (int k = 0; k < 4; ++k) {
          const float4 a = *reinterpret_cast<const float4*>(x_lo + 4 * k);
          const float4 c = *reinterpret_cast<const float4*>(x_hi + 4 * k);
          const uint32_t word = qw[k];
          const float xa[4] = {a.x, a.y, a.z, a.w};
          const float xc[4] = {c.x, c.y, c.z, c.w};
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const uint32_t byte = (word >> (8 * e)) & 0xff;
            dot_lo = fmaf(float(byte & 0xF), xa[e], dot_lo);
            dot_hi = fmaf(float(byte >> 4), xc[e], dot_hi);
            sum_lo += xa[e];
            sum_hi += xc[e];
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
  } else if constexpr (T == weight_type::q6_k) {
    // One block per warp step: lane -> half h (128 elements), quant pair l, l+1 of each quarter.
    const int64_t n_blocks = n_in / 256;
    const int h = lane / 16, l = (lane % 16) * 2;
#pragma unroll 2
    for (int64_t b = 0; b < n_blocks; ++b) {
      const uint8_t* blk = w + b * 210;
      const uint16_t ql0 = detail::load_u16(blk + 64 * h + l);
      const uint16_t ql1 = detail::load_u16(blk + 64 * h + l + 32);
      const uint16_t qh = detail::load_u16(blk + 128 + 32 * h + l);
      const int8_t* sc = reinterpret_cast<const int8_t*>(blk + 192) + 8 * h + l / 16;
      const float d = detail::f16_bits_to_float(detail::load_u16(blk + 208));
      float q[4][2];  // [quarter][pair]
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int lo0 = (ql0 >> (8 * e)) & 0xff, lo1 = (ql1 >> (8 * e)) & 0xff, hb = (qh >> (8 * e)) & 0xff;
        q[0][e] = float(int((lo0 & 0xF) | (((hb >> 0) & 3) << 4)) - 32);
        q[1][e] = float(int((lo1 & 0xF) | (((hb >> 2) & 3) << 4)) - 32);
        q[2][e] = float(int((lo0 >> 4) | (((hb >> 4) & 3) << 4)) - 32);
        q[3][e] = float(int((lo1 >> 4) | (((hb >> 6) & 3) << 4)) - 32);
      }
      float dsc[4];
#pragma unroll
      for (int k = 0; k < 4; ++k) dsc[k] = d * float(sc[2 * k]);
#pragma unroll
      for (int j = 0; j < NX; ++j) {
        const float* xb = xs[j] + b * 256 + 128 * h + l;
        float s = acc[j];
#pragma unroll
        for (int k = 0; k < 4; ++k) {
          const float2 xv = *reinterpret_cast<const float2*>(xb + 32 * k);
          s = fmaf(dsc[k], fmaf(q[k][1], xv.y, q[k][0] * xv.x), s);
        }
        acc[j] = s;
      }
    }
  } else if constexpr (detail::has_quant_row_dot<T>) {
    // Q4_0 ... MXFP4, Q5_K, IQ4_XS, Q2_K, Q3_K: a lane's share of each block straight from its
    // bytes, scales decoded once per block (matvec_quants.cuh).
    detail::quant_row_dot<T, NX>(w, n_in, xs, lane, acc);
  } else {
    // Any other format: lane l takes elements l, l + 32, ..., each dequantised by ggml's definition.
    // NOTE: correct and n_x-invariant, not tuned (per-element scale decoding).
    for (int64_t i = lane; i < n_in; i += 32) {
      const float wv = detail::dequant_elem_more(T, w, i);
#pragma unroll
      for (int j = 0; j < NX; ++j) acc[j] = fmaf(wv, xs[j][i], acc[j]);
    }
  }
}

// Up to three weight matrices of one type and row length, stacked: block rows run over all
// of them, each warp finds its matrix (segment) and writes that matrix's output.
struct segments {
  const uint8_t* w[3];
  float* y[3];
  int64_t end[3];  // cumulative row counts; end[2] = all rows
};

// Row `row` of the stack: its matrix's weights (that row), its output column (y + local row) and
// that matrix's row count (the output's row stride).
struct segment_row {
  const uint8_t* w;
  float* y;
  int64_t n_rows;
};
__device__ __forceinline__ segment_row locate(const segments& sg, int64_t row, size_t rb) {
  const int seg = row < sg.end[0] ? 0 : row < sg.end[1] ? 1 : 2;
  const int64_t first = seg == 0 ? 0 : seg == 1 ? sg.end[0] : sg.end[1];
  const int64_t local = row - first;
  return {(seg == 0 ? sg.w[0] : seg == 1 ? sg.w[1] : sg.w[2]) + size_t(local) * rb,
          (seg == 0 ? sg.y[0] : seg == 1 ? sg.y[1] : sg.y[2]) + local,
          (seg == 0 ? sg.end[0] : seg == 1 ? sg.end[1] : sg.end[2]) - first};
}

// The vectors xs[0..NX) of chunk blockIdx.y; extra lanes of a short last chunk redo its last vector.
template <int NX>
__device__ __forceinline__ int32_t chunk_vectors(const float* x, int32_t n_x, int64_t n_in, const float** xs) {
  const int32_t x0 = int32_t(blockIdx.y) * NX;
  const int32_t nx = min(NX, n_x - x0);
#pragma unroll
  for (int j = 0; j < NX; ++j) xs[j] = x + int64_t(x0 + min(j, nx - 1)) * n_in;
  return nx;
}

// ACC: y += W x (the residual add fused into wo / ffn_down), bitwise the same as a
// separate add of the product.
template <weight_type T, int NX, bool ACC>
__global__ void __launch_bounds__(kRowsPerBlock * 32)
    matvec_kernel(segments sg, size_t rb, int64_t n_in, const float* __restrict__ x, int32_t n_x) {
  const int lane = threadIdx.x % 32;
  const int64_t row = int64_t(blockIdx.x) * kRowsPerBlock + threadIdx.x / 32;
  if (row >= sg.end[2]) return;
  const segment_row sr = locate(sg, row, rb);
  const float* xs[NX];
  const int32_t nx = chunk_vectors<NX>(x, n_x, n_in, xs);
  float acc[NX];
#pragma unroll
  for (int j = 0; j < NX; ++j) acc[j] = 0.0f;
  row_dot<T, NX>(sr.w, n_in, xs, lane, acc);
#pragma unroll
  for (int j = 0; j < NX; ++j) acc[j] = detail::warp_sum(acc[j]);
  if (lane == 0) {
    const int64_t x0 = int64_t(blockIdx.y) * NX;
#pragma unroll
    for (int j = 0; j < NX; ++j) {
      if (j < nx) {
        float* out = sr.y + (x0 + j) * sr.n_rows;
        *out = ACC ? *out + acc[j] : acc[j];
      }
    }
  }
}

// y[j][r] = silu(dot(gate row r, x[j])) * dot(up row r, x[j]): one warp reads both rows.
// Same dot products and formula as matvec + swiglu, so the same bits.
template <weight_type T, int NX>
__global__ void __launch_bounds__(kRowsPerBlock * 32)
    matvec_swiglu_kernel(const uint8_t* __restrict__ gate, const uint8_t* __restrict__ up, size_t rb,
                         int64_t n_out, int64_t n_in, const float* __restrict__ x, int32_t n_x,
                         float* __restrict__ y) {
  const int lane = threadIdx.x % 32;
  const int64_t row = int64_t(blockIdx.x) * kRowsPerBlock + threadIdx.x / 32;
  if (row >= n_out) return;
  const float* xs[NX];
  const int32_t nx = chunk_vectors<NX>(x, n_x, n_in, xs);
  float g[NX], u[NX];
#pragma unroll
  for (int j = 0; j < NX; ++j) g[j] = u[j] = 0.0f;
  row_dot<T, NX>(gate + size_t(row) * rb, n_in, xs, lane, g);
  row_dot<T, NX>(up + size_t(row) * rb, n_in, xs, lane, u);
#pragma unroll
  for (int j = 0; j < NX; ++j) {
    g[j] = detail::warp_sum(g[j]);
    u[j] = detail::warp_sum(u[j]);
  }
  if (lane == 0) {
    const int64_t x0 = int64_t(blockIdx.y) * NX;
#pragma unroll
    for (int j = 0; j < NX; ++j)
      if (j < nx) y[(x0 + j) * n_out + row] = g[j] / (1.0f + expf(-g[j])) * u[j];
  }
}

// ---- Batch-1 decode over 16-bit weights: the bandwidth-bound case (an 8B F16 model's whole
// step is these). A warp computes R rows at once, issuing U 16-byte loads per row before any
// arithmetic, and loads each chunk of x once for its R rows. Each row still adds its chunks in
// increasing order with the same fmaf chain as dot16x8, so results are bitwise those of the
// generic kernel (and of any R, U): the variant is a speed choice only.

template <weight_type T, int R, int U>
__device__ __forceinline__ void rows_dot16(const uint8_t* const* w, int64_t n_in, const float* __restrict__ x,
                                           int lane, float* acc) {
  int64_t i = int64_t(lane) * 8;
  for (; i + (U - 1) * 256 < n_in; i += U * 256) {
    uint4 raw[U][R];
#pragma unroll
    for (int u = 0; u < U; ++u)
#pragma unroll
      for (int r = 0; r < R; ++r) raw[u][r] = __ldg(reinterpret_cast<const uint4*>(w[r] + 2 * (i + u * 256)));
#pragma unroll
    for (int u = 0; u < U; ++u) {
      float xv[8];
      load_x8(x + i + u * 256, xv);
#pragma unroll
      for (int r = 0; r < R; ++r) {
        float wv[8];
        unpack16x8<T>(raw[u][r], wv);
        float s = acc[r];
#pragma unroll
        for (int k = 0; k < 8; ++k) s = fmaf(wv[k], xv[k], s);
        acc[r] = s;
      }
    }
  }
  for (; i < n_in; i += 256) {
    float xv[8];
    load_x8(x + i, xv);
#pragma unroll
    for (int r = 0; r < R; ++r) {
      float wv[8];
      unpack16x8<T>(__ldg(reinterpret_cast<const uint4*>(w[r] + 2 * i)), wv);
      float s = acc[r];
#pragma unroll
      for (int k = 0; k < 8; ++k) s = fmaf(wv[k], xv[k], s);
      acc[r] = s;
    }
  }
}

template <weight_type T, int R, int U, bool ACC>
__global__ void __launch_bounds__(kRowsPerBlock * 32)
    matvec16_kernel(segments sg, size_t rb, int64_t n_in, const float* __restrict__ x) {
  const int lane = threadIdx.x % 32;
  const int64_t row0 = (int64_t(blockIdx.x) * kRowsPerBlock + threadIdx.x / 32) * R;
  if (row0 >= sg.end[2]) return;
  const uint8_t* w[R];
  float* out[R];
#pragma unroll
  for (int r = 0; r < R; ++r) {
    // past the end: recompute the last row, unwritten
    const segment_row sr = locate(sg, min(row0 + r, sg.end[2] - 1), rb);
    w[r] = sr.w;
    out[r] = sr.y;
  }
  float acc[R];
#pragma unroll
  for (int r = 0; r < R; ++r) acc[r] = 0.0f;
  rows_dot16<T, R, U>(w, n_in, x, lane, acc);
#pragma unroll
  for (int r = 0; r < R; ++r) acc[r] = detail::warp_sum(acc[r]);
  if (lane == 0) {
#pragma unroll
    for (int r = 0; r < R; ++r)
      if (row0 + r < sg.end[2]) *out[r] = ACC ? *out[r] + acc[r] : acc[r];
  }
}

// P row pairs (gate row, up row) per warp.
template <weight_type T, int P, int U>
__global__ void __launch_bounds__(kRowsPerBlock * 32)
    matvec16_swiglu_kernel(const uint8_t* __restrict__ gate, const uint8_t* __restrict__ up, size_t rb,
                           int64_t n_out, int64_t n_in, const float* __restrict__ x, float* __restrict__ y) {
  const int lane = threadIdx.x % 32;
  const int64_t row0 = (int64_t(blockIdx.x) * kRowsPerBlock + threadIdx.x / 32) * P;
  if (row0 >= n_out) return;
  const uint8_t* w[2 * P];
#pragma unroll
  for (int p = 0; p < P; ++p) {
    const int64_t row = min(row0 + p, n_out - 1);
    w[2 * p] = gate + size_t(row) * rb;
    w[2 * p + 1] = up + size_t(row) * rb;
  }
  float acc[2 * P];
#pragma unroll
  for (int r = 0; r < 2 * P; ++r) acc[r] = 0.0f;
  rows_dot16<T, 2 * P, U>(w, n_in, x, lane, acc);
#pragma unroll
  for (int r = 0; r < 2 * P; ++r) acc[r] = detail::warp_sum(acc[r]);
  if (lane == 0) {
#pragma unroll
    for (int p = 0; p < P; ++p)
      if (row0 + p < n_out) y[row0 + p] = acc[2 * p] / (1.0f + expf(-acc[2 * p])) * acc[2 * p + 1];
  }
}

// Every (rows per warp, loads per row) variant built: matvec16_variant_ok, and the launchers'
// dispatch, read this one list.
#define AGENTQ_MATVEC16_VARIANTS(X) X(1, 2) X(1, 4) X(1, 8) X(2, 2) X(2, 4) X(2, 8) X(4, 2) X(4, 4)

// The (R, U) variant batch-1 16-bit decode uses: set_matvec16_variant(), else
// AGENTQ_MATVEC16="RxU" (benchmarks), else the default measured best on an H200.
struct variant16 {  // 1x8 measured best on an H200 (8B F16 decode 207 tok/s; 1x4 203, 2x4 197, 4x4 172)
  int rows = 1, loads = 8;
};
variant16& current_variant16() {
  static variant16 v = [] {
    variant16 d;
    if (const char* e = std::getenv("AGENTQ_MATVEC16")) {
      int r = 0, u = 0;
      if (std::sscanf(e, "%dx%d", &r, &u) == 2 && matvec16_variant_ok(r, u)) d = {r, u};
    }
    return d;
  }();
  return v;
}

template <weight_type T, bool ACC>
void launch_matvec16(const segments& sg, size_t rb, int64_t n_in, const float* x, cudaStream_t s) {
  const variant16 v = current_variant16();
  const dim3 grid(detail::ceil_div(sg.end[2], int64_t(kRowsPerBlock) * v.rows));
#define AGENTQ_MV16(R, U)                                                                          \
  if (v.rows == R && v.loads == U) {                                                               \
    matvec16_kernel<T, R, U, ACC><<<grid, kRowsPerBlock * 32, 0, s>>>(sg, rb, n_in, x);            \
    return;                                                                                        \
  }
  AGENTQ_MATVEC16_VARIANTS(AGENTQ_MV16)
#undef AGENTQ_MV16
}

template <weight_type T>
void launch_swiglu16(const uint8_t* gate, const uint8_t* up, size_t rb, int64_t n_out, int64_t n_in, const float* x,
                     float* y, cudaStream_t s) {
  const variant16 v = current_variant16();
  const int pairs = v.rows >= 4 ? 2 : 1;  // 2 or 4 rows per warp
  const dim3 grid(detail::ceil_div(n_out, int64_t(kRowsPerBlock) * pairs));
// R rows per warp are R / 2 pairs (gate, up), at least one.
#define AGENTQ_SW16(R, U)                                                                          \
  if (v.rows == R && v.loads == U) {                                                               \
    matvec16_swiglu_kernel<T, (R >= 4 ? 2 : 1), U><<<grid, kRowsPerBlock * 32, 0, s>>>(gate, up, rb, n_out, n_in, x, y); \
    return;                                                                                        \
  }
  AGENTQ_MATVEC16_VARIANTS(AGENTQ_SW16)
#undef AGENTQ_SW16
}

dim3 grid_for(int64_t n_rows, int32_t n_x) {
  return dim3(detail::ceil_div(n_rows, kRowsPerBlock), n_x == 1 ? 1u : detail::ceil_div(n_x, kChunk));
}

template <weight_type T, bool ACC>
void launch_matvec(const segments& sg, int64_t n_in, const float* x, int32_t n_x, cudaStream_t s) {
  const size_t rb = row_bytes(T, n_in);
  if constexpr (T == weight_type::f16 || T == weight_type::bf16) {
    if (n_x == 1) return launch_matvec16<T, ACC>(sg, rb, n_in, x, s);
  }
  if (n_x == 1)
    matvec_kernel<T, 1, ACC><<<grid_for(sg.end[2], 1), kRowsPerBlock * 32, 0, s>>>(sg, rb, n_in, x, n_x);
  else
    matvec_kernel<T, kChunk, ACC><<<grid_for(sg.end[2], n_x), kRowsPerBlock * 32, 0, s>>>(sg, rb, n_in, x, n_x);
}

template <weight_type T>
void launch_swiglu(const void* gate, const void* up, int64_t n_out, int64_t n_in, const float* x, int32_t n_x,
                   float* y, cudaStream_t s) {
  const auto* g = static_cast<const uint8_t*>(gate);
  const auto* u = static_cast<const uint8_t*>(up);
  const size_t rb = row_bytes(T, n_in);
  if constexpr (T == weight_type::f16 || T == weight_type::bf16) {
    if (n_x == 1) return launch_swiglu16<T>(g, u, rb, n_out, n_in, x, y, s);
  }
  if (n_x == 1)
    matvec_swiglu_kernel<T, 1><<<grid_for(n_out, 1), kRowsPerBlock * 32, 0, s>>>(g, u, rb, n_out, n_in, x, n_x, y);
  else
    matvec_swiglu_kernel<T, kChunk><<<grid_for(n_out, n_x), kRowsPerBlock * 32, 0, s>>>(g, u, rb, n_out, n_in, x,
                                                                                         n_x, y);
}

// n_in must be a multiple of this: whole blocks, and whole 16-byte loads for the float types.
int64_t row_multiple(weight_type t) {
  switch (t) {
    case weight_type::f32: return 4;
    case weight_type::f16:
    case weight_type::bf16: return 8;
    case weight_type::q8_0: return 32;
    default: return block_elems(t);
  }
}

template <weight_type T>
struct matvec_op {
  static void run(const segments& sg, int64_t n_in, const float* x, int32_t n_x, bool acc, cudaStream_t s) {
    if (acc) launch_matvec<T, true>(sg, n_in, x, n_x, s);
    else launch_matvec<T, false>(sg, n_in, x, n_x, s);
  }
};
template <weight_type T>
struct swiglu_op {
  static void run(const void* gate, const void* up, int64_t n_out, int64_t n_in, const float* x, int32_t n_x,
                  float* y, cudaStream_t s) {
    launch_swiglu<T>(gate, up, n_out, n_in, x, n_x, y, s);
  }
};

// Mixture-of-experts rows (moe_matvec): block (rows, r) computes rows of expert ids[r0 + r]'s matrix
// for vector (r0 + r) / x_div, with row_dot's one-vector arithmetic (matvec's bits for n_x = 1).
template <weight_type T>
__global__ void __launch_bounds__(kRowsPerBlock * 32)
    moe_matvec_kernel(const uint8_t* __restrict__ stack, size_t rb, int64_t n_out, int64_t n_in,
                      const float* __restrict__ x, int32_t x_div, const int32_t* __restrict__ ids, int32_t r0,
                      float* __restrict__ y) {
  const int lane = threadIdx.x % 32;
  const int64_t row = int64_t(blockIdx.x) * kRowsPerBlock + threadIdx.x / 32;
  if (row >= n_out) return;
  const int32_t r = r0 + int32_t(blockIdx.y);
  const float* xs[1] = {x + int64_t(r / x_div) * n_in};
  float acc[1] = {0.0f};
  row_dot<T, 1>(stack + (size_t(ids[r]) * size_t(n_out) + size_t(row)) * rb, n_in, xs, lane, acc);
  acc[0] = detail::warp_sum(acc[0]);
  if (lane == 0) y[int64_t(r) * n_out + row] = acc[0];
}

template <weight_type T>
struct moe_op {
  static void run(const void* stack, int64_t n_out, int64_t n_in, const float* x, int32_t x_div, const int32_t* ids,
                  int32_t n_rows, float* y, cudaStream_t s) {
    const size_t rb = row_bytes(T, n_in);
    for (int32_t r0 = 0; r0 < n_rows; r0 += 65535) {  // grid.y is at most 65535
      const int32_t n = min(65535, n_rows - r0);
      moe_matvec_kernel<T><<<dim3(detail::ceil_div(n_out, kRowsPerBlock), unsigned(n)), kRowsPerBlock * 32, 0, s>>>(
          static_cast<const uint8_t*>(stack), rb, n_out, n_in, x, x_div, ids, r0, y);
    }
  }
};

// Mixture-of-experts rows grouped by expert (moe_matvec_grouped): block (rows, c) reads its rows
// of expert chunks[c]'s matrix once for up to kChunk (token, expert) rows of that expert (the
// grouping moe_group made). row_dot's per-vector arithmetic does not depend on NX, so each row
// gets moe_matvec_kernel's bits; only the weight reads are shared.
template <weight_type T>
__global__ void __launch_bounds__(kRowsPerBlock * 32)
    moe_matvec_grouped_kernel(const uint8_t* __restrict__ stack, size_t rb, int64_t n_out, int64_t n_in,
                              const float* __restrict__ x, int32_t x_div, const int32_t* __restrict__ order,
                              const int32_t* __restrict__ chunks, int32_t c0, float* __restrict__ y) {
  const int32_t c = c0 + int32_t(blockIdx.y);
  if (c >= chunks[0]) return;  // the bound the host launched for is an upper bound
  const int lane = threadIdx.x % 32;
  const int64_t row = int64_t(blockIdx.x) * kRowsPerBlock + threadIdx.x / 32;
  if (row >= n_out) return;
  const int32_t expert = chunks[1 + 3 * c], begin = chunks[2 + 3 * c], n = chunks[3 + 3 * c];
  const float* xs[kChunk];
  int32_t r[kChunk];
#pragma unroll
  for (int j = 0; j < kChunk; ++j) {
    r[j] = order[begin + (j < n ? j : n - 1)];  // past n: a repeat, computed and dropped
    xs[j] = x + int64_t(r[j] / x_div) * n_in;
  }
  float acc[kChunk];
#pragma unroll
  for (int j = 0; j < kChunk; ++j) acc[j] = 0.0f;
  row_dot<T, kChunk>(stack + (size_t(expert) * size_t(n_out) + size_t(row)) * rb, n_in, xs, lane, acc);
#pragma unroll
  for (int j = 0; j < kChunk; ++j) acc[j] = detail::warp_sum(acc[j]);
  if (lane == 0) {
#pragma unroll
    for (int j = 0; j < kChunk; ++j)
      if (j < n) y[int64_t(r[j]) * n_out + row] = acc[j];
  }
}

template <weight_type T>
struct moe_grouped_op {
  static void run(const void* stack, int64_t n_out, int64_t n_in, const float* x, int32_t x_div, const int32_t* order,
                  const int32_t* chunks, int32_t max_chunks, float* y, cudaStream_t s) {
    const size_t rb = row_bytes(T, n_in);
    for (int32_t c0 = 0; c0 < max_chunks; c0 += 65535) {  // grid.y is at most 65535
      const int32_t n = min(65535, max_chunks - c0);
      moe_matvec_grouped_kernel<T><<<dim3(detail::ceil_div(n_out, kRowsPerBlock), unsigned(n)), kRowsPerBlock * 32,
                                     0, s>>>(static_cast<const uint8_t*>(stack), rb, n_out, n_in, x, x_div, order,
                                             chunks, c0, y);
    }
  }
};

// Op<type>::run(args...) with the weight type as a template argument.
template <template <weight_type> class Op, class... A>
void dispatch(weight_type type, A&&... a) {
  switch (type) {
    case weight_type::f32: Op<weight_type::f32>::run(a...); break;
    case weight_type::f16: Op<weight_type::f16>::run(a...); break;
    case weight_type::bf16: Op<weight_type::bf16>::run(a...); break;
    case weight_type::q8_0: Op<weight_type::q8_0>::run(a...); break;
    case weight_type::q4_k: Op<weight_type::q4_k>::run(a...); break;
    case weight_type::q6_k: Op<weight_type::q6_k>::run(a...); break;
    case weight_type::q4_0: Op<weight_type::q4_0>::run(a...); break;
    case weight_type::q4_1: Op<weight_type::q4_1>::run(a...); break;
    case weight_type::q5_0: Op<weight_type::q5_0>::run(a...); break;
    case weight_type::q5_1: Op<weight_type::q5_1>::run(a...); break;
    case weight_type::q2_k: Op<weight_type::q2_k>::run(a...); break;
    case weight_type::q3_k: Op<weight_type::q3_k>::run(a...); break;
    case weight_type::q5_k: Op<weight_type::q5_k>::run(a...); break;
    case weight_type::iq4_nl: Op<weight_type::iq4_nl>::run(a...); break;
    case weight_type::iq4_xs: Op<weight_type::iq4_xs>::run(a...); break;
    case weight_type::mxfp4: Op<weight_type::mxfp4>::run(a...); break;
  }
}

}  // namespace

void matvec(weight_type type, const void* w, int64_t n_out, int64_t n_in, const float* x, int32_t n_x, float* y,
            stream_t s) {
  const matvec_segment seg{w, y, n_out};
  matvec_multi(type, &seg, 1, n_in, x, n_x, false, s);
}

void matvec_multi(weight_type type, const matvec_segment* segs, int32_t n_segs, int64_t n_in, const float* x,
                  int32_t n_x, bool accumulate, stream_t s) {
  AGENTQ_CUDA_REQUIRE(n_segs >= 1 && n_segs <= 3);
  AGENTQ_CUDA_REQUIRE(n_in % row_multiple(type) == 0);
  segments sg{};
  int64_t rows = 0;
  for (int i = 0; i < 3; ++i) {
    const matvec_segment& g = segs[i < n_segs ? i : n_segs - 1];
    if (i < n_segs) rows += g.n_out;
    sg.w[i] = static_cast<const uint8_t*>(g.w);
    sg.y[i] = g.y;
    sg.end[i] = rows;
  }
  if (rows <= 0 || n_x <= 0) return;
  const cudaStream_t st = detail::as_stream(s);
  dispatch<matvec_op>(type, sg, n_in, x, n_x, accumulate, st);
  AGENTQ_CUDA_CHECK_LAUNCH();
}

bool matvec16_variant_ok(int rows, int loads) {
#define AGENTQ_OK16(R, U) \
  if (rows == R && loads == U) return true;
  AGENTQ_MATVEC16_VARIANTS(AGENTQ_OK16)
#undef AGENTQ_OK16
  return false;
}

bool set_matvec16_variant(int rows, int loads) {
  if (!matvec16_variant_ok(rows, loads)) return false;
  current_variant16() = {rows, loads};
  return true;
}

void matvec_swiglu(weight_type type, const void* gate, const void* up, int64_t n_out, int64_t n_in, const float* x,
                   int32_t n_x, float* y, stream_t s) {
  if (n_out <= 0 || n_x <= 0) return;
  AGENTQ_CUDA_REQUIRE(n_in % row_multiple(type) == 0);
  const cudaStream_t st = detail::as_stream(s);
  dispatch<swiglu_op>(type, gate, up, n_out, n_in, x, n_x, y, st);
  AGENTQ_CUDA_CHECK_LAUNCH();
}

void moe_matvec(weight_type type, const void* stack, int64_t n_out, int64_t n_in, const float* x, int32_t x_div,
                const int32_t* ids, int32_t n_rows, float* y, stream_t s) {
  if (n_out <= 0 || n_rows <= 0) return;
  AGENTQ_CUDA_REQUIRE(n_in % row_multiple(type) == 0 && x_div > 0);
  dispatch<moe_op>(type, stack, n_out, n_in, x, x_div, ids, n_rows, y, detail::as_stream(s));
  AGENTQ_CUDA_CHECK_LAUNCH();
}

int32_t moe_group_max_chunks(int32_t n_rows, int32_t n_expert) {
  return n_rows <= 0 ? 0 : (n_rows + kChunk - 1) / kChunk + std::min(n_rows, n_expert);
}

int32_t moe_group_rows_per_chunk() { return kChunk; }

void moe_matvec_grouped(weight_type type, const void* stack, int64_t n_out, int64_t n_in, const float* x,
                        int32_t x_div, const int32_t* order, const int32_t* chunks, int32_t max_chunks, float* y,
                        stream_t s) {
  if (n_out <= 0 || max_chunks <= 0) return;
  AGENTQ_CUDA_REQUIRE(n_in % row_multiple(type) == 0 && x_div > 0);
  dispatch<moe_grouped_op>(type, stack, n_out, n_in, x, x_div, order, chunks, max_chunks, y, detail::as_stream(s));
  AGENTQ_CUDA_CHECK_LAUNCH();
}

}  // namespace agentq::kernels::cuda
