// Raw storage of the paged KV cache: n_blocks fixed-size blocks, each holding
// block_size tokens of K and V for every layer. Allocation, reference counts and
// the prefix index live in block_pool / prefix_cache; this is only memory.
// kv_memory is where the blocks live (kv_store: host memory for the CPU model; the CUDA
// backend's device blocks) with the block-level copies the pool and the spill tier need.
#pragma once

#include <cstdint>
#include <span>
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

class kv_store;

class kv_memory {
 public:
  virtual ~kv_memory() = default;
  virtual const kv_layout& layout() const = 0;
  virtual int32_t n_blocks() const = 0;
  // The host store when the blocks live in host memory (the CPU model reads it), else nullptr.
  virtual kv_store* host() { return nullptr; }
  // Copy-on-write: the first n_rows token rows of K and V, every layer, from block src to dst.
  virtual void copy_rows(int32_t src, int32_t dst, int32_t n_rows) = 0;
  // blocks[i] -> out + i * 2 * n_layer * block_floats, laid out [n_layer][K, V][block_floats]
  // (the spill file's order). Complete on return; false on a device error.
  virtual bool read_blocks(std::span<const int32_t> blocks, float* out) = 0;
  // in -> blocks[i], same layout. May finish asynchronously, but before any later forward pass
  // or copy touches those blocks; `in` may be reused on return. false on a device error.
  virtual bool write_blocks(std::span<const int32_t> blocks, const float* in) = 0;
};

class kv_store final : public kv_memory {
 public:
  kv_store(kv_layout layout, int32_t n_blocks)
      : layout_(layout), n_blocks_(n_blocks),
        k_(size_t(layout.n_layer) * n_blocks * layout.block_floats()),
        v_(size_t(layout.n_layer) * n_blocks * layout.block_floats()) {}

  const kv_layout& layout() const override { return layout_; }
  int32_t n_blocks() const override { return n_blocks_; }
  kv_store* host() override { return this; }
  void copy_rows(int32_t src, int32_t dst, int32_t n_rows) override;
  bool read_blocks(std::span<const int32_t> blocks, float* out) override;
  bool write_blocks(std::span<const int32_t> blocks, const float* in) override;

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
