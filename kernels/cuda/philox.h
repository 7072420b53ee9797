// Philox4x32-10 counter-based RNG (Salmon et al., "Parallel random numbers: as
// easy as 1, 2, 3", SC'11), shared by sample.cu and its reference sample.cpp.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define AGENTQ_HD __host__ __device__ __forceinline__
#else
#define AGENTQ_HD inline
#endif

namespace agentq::kernels::detail {

AGENTQ_HD void philox4x32_10(const uint32_t ctr_in[4], const uint32_t key_in[2], uint32_t out[4]) {
  uint32_t c0 = ctr_in[0], c1 = ctr_in[1], c2 = ctr_in[2], c3 = ctr_in[3];
  uint32_t k0 = key_in[0], k1 = key_in[1];
  for (int r = 0; r < 10; ++r) {
    const uint64_t p0 = uint64_t(0xD2511F53u) * c0;
    const uint64_t p1 = uint64_t(0xCD9E8D57u) * c2;
    const uint32_t hi0 = uint32_t(p0 >> 32), lo0 = uint32_t(p0);
    const uint32_t hi1 = uint32_t(p1 >> 32), lo1 = uint32_t(p1);
    c0 = hi1 ^ c1 ^ k0;
    c1 = lo1;
    c2 = hi0 ^ c3 ^ k1;
    c3 = lo0;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  out[0] = c0; out[1] = c1; out[2] = c2; out[3] = c3;
}

// Uniform float in [0, 1) with 24 random bits, for (seed, counter).
AGENTQ_HD float philox_uniform(uint64_t seed, uint64_t counter) {
  const uint32_t ctr[4] = {uint32_t(counter), uint32_t(counter >> 32), 0u, 0u};
  const uint32_t key[2] = {uint32_t(seed), uint32_t(seed >> 32)};
  uint32_t out[4];
  philox4x32_10(ctr, key, out);
  return float(out[0] >> 8) * (1.0f / 16777216.0f);
}

// Order-preserving map of a float to uint32 (larger float -> larger key).
AGENTQ_HD uint32_t float_key(float f) {
  uint32_t u;
#if defined(__CUDA_ARCH__)
  u = __float_as_uint(f);
#else
  __builtin_memcpy(&u, &f, 4);
#endif
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

// Threads of the sampling kernel; the selection scan walks the vocab in
// sample_threads contiguous chunks, and the reference walks the same chunks.
constexpr int sample_threads = 1024;

}  // namespace agentq::kernels::detail
