// Reference elementwise helpers for elementwise.cu: residual add, bias add, row gather.
#include <cstring>

#include "agentq/kernels_cuda.h"

namespace agentq::kernels::ref {

void add(float* x, const float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] += y[i];
}

void add_rows(float* x, const float* b, int32_t n_rows, int32_t n) {
  for (int32_t r = 0; r < n_rows; ++r)
    for (int32_t i = 0; i < n; ++i) x[int64_t(r) * n + i] += b[i];
}

void gather_rows(const float* src, const int32_t* rows, int32_t n_rows, int32_t n, float* dst) {
  for (int32_t r = 0; r < n_rows; ++r) std::memcpy(dst + int64_t(r) * n, src + int64_t(rows[r]) * n, size_t(n) * 4);
}

}  // namespace agentq::kernels::ref
