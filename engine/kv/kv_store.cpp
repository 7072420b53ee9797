// Host KV blocks: copy-on-write and the spill tier's block copies (plain memcpy).
#include "kv/kv_store.h"

#include <cstring>

namespace agentq {

void kv_store::copy_rows(int32_t src, int32_t dst, int32_t n_rows) {
  const size_t bytes = size_t(n_rows) * size_t(layout_.row()) * sizeof(float);
  for (int32_t l = 0; l < layout_.n_layer; ++l) {
    std::memcpy(k(l, dst), k(l, src), bytes);
    std::memcpy(v(l, dst), v(l, src), bytes);
  }
}

bool kv_store::read_blocks(std::span<const int32_t> blocks, float* out) {
  const size_t n = size_t(layout_.block_floats());
  for (int32_t b : blocks) {
    for (int32_t l = 0; l < layout_.n_layer; ++l) {
      std::memcpy(out, k(l, b), n * sizeof(float));
      std::memcpy(out + n, v(l, b), n * sizeof(float));
      out += 2 * n;
    }
  }
  return true;
}

bool kv_store::write_blocks(std::span<const int32_t> blocks, const float* in) {
  const size_t n = size_t(layout_.block_floats());
  for (int32_t b : blocks) {
    for (int32_t l = 0; l < layout_.n_layer; ++l) {
      std::memcpy(k(l, b), in, n * sizeof(float));
      std::memcpy(v(l, b), in + n, n * sizeof(float));
      in += 2 * n;
    }
  }
  return true;
}

}  // namespace agentq
