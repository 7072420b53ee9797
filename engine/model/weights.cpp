// Weight views over the kernels library: row dequantization and the row-parallel
// linear layer (activations prepared once, output rows split across the pool).
#include "model/weights.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "agentq/kernels.h"
#include "util/thread_pool.h"

namespace agentq {

size_t row_size(gguf::tensor_type t, int64_t n) {
  auto tr = gguf::traits_of(t);
  return size_t(n / tr.block_size) * size_t(tr.type_size);
}

void dequantize_row(gguf::tensor_type t, const uint8_t* src, float* dst, int64_t n) {
  kernels::dequantize_row(kernels::weight_type(uint32_t(t)), src, dst, n);
}

float dot_f32(const float* a, const float* b, int64_t n) { return kernels::dot_f32(a, b, n); }

void linear(thread_pool& pool, const weight& w, const float* x, int32_t n_x, float* y) {
  const int64_t n_in = w.n_in, n_out = w.n_out;
  const auto t = kernels::weight_type(uint32_t(w.type));
  // Activations prepared once per call (8-bit blocks for quantized weights), row by row.
  thread_local std::vector<uint8_t> qx;
  const size_t qrow = kernels::activation_bytes(t, n_in, 1);
  if (qx.size() < qrow * size_t(n_x)) qx.resize(qrow * size_t(n_x));
  uint8_t* qxp = qx.data();
  pool.parallel_for(n_x, [&](int64_t b, int64_t e) {
    kernels::quantize_activations(t, x + size_t(b) * n_in, n_in, e - b, qxp + size_t(b) * qrow);
  }, std::max<int64_t>(1, 16384 / n_in));
  // NOTE: at least ~64K multiply-adds per chunk, so tiny layers run on the caller alone
  // instead of paying a fork-join per matmul.
  constexpr int64_t k_rows = 16;
  const int64_t min_rows = std::max<int64_t>(k_rows, ((int64_t(1) << 16) / std::max<int64_t>(1, n_in * n_x) + k_rows - 1) / k_rows * k_rows);
  pool.parallel_for(n_out, [&](int64_t b, int64_t e) {
    kernels::matmul_prequantized(t, w.data, w.row_bytes, n_in, qxp, n_x, y, b, e, n_out);
  }, min_rows);
}

}  // namespace agentq
