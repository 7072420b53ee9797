// Reference RMSNorm for rms_norm.cu (double accumulation).
#include <cmath>

#include "agentq/kernels_cuda.h"

namespace agentq::kernels::ref {

void rms_norm(const float* x, const float* w, float* y, int32_t n_rows, int32_t n, float eps) {
  for (int32_t r = 0; r < n_rows; ++r) {
    const float* xr = x + int64_t(r) * n;
    float* yr = y + int64_t(r) * n;
    double ss = 0;
    for (int32_t i = 0; i < n; ++i) ss += double(xr[i]) * double(xr[i]);
    const double inv = 1.0 / std::sqrt(ss / n + double(eps));
    for (int32_t i = 0; i < n; ++i) yr[i] = float(double(xr[i]) * inv) * w[i];
  }
}

}  // namespace agentq::kernels::ref
