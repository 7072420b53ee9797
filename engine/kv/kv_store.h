// Raw storage of the paged KV cache: n_blocks fixed-size blocks, each holding
// block_size tokens of K and V for every layer. Allocation, reference counts and
// the prefix index live in block_pool / prefix_cache; this is only memory.
#pragma once

#include <cstdint>
#include <vector>

namespace agentq {

struct kv_layout {
  int32_t n_layer = 0;
  int32_t n_head_kv = 0;
  int32_t head_dim = 0;
  int32_t block_size = 16;   // tokens per block
  int32_t row() const { return n_head_kv * head_dim; }                       // floats per token per layer
  int64_t block_floats() const { return int64_t(block_size) * row(); }       // floats per block per layer, K or V
  int64_t block_bytes() const { return 2 * int64_t(n_layer) * block_floats() * int64_t(sizeof(float)); }
};

class kv_store {
 public:
  kv_store(kv_layout layout, int32_t n_blocks)
      : layout_(layout), n_blocks_(n_blocks),
        k_(size_t(layout.n_layer) * n_blocks * layout.block_floats()),
        v_(size_t(layout.n_layer) * n_blocks * layout.block_floats()) {}

  const kv_layout& layout() const { return layout_; }
  int32_t n_blocks() const { return n_blocks_; }

  // K/V of one block in one layer: float[block_size][n_head_kv * head_dim]
  float* k(int32_t layer, int32_t block_idx) { return k_.data() + offset(layer, block_idx); }
  float* v(int32_t layer, int32_t block_idx) { return v_.data() + offset(layer, block_idx); }
  const float* k(int32_t layer, int32_t block_idx) const { return k_.data() + offset(layer, block_idx); }
  const float* v(int32_t layer, int32_t block_idx) const { return v_.data() + offset(layer, block_idx); }

 private:
  size_t offset(int32_t layer, int32_t block_idx) const {
    return (size_t(layer) * n_blocks_ + size_t(block_idx)) * size_t(layout_.block_floats());
  }
  kv_layout layout_;
  int32_t n_blocks_;
  std::vector<float> k_;  // [n_layer][n_blocks][block_size][n_head_kv*head_dim]
  std::vector<float> v_;  // same
};

}  // namespace agentq
