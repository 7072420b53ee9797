// Weight views over the kernels library: row dequantization and the row-parallel
// linear layer (activations prepared once, output rows split across the pool).
#include "model/weights.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "agentq/kernels.h"
#include "util/thread_pool.h"

namespace agentq {

weight_store::~weight_store() {
  kernels::free_huge(copy_, bytes());
}

void weight_store::load(const gguf::file& f) {
  if (copy_ || f.tensors().empty()) return;
  const char* mode = std::getenv("AGENTQ_WEIGHTS");
  if ((mode && std::strcmp(mode, "mmap") == 0) || !kernels::huge_pages_enabled()) return;
  const uint8_t* b = f.tensors().front().data;
  const uint8_t* e = b;
  for (const auto& t : f.tensors()) {
    b = std::min(b, t.data);
    e = std::max(e, t.data + t.n_bytes);
  }
  const size_t n = size_t(e - b);
  if (n < (size_t(2) << 20)) return;  // less than one huge page: nothing to gain
  auto* copy = static_cast<uint8_t*>(kernels::alloc_huge(n));
  if (!copy) return;  // keep using the mapping
  // Tensors keep their offsets from b (multiples of the file's alignment), so every copy is at
  // least as aligned as in the file. Copied in chunks, each chunk's file pages then released.
  constexpr size_t k_chunk = size_t(64) << 20;
  const size_t page = 4096;
  for (size_t off = 0; off < n; off += k_chunk) {
    const size_t len = std::min(k_chunk, n - off);
    std::memcpy(copy + off, b + off, len);
    // Drop the copied file pages from this process (they stay in the page cache).
    const auto lo = (reinterpret_cast<uintptr_t>(b + off) + page - 1) / page * page;
    const auto hi = reinterpret_cast<uintptr_t>(b + off + len) / page * page;
    if (hi > lo) madvise(reinterpret_cast<void*>(lo), hi - lo, MADV_DONTNEED);
  }
  begin_ = b;
  end_ = e;
  copy_ = copy;
}

size_t row_size(gguf::tensor_type t, int64_t n) {
  auto tr = gguf::traits_of(t);
  return size_t(n / tr.block_size) * size_t(tr.type_size);
}

void dequantize_row(gguf::tensor_type t, const uint8_t* src, float* dst, int64_t n) {
  kernels::dequantize_row(kernels::weight_type(uint32_t(t)), src, dst, n);
}

float dot_f32(const float* a, const float* b, int64_t n) {
  return kernels::dot_f32(a, b, n);
}

void linear(thread_pool& pool, const weight& w, const float* x, int32_t n_x, float* y) {
  const weight* ws[1] = {&w};
  float* ys[1] = {y};
  linear_many(pool, ws, x, n_x, ys);
}

void linear_many(thread_pool& pool, std::span<const weight* const> ws, const float* x, int32_t n_x,
                 std::span<float* const> ys) {
  constexpr size_t k_max = 4;
  if (ws.size() > k_max || ws.size() != ys.size()) {
    std::fprintf(stderr, "%s:%d: linear_many: %zu weights, %zu outputs (at most %zu)\n", __FILE__, __LINE__, ws.size(),
                 ys.size(), k_max);
    std::abort();
  }
  const size_t n_w = ws.size();
  const int64_t n_in = ws[0]->n_in;
  // Activations prepared once per distinct weight type (8-bit blocks for quantized weights).
  thread_local std::vector<uint8_t> qbuf[k_max];
  const uint8_t* qx[k_max];
  int64_t row_end[k_max];  // cumulative rows: weight j owns [row_end[j-1], row_end[j])
  int64_t n_rows = 0;
  for (size_t j = 0; j < n_w; ++j) {
    const auto t = kernels::weight_type(uint32_t(ws[j]->type));
    n_rows += ws[j]->n_out;
    row_end[j] = n_rows;
    size_t same = j;
    for (size_t i = 0; i < j; ++i)
      if (ws[i]->type == ws[j]->type) {
        same = i;
        break;
      }
    if (same != j) {
      qx[j] = qx[same];
      continue;
    }
    const size_t qrow = kernels::activation_bytes(t, n_in, 1);
    if (qbuf[j].size() < qrow * size_t(n_x)) qbuf[j].resize(qrow * size_t(n_x));
    uint8_t* dst = qbuf[j].data();
    pool.parallel_for(
        n_x,
        [&](int64_t b, int64_t e) {
          kernels::quantize_activations(t, x + size_t(b) * n_in, n_in, e - b, dst + size_t(b) * qrow);
        },
        std::max<int64_t>(1, 16384 / n_in));
    qx[j] = dst;
  }
  // Rows of all weights as one range, split across the pool.
  // NOTE: at least ~64K multiply-adds per chunk, so tiny layers run on the caller alone
  // instead of paying a fork-join per matmul.
  constexpr int64_t k_rows = 16;
  const int64_t min_rows =
      std::max<int64_t>(k_rows, ((int64_t(1) << 16) / std::max<int64_t>(1, n_in * n_x) + k_rows - 1) / k_rows * k_rows);
  pool.parallel_for(
      n_rows,
      [&](int64_t b, int64_t e) {
        int64_t first = 0;
        for (size_t j = 0; j < n_w; ++j) {
          const int64_t lo = std::max(b, first), hi = std::min(e, row_end[j]);
          if (lo < hi) {
            const weight& w = *ws[j];
            kernels::matmul_prequantized(kernels::weight_type(uint32_t(w.type)), w.data, w.row_bytes, n_in, qx[j], n_x,
                                         ys[j], lo - first, hi - first, w.n_out);
          }
          first = row_end[j];
        }
      },
      min_rows);
}

}  // namespace agentq
