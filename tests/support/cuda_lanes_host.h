// Host stand-ins for the device helpers kernels/cuda/matvec_quants.cuh uses, so its lane decoders and
// row dots compile as plain C++ and run lane by lane on the CPU (tests/unit/engine/cuda_lanes.cpp).
// Include this, then "../../kernels/cuda/matvec_quants.cuh"; never part of a device build.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>

#include "agentq/kernels.h"

#define AGENTQ_CUDA_LANES_ON_HOST 1
#define __device__
#define __forceinline__ inline

struct uint4 { uint32_t x, y, z, w; };
struct uint2 { uint32_t x, y; };
struct float4 { float x, y, z, w; };
template <class T>
inline T __ldg(const T* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}
inline uint32_t __byte_perm(uint32_t x, uint32_t y, uint32_t s) {
  uint8_t b[8];
  std::memcpy(b, &x, 4);
  std::memcpy(b + 4, &y, 4);
  uint32_t r = 0;
  for (int i = 0; i < 4; ++i) r |= uint32_t(b[(s >> (4 * i)) & 7]) << (8 * i);
  return r;
}
inline float __uint_as_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
// NOTE: the test is built with -ffp-contract=off, so these round once each, as on the device.
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fadd_rn(float a, float b) { return a + b; }

namespace agentq::kernels::cuda {
using weight_type = agentq::kernels::weight_type;
}
namespace agentq::kernels::cuda::detail {
inline float f16_bits_to_float(uint16_t h) { return agentq::kernels::fp16_to_fp32(h); }
inline uint16_t load_u16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}
// common.cuh's scale_min_k4 (ggml's get_scale_min_k4).
inline void scale_min_k4(int j, const uint8_t* q, int* s, int* m) {
  if (j < 4) {
    *s = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *s = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
    *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}
}  // namespace agentq::kernels::cuda::detail
