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

// x: [n] -> n/32 blocks; n a multiple of 32.
void quantize_act_q8_0(const float* x, block_q8_0x* y, int64_t n);
// x: [n] -> n/256 blocks; n a multiple of 256.
void quantize_act_q8_k(const float* x, block_q8_k* y, int64_t n);

}  // namespace agentq::kernels::detail
