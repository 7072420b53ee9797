// Weight tensors of a GGUF model as the forward pass sees them: typed views into
// the mapping, row dequantization, and the batched matrix-vector product.
// NOTE: linear() splits output rows across threads and relies on kernels::matmul's
// contract (each y[b][r] depends only on W[r] and x[b], in a fixed order), so results
// do not depend on n_x or on the split (batch invariance).
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "gguf/reader.h"

namespace agentq {

class thread_pool;

struct weight {
  const gguf::tensor_info* info = nullptr;
  gguf::tensor_type type = gguf::tensor_type::f32;
  const uint8_t* data = nullptr;  // [n_out][row_bytes] in the mapping
  int64_t n_in = 0;               // elements per row (ggml dims[0])
  int64_t n_out = 0;              // rows (dims[1]; 1 for vectors)
  size_t row_bytes = 0;

  explicit operator bool() const { return data != nullptr; }
  const uint8_t* row(int64_t r) const { return data + size_t(r) * row_bytes; }
};

// The tensor data of a model file copied out of the mapping into anonymous memory on
// 2 MiB pages (kernels::alloc_huge). NOTE: decode streams every weight once per token; from
// the file's 4 KiB pages that ran ~15% slower per token (110M Q8_0, CPU clock, same run).
// The copy is skipped (relocate() stays the identity) when AGENTQ_WEIGHTS=mmap, when THP is
// off, for data under 2 MiB, or when the memory cannot be had. Copied file pages are
// dropped from the process as it goes, so peak RSS stays about one copy.
class weight_store {
 public:
  weight_store() = default;
  ~weight_store();
  weight_store(const weight_store&) = delete;
  weight_store& operator=(const weight_store&) = delete;

  // Copy the data of every tensor of f (once; f must outlive this store).
  void load(const gguf::file& f);
  // The copy of the byte at p (a pointer into f's tensor data); p itself when not copied.
  const uint8_t* relocate(const uint8_t* p) const {
    return copy_ && p >= begin_ && p < end_ ? copy_ + (p - begin_) : p;
  }
  size_t bytes() const { return copy_ ? size_t(end_ - begin_) : 0; }  // 0 when not copied

 private:
  const uint8_t* begin_ = nullptr;  // tensor data range in the mapping
  const uint8_t* end_ = nullptr;
  uint8_t* copy_ = nullptr;
};

// Bytes of one row of n elements of type t (n a multiple of the block size).
size_t row_size(gguf::tensor_type t, int64_t n);

// Dequantize n elements (one row, or several whole rows) to f32. Types: those gguf::is_supported accepts.
void dequantize_row(gguf::tensor_type t, const uint8_t* src, float* dst, int64_t n);

// y[i][o] = dot(w.row(o), x[i]) for i < n_x, o < w.n_out.
//   x: [n_x][w.n_in]   y: [n_x][w.n_out]
void linear(thread_pool& pool, const weight& w, const float* x, int32_t n_x, float* y);

// Several weights applied to the same input in one fork-join (Q/K/V, gate/up):
// y_j = x W_j^T for each j; same results as calling linear() for each.
//   ws[j].n_in must all equal; ys[j]: [n_x][ws[j]->n_out]
void linear_many(thread_pool& pool, std::span<const weight* const> ws, const float* x, int32_t n_x,
                 std::span<float* const> ys);

// Fixed-order dot product (8-lane partial sums, then a fixed tree), n any length.
float dot_f32(const float* a, const float* b, int64_t n);

}  // namespace agentq
