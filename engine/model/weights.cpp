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
  kernels::free_huge(mem_, bytes_);
}

void weight_store::load(const gguf::file& f, const layout_fn& layout) {
  if (mem_ || f.tensors().empty()) return;
  const char* mode = std::getenv("AGENTQ_WEIGHTS");
  if (mode && std::strcmp(mode, "mmap") == 0) return;
  constexpr size_t k_align = 64;  // >= every kernel's alignment need (files use 32)
  struct plan {
    const gguf::tensor_info* t;
    kernels::weight_type from, to;
    int64_t rows;
    size_t bytes;  // in layout `to`, rounded up to k_align
  };
  std::vector<plan> plans;
  size_t file_bytes = 0;
  for (const auto& t : f.tensors()) {
    file_bytes += t.n_bytes;
    plan p{&t, kernels::weight_type(uint32_t(t.type)), {}, t.dims.size() > 1 ? t.dims[1] : 1, 0};
    p.to = layout ? layout(t) : p.from;
    const size_t n = p.to == p.from ? size_t(t.n_bytes) : kernels::matrix_bytes(p.to, p.rows, t.dims[0]);
    p.bytes = (n + k_align - 1) / k_align * k_align;
    plans.push_back(p);
  }
  // Copy everything when huge pages make it worth it; otherwise only what is repacked.
  const bool copy_all = kernels::huge_pages_enabled() && file_bytes >= (size_t(2) << 20);
  std::erase_if(plans, [&](const plan& p) { return !copy_all && p.to == p.from; });
  if (plans.empty()) return;
  std::sort(plans.begin(), plans.end(), [](const plan& a, const plan& b) { return a.t->data < b.t->data; });
  size_t total = 0;
  for (const auto& p : plans) total += p.bytes;
  auto* mem = static_cast<uint8_t*>(kernels::alloc_huge(total));
  if (!mem) return;  // keep using the mapping, file layouts
  const size_t page = 4096;
  size_t off = 0;
  for (const auto& p : plans) {
    const gguf::tensor_info& t = *p.t;
    if (p.to == p.from) std::memcpy(mem + off, t.data, t.n_bytes);
    else kernels::repack(p.from, t.data, p.rows, t.dims[0], p.to, mem + off);
    // Drop the copied file pages from this process (they stay in the page cache).
    const auto lo = (reinterpret_cast<uintptr_t>(t.data) + page - 1) / page * page;
    const auto hi = reinterpret_cast<uintptr_t>(t.data + t.n_bytes) / page * page;
    if (hi > lo) madvise(reinterpret_cast<void*>(lo), hi - lo, MADV_DONTNEED);
    placed_.push_back({t.data, size_t(t.n_bytes), mem + off, p.to});
    off += p.bytes;
  }
  mem_ = mem;
  bytes_ = total;
}

const weight_store::placed* weight_store::find(const uint8_t* p) const {
  auto it = std::upper_bound(placed_.begin(), placed_.end(), p, [](const uint8_t* v, const placed& e) { return v < e.src; });
  if (it == placed_.begin()) return nullptr;
  --it;
  return p < it->src + it->n_src ? &*it : nullptr;
}

const uint8_t* weight_store::relocate(const uint8_t* p) const {
  const placed* e = find(p);
  return e ? e->dst + (p - e->src) : p;
}

kernels::weight_type weight_store::layout(const gguf::tensor_info& t) const {
  const placed* e = find(t.data);
  return e && e->src == t.data ? e->layout : kernels::weight_type(uint32_t(t.type));
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
    const auto t = ws[j]->layout;
    n_rows += ws[j]->n_out;
    row_end[j] = n_rows;
    size_t same = j;
    for (size_t i = 0; i < j; ++i)
      if (ws[i]->layout == ws[j]->layout) {
        same = i;
        break;
      }
    if (same != j) {
      qx[j] = qx[same];
      continue;
    }
    if (kernels::activations_are_floats(t)) {  // float weights read x as it is: no copy
      qx[j] = reinterpret_cast<const uint8_t*>(x);
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
            kernels::matmul_prequantized(w.layout, w.data, w.row_bytes, n_in, qx[j], n_x,
                                         ys[j], lo - first, hi - first, w.n_out);
          }
          first = row_end[j];
        }
      },
      min_rows);
}

}  // namespace agentq
