// Device helpers shared by the kernels/cuda/*.cu ops: stream casts, launch checks,
// fixed-order warp/block reductions, 16-bit float loads and per-element dequantisation.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "agentq/kernels_cuda.h"

// Checks the last kernel launch (records sticky failures like any CUDA call).
#define AGENTQ_CUDA_CHECK_LAUNCH() AGENTQ_CUDA_CHECK(cudaGetLastError())

// Broken caller invariant (bad shape for a kernel): print and abort, always on.
#define AGENTQ_CUDA_REQUIRE(cond)                                                               \
  do {                                                                                          \
    if (!(cond)) {                                                                              \
      std::fprintf(stderr, "agentq: %s:%d: requirement failed: %s\n", __FILE__, __LINE__, #cond); \
      std::abort();                                                                             \
    }                                                                                           \
  } while (0)

namespace agentq::kernels::cuda::detail {

inline cudaStream_t as_stream(stream_t s) { return static_cast<cudaStream_t>(s); }

inline unsigned ceil_div(int64_t a, int64_t b) { return static_cast<unsigned>((a + b - 1) / b); }

// NOTE: butterfly reductions combine lanes in a fixed pattern, so every sum and
// max below is bitwise repeatable run to run.
__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
__device__ __forceinline__ int warp_sum_int(int v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// Sum over the whole block (blockDim.x a multiple of 32, <= 1024); every thread gets the result.
// scratch: 32 floats of shared memory, reusable after the call returns.
__device__ __forceinline__ float block_sum(float v, float* scratch) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, n_warps = blockDim.x / 32;
  v = warp_sum(v);
  __syncthreads();  // scratch may still be read by a previous call
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  float t = lane < n_warps ? scratch[lane] : 0.0f;
  return warp_sum(t);
}
__device__ __forceinline__ int block_sum_int(int v, int* scratch) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, n_warps = blockDim.x / 32;
  v = warp_sum_int(v);
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  int t = lane < n_warps ? scratch[lane] : 0;
  return warp_sum_int(t);
}

__device__ __forceinline__ float f16_bits_to_float(uint16_t h) { return __half2float(__ushort_as_half(h)); }
__device__ __forceinline__ float bf16_bits_to_float(uint16_t h) { return __uint_as_float(uint32_t(h) << 16); }
__device__ __forceinline__ uint16_t load_u16(const uint8_t* p) { return *reinterpret_cast<const uint16_t*>(p); }

static __constant__ int8_t k_iq4nl[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};
static __constant__ int8_t k_mxfp4[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

// 6-bit scale and min of sub-block j (0..7) of Q4_K / Q5_K scales[12] (ggml's get_scale_min_k4).
__device__ __forceinline__ void scale_min_k4(int j, const uint8_t* q, int* s, int* m) {
  if (j < 4) {
    *s = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *s = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
    *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}

// Element i of a row of one of the formats without a dedicated matvec (ggml's definitions).
__device__ __forceinline__ float dequant_elem_more(weight_type t, const uint8_t* row, int64_t i) {
  const int e32 = int(i % 32), e256 = int(i % 256);
  auto nib = [](const uint8_t* qs, int e) { return e < 16 ? (qs[e] & 0xF) : (qs[e - 16] >> 4); };
  auto bit = [](const uint8_t* qh, int e) { return (qh[e / 8] >> (e % 8)) & 1; };
  switch (t) {
    case weight_type::q4_0: {
      const uint8_t* b = row + (i / 32) * 18;
      return float(nib(b + 2, e32) - 8) * f16_bits_to_float(load_u16(b));
    }
    case weight_type::q4_1: {
      const uint8_t* b = row + (i / 32) * 20;
      return float(nib(b + 4, e32)) * f16_bits_to_float(load_u16(b)) + f16_bits_to_float(load_u16(b + 2));
    }
    case weight_type::q5_0: {
      const uint8_t* b = row + (i / 32) * 22;
      return float((nib(b + 6, e32) | (bit(b + 2, e32) << 4)) - 16) * f16_bits_to_float(load_u16(b));
    }
    case weight_type::q5_1: {
      const uint8_t* b = row + (i / 32) * 24;
      return float(nib(b + 8, e32) | (bit(b + 4, e32) << 4)) * f16_bits_to_float(load_u16(b)) +
             f16_bits_to_float(load_u16(b + 2));
    }
    case weight_type::iq4_nl: {
      const uint8_t* b = row + (i / 32) * 18;
      return f16_bits_to_float(load_u16(b)) * float(k_iq4nl[nib(b + 2, e32)]);
    }
    case weight_type::mxfp4: {
      const uint8_t* b = row + (i / 32) * 17;
      const uint32_t bits = b[0] < 2 ? 0x00200000u << b[0] : uint32_t(b[0] - 1) << 23;
      return float(k_mxfp4[nib(b + 1, e32)]) * __uint_as_float(bits);
    }
    case weight_type::q2_k: {
      const uint8_t* b = row + (i / 256) * 84;
      const int k = e256 / 128, sh = (e256 % 128) / 32, l = e256 % 32;
      const int q = (b[16 + 32 * k + l] >> (2 * sh)) & 3;
      const uint8_t sc = b[e256 / 16];
      return f16_bits_to_float(load_u16(b + 80)) * float(sc & 0xF) * float(q) -
             f16_bits_to_float(load_u16(b + 82)) * float(sc >> 4);
    }
    case weight_type::q3_k: {
      const uint8_t* b = row + (i / 256) * 110;
      const int k = e256 / 128, sh = (e256 % 128) / 32, l = e256 % 32, is = e256 / 16;
      const uint8_t* sc = b + 96;
      const int s = (((sc[is % 8] >> (4 * (is / 8))) & 0xF) | (((sc[8 + is % 4] >> (2 * (is / 4))) & 3) << 4)) - 32;
      const int q = ((b[32 + 32 * k + l] >> (2 * sh)) & 3) - (((b[l] >> (4 * k + sh)) & 1) ? 0 : 4);
      return f16_bits_to_float(load_u16(b + 108)) * float(s) * float(q);
    }
    case weight_type::q5_k: {
      const uint8_t* b = row + (i / 256) * 176;
      const int j = e256 / 32, l = e256 % 32;
      int s, m;
      scale_min_k4(j, b + 4, &s, &m);
      const int q = ((b[48 + 32 * (j / 2) + l] >> (4 * (j % 2))) & 0xF) | (((b[16 + l] >> j) & 1) << 4);
      return f16_bits_to_float(load_u16(b)) * float(s) * float(q) - f16_bits_to_float(load_u16(b + 2)) * float(m);
    }
    case weight_type::iq4_xs: {
      const uint8_t* b = row + (i / 256) * 136;
      const int ib = e256 / 32, l = e256 % 32;
      const int ls = ((b[4 + ib / 2] >> (4 * (ib % 2))) & 0xF) | (((load_u16(b + 2) >> (2 * ib)) & 3) << 4);
      return f16_bits_to_float(load_u16(b)) * float(ls - 32) * float(k_iq4nl[nib(b + 8 + 16 * ib, l)]);
    }
    default: return 0.0f;
  }
}

// Element i (0-based within the row) of a row of type t. Used where throughput
// does not matter (embedding gather, dequantising GEMM tiles); matvec has its own paths.
__device__ __forceinline__ float dequant_elem(weight_type t, const uint8_t* row, int64_t i) {
  switch (t) {
    case weight_type::f32: return reinterpret_cast<const float*>(row)[i];
    case weight_type::f16: return f16_bits_to_float(load_u16(row + 2 * i));
    case weight_type::bf16: return bf16_bits_to_float(load_u16(row + 2 * i));
    case weight_type::q8_0: {
      const uint8_t* b = row + (i / 32) * 34;
      return f16_bits_to_float(load_u16(b)) * float(static_cast<int8_t>(b[2 + i % 32]));
    }
    case weight_type::q4_k: {
      const uint8_t* b = row + (i / 256) * 144;
      const int e = int(i % 256), j = e / 64, hi = (e % 64) / 32, l = e % 32;
      const uint8_t* sc = b + 4;
      const int is = 2 * j + hi;
      int s, m;
      if (is < 4) {
        s = sc[is] & 63;
        m = sc[is + 4] & 63;
      } else {
        s = (sc[is + 4] & 0xF) | ((sc[is - 4] >> 6) << 4);
        m = (sc[is + 4] >> 4) | ((sc[is] >> 6) << 4);
      }
      const uint8_t q = b[16 + 32 * j + l];
      const int nib = hi ? (q >> 4) : (q & 0xF);
      return f16_bits_to_float(load_u16(b)) * float(s) * float(nib) - f16_bits_to_float(load_u16(b + 2)) * float(m);
    }
    case weight_type::q6_k: {
      const uint8_t* b = row + (i / 256) * 210;
      const int e = int(i % 256), n = e / 128, r = e % 128, quarter = r / 32, l = r % 32;
      const uint8_t* ql = b + 64 * n;
      const uint8_t* qh = b + 128 + 32 * n;
      const int8_t* sc = reinterpret_cast<const int8_t*>(b + 192) + 8 * n;
      const int lo = (ql[l + 32 * (quarter & 1)] >> (quarter >= 2 ? 4 : 0)) & 0xF;
      const int q = (lo | (((qh[l] >> (2 * quarter)) & 3) << 4)) - 32;
      return f16_bits_to_float(load_u16(b + 208)) * float(sc[l / 16 + 2 * quarter]) * float(q);
    }
    default: return dequant_elem_more(t, row, i);
  }
  return 0.0f;
}

}  // namespace agentq::kernels::cuda::detail
