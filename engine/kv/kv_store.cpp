// Host KV blocks: copy-on-write and the spill tier's block copies (plain memcpy of the
// stored elements, whatever their type).
#include "kv/kv_store.h"

#include <algorithm>
#include <climits>
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


kv_store::kv_store(kv_layout layout, int32_t n_blocks)
    : layout_(layout), n_blocks_(kv_page_table::n_ids_for(layout, n_blocks)),
      n_pages_(int32_t(std::min<int64_t>(int64_t(n_blocks) * layout.n_layer, INT32_MAX))),
      table_(layout.window > 0 ? std::make_unique<kv_page_table>(layout, n_blocks) : nullptr),
      k_(size_t(n_pages_) * layout.block_elem_bytes()),
      v_(size_t(n_pages_) * layout.block_elem_bytes()) {
  if (layout.window > 0 && layout.n_layer > int32_t(layout.layer_windowed.size())) {
    std::fprintf(stderr, "kv_store: %d layers, windowed KV supports %zu\n", layout.n_layer,
                 layout.layer_windowed.size());
    std::abort();
  }
}

void kv_store::no_page(int32_t layer, int32_t block_idx) const {
  std::fprintf(stderr, "%s:%d: kv_store: block %d has no page for layer %d (outside its window)\n", __FILE__, __LINE__,
               block_idx, layer);
  std::abort();
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
    // NOTE: a windowed layer's page may be gone in src (outside its window), then dst has none either
    if (paged() && (page(src, l) < 0 || page(dst, l) < 0)) continue;
    for (int32_t h = 0; h < n_runs; ++h) {
      const size_t o = size_t(layout_.elem_offset(0, h)) * eb;
      std::memcpy(k_.data() + offset(l, dst) + o, k_.data() + offset(l, src) + o, bytes);
      std::memcpy(v_.data() + offset(l, dst) + o, v_.data() + offset(l, src) + o, bytes);
    }
  }
}

bool kv_store::read_blocks(std::span<const int32_t> blocks, void* out, bool with_windowed) {
  const size_t n = size_t(layout_.block_elem_bytes());
  auto* o = static_cast<uint8_t*>(out);
  for (int32_t b : blocks) {
    for (int32_t l = 0; l < layout_.n_layer; ++l) {
      if (!with_windowed && paged() && layout_.layer_windowed[size_t(l)]) continue;
      std::memcpy(o, k_.data() + offset(l, b), n);
      std::memcpy(o + n, v_.data() + offset(l, b), n);
      o += 2 * n;
    }
  }
  return true;
}

bool kv_store::write_blocks(std::span<const int32_t> blocks, const void* in, bool with_windowed) {
  const size_t n = size_t(layout_.block_elem_bytes());
  const auto* p = static_cast<const uint8_t*>(in);
  for (int32_t b : blocks) {
    for (int32_t l = 0; l < layout_.n_layer; ++l) {
      if (!with_windowed && paged() && layout_.layer_windowed[size_t(l)]) continue;
      std::memcpy(k_.data() + offset(l, b), p, n);
      std::memcpy(v_.data() + offset(l, b), p + n, n);
      p += 2 * n;
    }
  }
  return true;
}

}  // namespace agentq
