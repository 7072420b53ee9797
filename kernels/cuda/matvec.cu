// Dequantising matrix-vector products for decode (memory-bound): one warp per
// weight row, four rows per block, fp32 accumulation. Weights stream once per
// chunk of up to 8 vectors; 128-bit loads where the block layout is 16-byte aligned
// (f32, f16, bf16, Q4_K); Q8_0 (34 B) and Q6_K (210 B) blocks are only 2-byte aligned.
#include "common.cuh"

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
#pragma unroll 2
    for (int64_t i = int64_t(lane) * 8; i < n_in; i += 256) {
      const uint4 raw = __ldg(reinterpret_cast<const uint4*>(w + 2 * i));
      const uint32_t words[4] = {raw.x, raw.y, raw.z, raw.w};
      float wv[8];
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
  }
}

template <weight_type T, int NX>
__global__ void __launch_bounds__(kRowsPerBlock * 32)
    matvec_kernel(const uint8_t* __restrict__ w, size_t rb, int64_t n_out, int64_t n_in,
                  const float* __restrict__ x, int32_t n_x, float* __restrict__ y) {
  const int lane = threadIdx.x % 32;
  const int64_t row = int64_t(blockIdx.x) * kRowsPerBlock + threadIdx.x / 32;
  if (row >= n_out) return;
  const int32_t x0 = int32_t(blockIdx.y) * NX;
  const int32_t nx = min(NX, n_x - x0);
  const float* xs[NX];
#pragma unroll
  for (int j = 0; j < NX; ++j) xs[j] = x + int64_t(x0 + min(j, nx - 1)) * n_in;  // clamp: extra lanes redo the last
  float acc[NX];
#pragma unroll
  for (int j = 0; j < NX; ++j) acc[j] = 0.0f;
  row_dot<T, NX>(w + size_t(row) * rb, n_in, xs, lane, acc);
#pragma unroll
  for (int j = 0; j < NX; ++j) acc[j] = detail::warp_sum(acc[j]);
  if (lane == 0) {
#pragma unroll
    for (int j = 0; j < NX; ++j)
      if (j < nx) y[int64_t(x0 + j) * n_out + row] = acc[j];
  }
}

template <weight_type T>
void launch_matvec(const void* w, int64_t n_out, int64_t n_in, const float* x, int32_t n_x, float* y, cudaStream_t s) {
  const auto* wb = static_cast<const uint8_t*>(w);
  const size_t rb = row_bytes(T, n_in);
  if (n_x == 1) {
    matvec_kernel<T, 1><<<dim3(detail::ceil_div(n_out, kRowsPerBlock), 1), kRowsPerBlock * 32, 0, s>>>(
        wb, rb, n_out, n_in, x, n_x, y);
  } else {
    matvec_kernel<T, kChunk><<<dim3(detail::ceil_div(n_out, kRowsPerBlock), detail::ceil_div(n_x, kChunk)),
                               kRowsPerBlock * 32, 0, s>>>(wb, rb, n_out, n_in, x, n_x, y);
  }
}

}  // namespace

void matvec(weight_type type, const void* w, int64_t n_out, int64_t n_in, const float* x, int32_t n_x, float* y,
            stream_t s) {
  if (n_out <= 0 || n_x <= 0) return;
  const cudaStream_t st = detail::as_stream(s);
  switch (type) {
    case weight_type::f32: launch_matvec<weight_type::f32>(w, n_out, n_in, x, n_x, y, st); break;
    case weight_type::f16: launch_matvec<weight_type::f16>(w, n_out, n_in, x, n_x, y, st); break;
    case weight_type::bf16: launch_matvec<weight_type::bf16>(w, n_out, n_in, x, n_x, y, st); break;
    case weight_type::q8_0: launch_matvec<weight_type::q8_0>(w, n_out, n_in, x, n_x, y, st); break;
    case weight_type::q4_k: launch_matvec<weight_type::q4_k>(w, n_out, n_in, x, n_x, y, st); break;
    case weight_type::q6_k: launch_matvec<weight_type::q6_k>(w, n_out, n_in, x, n_x, y, st); break;
  }
  AGENTQ_CUDA_CHECK_LAUNCH();
}

}  // namespace agentq::kernels::cuda
