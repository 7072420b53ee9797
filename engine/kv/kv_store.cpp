// Host KV blocks: copy-on-write and the spill tier's block copies (plain memcpy of the
// stored elements, whatever their type).
#include "kv/kv_store.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>

#include "agentq/kernels.h"

namespace agentq {

const char* kv_dtype_name(kv_dtype t) { return t == kv_dtype::f16 ? "f16" : "f32"; }

bool parse_kv_dtype(const std::string& text, kv_dtype* out) {
  if (text == "f32") *out = kv_dtype::f32;
  else if (text == "f16") *out = kv_dtype::f16;
  else return false;
  return true;
}

kv_store::huge_bytes::huge_bytes(size_t n) : p_(static_cast<uint8_t*>(kernels::alloc_huge(n))), n_(n) {
  if (n > 0 && !p_) throw std::bad_alloc();
}

kv_store::huge_bytes::~huge_bytes() { kernels::free_huge(p_, n_); }

void kv_store::wrong_type(size_t elem_bytes) const {
  std::fprintf(stderr, "%s:%d: kv_store: %zu-byte element access to a %s store\n", __FILE__, __LINE__, elem_bytes,
               kv_dtype_name(layout_.dtype));
  std::abort();
}

void kv_store::copy_rows(int32_t src, int32_t dst, int32_t n_rows) {
  // Token-major: the first n_rows rows are one range; head-major: one range per head.
  const int32_t n_runs = layout_.head_major ? layout_.n_head_kv : 1;
  const size_t eb = size_t(layout_.elem_bytes());
  const size_t bytes = size_t(n_rows) * size_t(layout_.token_stride()) * eb;
  for (int32_t l = 0; l < layout_.n_layer; ++l) {
    for (int32_t h = 0; h < n_runs; ++h) {
      const size_t o = size_t(layout_.elem_offset(0, h)) * eb;
      std::memcpy(k_.data() + offset(l, dst) + o, k_.data() + offset(l, src) + o, bytes);
      std::memcpy(v_.data() + offset(l, dst) + o, v_.data() + offset(l, src) + o, bytes);
    }
  }
}

bool kv_store::read_blocks(std::span<const int32_t> blocks, void* out) {
  const size_t n = size_t(layout_.block_elem_bytes());
  auto* o = static_cast<uint8_t*>(out);
  for (int32_t b : blocks) {
    for (int32_t l = 0; l < layout_.n_layer; ++l) {
      std::memcpy(o, k_.data() + offset(l, b), n);
      std::memcpy(o + n, v_.data() + offset(l, b), n);
      o += 2 * n;
    }
  }
  return true;
}

bool kv_store::write_blocks(std::span<const int32_t> blocks, const void* in) {
  const size_t n = size_t(layout_.block_elem_bytes());
  const auto* p = static_cast<const uint8_t*>(in);
  for (int32_t b : blocks) {
    for (int32_t l = 0; l < layout_.n_layer; ++l) {
      std::memcpy(k_.data() + offset(l, b), p, n);
      std::memcpy(v_.data() + offset(l, b), p + n, n);
      p += 2 * n;
    }
  }
  return true;
}

}  // namespace agentq
