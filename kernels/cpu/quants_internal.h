// Private to the kernels library: activation block formats and the small helpers
// the quantizers and dot products share (ggml's nearest_int, get_scale_min_k4).
#pragma once

#include <cstdint>
#include <cstring>

#include "agentq/kernels.h"

namespace agentq::kernels::detail {

// Activation block for q8_0 weights: like block_q8_0 but with an fp32 scale.
struct block_q8_0x {
  float d;              // x ~= d * qs
  int8_t qs[qk8_0];
};
static_assert(sizeof(block_q8_0x) == 36);

// Activation block for K-quant weights: ggml's block_q8_K.
struct block_q8_k {
  float d;              // x ~= d * qs
  int8_t qs[qk_k];
  int16_t bsums[qk_k / 16];  // sum of qs per 16 elements
};
static_assert(sizeof(block_q8_k) == 292);

// Round to nearest (ties to even) for |v| <= 2^22, exactly as ggml's nearest_int.
inline int nearest_int(float v) {
  float val = v + 12582912.f;
  int i;
  std::memcpy(&i, &val, 4);
  return (i & 0x007fffff) - 0x00400000;
}

// 6-bit scale and min of sub-block j (0..7) from a block_q4_k's scales[12].
inline void get_scale_min_k4(int j, const uint8_t* q, uint8_t* d, uint8_t* m) {
  if (j < 4) {
    *d = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *d = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
    *m = (q[j + 4] >> 4) | ((q[j - 0] >> 6) << 4);
  }
}

// IQ4_NL / IQ4_XS code book and MXFP4's E2M1 values doubled (ggml-common.h).
inline constexpr int8_t kvalues_iq4nl[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};
inline constexpr int8_t kvalues_mxfp4[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

// 2^(e - 128): half the E8M0 scale, as kvalues_mxfp4 are doubled (ggml_e8m0_to_fp32_half).
inline float e8m0_to_fp32_half(uint8_t e) {
  const uint32_t bits = e < 2 ? 0x00200000u << e : static_cast<uint32_t>(e - 1) << 23;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// Q3_K's 16 6-bit scales, unpacked from scales[12] and made signed (s - 32).
inline void q3_k_scales(const uint8_t* packed, int8_t* out) {
  uint32_t aux[4];
  std::memcpy(aux, packed, 12);
  const uint32_t kmask1 = 0x03030303, kmask2 = 0x0f0f0f0f, tmp = aux[2];
  aux[2] = ((aux[0] >> 4) & kmask2) | (((tmp >> 4) & kmask1) << 4);
  aux[3] = ((aux[1] >> 4) & kmask2) | (((tmp >> 6) & kmask1) << 4);
  aux[0] = (aux[0] & kmask2) | (((tmp >> 0) & kmask1) << 4);
  aux[1] = (aux[1] & kmask2) | (((tmp >> 2) & kmask1) << 4);
  std::memcpy(out, aux, 16);
  for (int i = 0; i < 16; ++i) out[i] = static_cast<int8_t>(out[i] - 32);
}

// IQ4_XS's 6-bit scale of sub-block ib (0..7), unsigned (the format subtracts 32).
inline int iq4_xs_scale(const block_iq4_xs& b, int ib) {
  return ((b.scales_l[ib / 2] >> 4 * (ib % 2)) & 0xF) | (((b.scales_h >> 2 * ib) & 3) << 4);
}

// The formats of quants_more.cpp: false for a type it does not handle (quantize: no quantizer).
bool dequantize_more(weight_type t, const void* src, float* dst, int64_t n);
bool quantize_more(weight_type t, const float* src, void* dst, int64_t n);

// Which 8-bit activation blocks a file type's integer dot products take.
enum class act_format { f32, q8_0, q8_k };
inline act_format act_format_of(weight_type file_t) {
  switch (file_t) {
    case weight_type::q8_0: case weight_type::q4_0: case weight_type::q4_1: case weight_type::q5_0:
    case weight_type::q5_1: case weight_type::iq4_nl: case weight_type::mxfp4:
      return act_format::q8_0;
    case weight_type::q4_k: case weight_type::q6_k: case weight_type::q2_k: case weight_type::q3_k:
    case weight_type::q5_k: case weight_type::iq4_xs:
      return act_format::q8_k;
    default:
      return act_format::f32;
  }
}

// Dots (dots_more.cpp) of one row of the quants_more formats against prepared activations;
// nullptr for another type. dot_more: what matmul runs (AVX2 kernels where built);
// dot_more_scalar: the plain definition (matmul_reference). Both give the same bits.
using dot_fn = float (*)(const uint8_t* w, const uint8_t* x, int64_t n);
dot_fn dot_more(weight_type t);
dot_fn dot_more_scalar(weight_type t);
#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#define AGENTQ_DOTS_MORE_AVX2 1
// dots_more_avx2.cpp
float dot_q4_0_avx2(const uint8_t* w, const uint8_t* x, int64_t n);
float dot_q4_1_avx2(const uint8_t* w, const uint8_t* x, int64_t n);
float dot_q5_0_avx2(const uint8_t* w, const uint8_t* x, int64_t n);
float dot_q5_1_avx2(const uint8_t* w, const uint8_t* x, int64_t n);
float dot_iq4_nl_avx2(const uint8_t* w, const uint8_t* x, int64_t n);
float dot_mxfp4_avx2(const uint8_t* w, const uint8_t* x, int64_t n);
float dot_q5_k_avx2(const uint8_t* w, const uint8_t* x, int64_t n);
float dot_iq4_xs_avx2(const uint8_t* w, const uint8_t* x, int64_t n);
// n_x (1..4) inputs against one row, out[k] = dot_more(t)(w, x[k], n) bit for bit; the
// 32-element formats, Q2_K, Q3_K, Q5_K and IQ4_XS unpack each block once for all inputs (prefill tiles).
void tile_more_avx2(weight_type t, const uint8_t* w, const uint8_t* const* x, int64_t n, float* out, int n_x);
// dots_q2_k_q3_k.cpp: n_x (1..4) inputs against one Q2_K / Q3_K row, out[k] the scalar dot's bits.
void tile_q2_k(const uint8_t* w, const uint8_t* const* x, int64_t n, float* out, int n_x);
void tile_q3_k(const uint8_t* w, const uint8_t* const* x, int64_t n, float* out, int n_x);
#endif
float dot_q4_0(const uint8_t* w, const uint8_t* x, int64_t n);
float dot_q4_1(const uint8_t* w, const uint8_t* x, int64_t n);
float dot_q5_0(const uint8_t* w, const uint8_t* x, int64_t n);
float dot_q5_1(const uint8_t* w, const uint8_t* x, int64_t n);
float dot_iq4_nl(const uint8_t* w, const uint8_t* x, int64_t n);
float dot_mxfp4(const uint8_t* w, const uint8_t* x, int64_t n);
float dot_q2_k(const uint8_t* w, const uint8_t* x, int64_t n);
float dot_q3_k(const uint8_t* w, const uint8_t* x, int64_t n);
float dot_q5_k(const uint8_t* w, const uint8_t* x, int64_t n);
float dot_iq4_xs(const uint8_t* w, const uint8_t* x, int64_t n);

// x: [n] -> n/32 blocks; n a multiple of 32.
void quantize_act_q8_0(const float* x, block_q8_0x* y, int64_t n);
// x: [n] -> n/256 blocks; n a multiple of 256.
void quantize_act_q8_k(const float* x, block_q8_k* y, int64_t n);

}  // namespace agentq::kernels::detail
