// Weight tensors of a GGUF model as the forward pass sees them: typed views into
// the mapping, row dequantization, and the batched matrix-vector product.
// NOTE: linear() splits output rows across threads and relies on kernels::matmul's
// contract (each y[b][r] depends only on W[r] and x[b], in a fixed order), so results
// do not depend on n_x or on the split (batch invariance).
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "agentq/kernels.h"
#include "gguf/reader.h"

namespace agentq {

class thread_pool;

struct weight {
  const gguf::tensor_info* info = nullptr;
  gguf::tensor_type type = gguf::tensor_type::f32;  // as in the file
  // How data is laid out: the file's type, or a CPU layout it was repacked into at load
  // (the kernels' _x8 layouts), whose rows are interleaved: then only linear() may read it.
  kernels::weight_type layout = kernels::weight_type::f32;
  const uint8_t* data = nullptr;  // [n_out][row_bytes]
  int64_t n_in = 0;               // elements per row (ggml dims[0])
  int64_t n_out = 0;              // rows (dims[1]; 1 for vectors)
  size_t row_bytes = 0;           // of the layout (matmul's row stride)

  explicit operator bool() const { return data != nullptr; }
  const uint8_t* row(int64_t r) const { return data + size_t(r) * row_bytes; }
};

// The tensor data of a model file copied out of the mapping into anonymous memory on
// 2 MiB pages (kernels::alloc_huge), matrices repacked on the way into the layout the CPU
// kernels run fastest on (layout_fn; Q8_0 / Q4_K / Q6_K -> their _x8: kernels::preferred_layout).
// NOTE: decode streams every weight once per token; from the file's 4 KiB pages that ran
// ~15% slower per token (110M Q8_0, CPU clock, same run). Only repacked tensors are copied
// (the rest stay mapped) when THP is off, for data under 2 MiB, or when one allocation of
// the whole cannot be had; with AGENTQ_WEIGHTS=mmap nothing is copied or repacked. Copied
// file pages are dropped from the process tensor by tensor, so peak RSS stays about one copy.
class weight_store {
 public:
  // The layout tensor t is to be stored in; its file type keeps the bytes as they are.
  using layout_fn = std::function<kernels::weight_type(const gguf::tensor_info& t)>;

  weight_store() = default;
  ~weight_store();
  weight_store(const weight_store&) = delete;
  weight_store& operator=(const weight_store&) = delete;

  // Copy (and repack) the tensors of f (once; f must outlive this store). No layout_fn:
  // every tensor keeps its file type.
  void load(const gguf::file& f, const layout_fn& layout = {});
  // Where the data at p (a pointer into f's tensor data) now lives; p itself when not copied.
  // For a repacked tensor only its start (tensor_info::data) is meaningful.
  const uint8_t* relocate(const uint8_t* p) const;
  // The layout of relocate(t.data): the file's type unless t was repacked.
  kernels::weight_type layout(const gguf::tensor_info& t) const;
  size_t bytes() const { return bytes_; }  // 0 when nothing was copied

 private:
  struct placed {
    const uint8_t* src;  // the tensor in the mapping
    size_t n_src;
    uint8_t* dst;
    kernels::weight_type layout;
  };
  const placed* find(const uint8_t* p) const;
  std::vector<placed> placed_;  // ascending src
  uint8_t* mem_ = nullptr;
  size_t bytes_ = 0;
};

// Dequantize n elements (one row, or several whole rows) to f32. Types: those gguf::is_supported accepts.
void dequantize_row(gguf::tensor_type t, const uint8_t* src, float* dst, int64_t n);

// y[i][o] = dot(w.row(o), x[i]) for i < n_x, o < w.n_out.
//   x: [n_x][w.n_in]   y: [n_x][w.n_out]; y must not overlap x (float weights read x in place
//   while other threads write y)
void linear(thread_pool& pool, const weight& w, const float* x, int32_t n_x, float* y);

// Several weights applied to the same input in one fork-join (Q/K/V, gate/up):
// y_j = x W_j^T for each j; same results as calling linear() for each.
//   ws[j].n_in must all equal; ys[j]: [n_x][ws[j]->n_out]
void linear_many(thread_pool& pool, std::span<const weight* const> ws, const float* x, int32_t n_x,
                 std::span<float* const> ys);

// Fixed-order dot product (8-lane partial sums, then a fixed tree), n any length.
float dot_f32(const float* a, const float* b, int64_t n);

}  // namespace agentq
