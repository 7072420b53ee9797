// One rotated pair of RoPE, shared by rope.cu and the fused rope + K/V write
// (rope_kv_write.cu) so both give the same bits.
#pragma once

#include "common.cuh"

namespace agentq::kernels::cuda::detail {

// Rotates pair i of the head at v (position p) in place; returns the two indices it wrote.
// The angle is computed in double so large positions match the reference to float precision.
__device__ __forceinline__ void rope_pair(float* v, int32_t i, int32_t p, int32_t n_rot, float base, float scale,
                                          bool neox, const float* __restrict__ freq_factors, int32_t* i0_out,
                                          int32_t* i1_out) {
  const int32_t half = n_rot / 2;
  double theta = double(p) * double(scale) * pow(double(base), -2.0 * i / n_rot);
  if (freq_factors) theta /= double(freq_factors[i]);
  double sd, cd;
  sincos(theta, &sd, &cd);
  const float c = float(cd), s = float(sd);
  const int32_t i0 = neox ? i : 2 * i;
  const int32_t i1 = neox ? i + half : 2 * i + 1;
  const float a = v[i0], b = v[i1];
  v[i0] = a * c - b * s;
  v[i1] = a * s + b * c;
  *i0_out = i0;
  *i1_out = i1;
}

// rope_pair from a table of angles (rope_kv_write_table): theta = float(p) * inv_freq[i], cos/sin
// (in double, rounded) times mscale, rotated with the CPU forward pass's fmaf order.
__device__ __forceinline__ void rope_pair_table(float* v, int32_t i, int32_t p, int32_t n_rot, bool neox,
                                                const float* __restrict__ inv_freq, float mscale, int32_t* i0_out,
                                                int32_t* i1_out) {
  const int32_t half = n_rot / 2;
  const float theta = __fmul_rn(float(p), inv_freq[i]);
  double sd, cd;
  sincos(double(theta), &sd, &cd);
  const float c = __fmul_rn(float(cd), mscale), s = __fmul_rn(float(sd), mscale);
  const int32_t i0 = neox ? i : 2 * i;
  const int32_t i1 = neox ? i + half : 2 * i + 1;
  const float a = v[i0], b = v[i1];
  v[i0] = fmaf(a, c, -__fmul_rn(b, s));
  v[i1] = fmaf(a, s, __fmul_rn(b, c));
  *i0_out = i0;
  *i1_out = i1;
}

}  // namespace agentq::kernels::cuda::detail
