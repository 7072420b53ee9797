// Reference SwiGLU for swiglu.cu: out = silu(gate) * up.
#include <cmath>

#include "agentq/kernels_cuda.h"

namespace agentq::kernels::ref {

void swiglu(const float* gate, const float* up, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const double g = gate[i];
    out[i] = float(g / (1.0 + std::exp(-g)) * double(up[i]));
  }
}

}  // namespace agentq::kernels::ref
