// Windowed KV's page table: which page holds each (block, layer) of a paged KV memory. The
// block_pool fills it (a block takes a page per layer when allocated and gives its windowed
// layers' pages back once no window reaches it); the host store (kv_store) reads it directly, the
// CUDA backend mirrors it to the device, uploading only the blocks changed since its last upload.
#pragma once

#include <algorithm>
#include <climits>
#include <cstdint>
#include <vector>

#include "kv/kv_layout.h"

namespace agentq {

class kv_page_table {
 public:
  // n_blocks: blocks' worth of memory (every layer): n_blocks * n_layer pages, and block ids
  // enough for every page to sit in blocks' full layers (the windowed layers of all but the
  // newest blocks are given back).
  kv_page_table(const kv_layout& l, int32_t n_blocks)
      : n_layer_(l.n_layer),
        n_block_ids_(n_ids_for(l, n_blocks)),
        n_pages_(int32_t(std::min<int64_t>(int64_t(n_blocks) * l.n_layer, INT32_MAX))),
        pages_(size_t(n_block_ids_) * size_t(l.n_layer), -1),
        dirty_flag_(size_t(n_block_ids_), 0) {}

  static int32_t n_ids_for(const kv_layout& l, int32_t n_blocks) {
    if (l.window <= 0) return n_blocks;
    const int64_t n = int64_t(n_blocks) * l.n_layer / std::max(1, l.n_layer_full());
    return int32_t(std::min<int64_t>(n, INT32_MAX / 2));
  }

  int32_t n_layer() const { return n_layer_; }
  int32_t n_block_ids() const { return n_block_ids_; }
  int32_t n_pages() const { return n_pages_; }
  // The page of (block, layer); -1: none.
  int32_t page(int32_t block_idx, int32_t layer) const { return pages_[size_t(block_idx) * n_layer_ + layer]; }
  void set_page(int32_t block_idx, int32_t layer, int32_t page_idx) {
    pages_[size_t(block_idx) * n_layer_ + layer] = page_idx;
    if (!dirty_flag_[size_t(block_idx)]) {
      dirty_flag_[size_t(block_idx)] = 1;
      dirty_.push_back(block_idx);
    }
  }
  // [n_block_ids][n_layer] page ids (the device mirror's layout).
  const int32_t* data() const { return pages_.data(); }
  // Blocks whose row changed since the last take_dirty (each once, in order of first change).
  // NOTE: bounded by n_block_ids (a block is listed once until taken), so a host store that never
  // takes them keeps at most one entry per block.
  std::vector<int32_t> take_dirty() {
    for (int32_t b : dirty_) dirty_flag_[size_t(b)] = 0;
    std::vector<int32_t> out;
    out.swap(dirty_);
    return out;
  }

 private:
  int32_t n_layer_;
  int32_t n_block_ids_;
  int32_t n_pages_;
  std::vector<int32_t> pages_;       // [n_block_ids][n_layer], -1 = none
  std::vector<uint8_t> dirty_flag_;  // [n_block_ids]
  std::vector<int32_t> dirty_;       // blocks changed since take_dirty
};

}  // namespace agentq
