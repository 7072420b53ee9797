// agentq kernels — the one public header of the CPU kernel library.
// Plain functions over raw pointers and shapes; no engine types.
#pragma once

#include <cstddef>
#include <cstdint>

namespace agentq::kernels {

// IEEE half and bfloat16 conversions (round-to-nearest-even on the way down).
float fp16_to_fp32(uint16_t h);
uint16_t fp32_to_fp16(float f);
inline float bf16_to_fp32(uint16_t h) {
  uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  __builtin_memcpy(&f, &u, 4);
  return f;
}
uint16_t fp32_to_bf16(float f);

}  // namespace agentq::kernels
