// Reference rotary embedding for rope.cu. Angles in double (as the kernel does)
// so that large positions agree to float precision.
#include <cmath>

#include "agentq/kernels_cuda.h"

namespace agentq::kernels::ref {

void rope(float* x, const int32_t* pos, int32_t n_tokens, int32_t n_head, int32_t head_dim, int32_t n_rot,
          float base, float scale, bool neox, const float* freq_factors) {
  const int32_t half = n_rot / 2;
  for (int32_t t = 0; t < n_tokens; ++t) {
    for (int32_t h = 0; h < n_head; ++h) {
      float* v = x + (int64_t(t) * n_head + h) * head_dim;
      for (int32_t i = 0; i < half; ++i) {
        double theta = double(pos[t]) * double(scale) * std::pow(double(base), -2.0 * i / n_rot);
        if (freq_factors) theta /= double(freq_factors[i]);
        const float c = float(std::cos(theta)), s = float(std::sin(theta));
        const int32_t i0 = neox ? i : 2 * i;
        const int32_t i1 = neox ? i + half : 2 * i + 1;
        const float a = v[i0], b = v[i1];
        v[i0] = a * c - b * s;
        v[i1] = a * s + b * c;
      }
    }
  }
}

}  // namespace agentq::kernels::ref
