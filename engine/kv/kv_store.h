// Raw storage of the paged KV cache: n_blocks fixed-size blocks, each holding
// block_size tokens of K and V for every layer. Allocation, reference counts and
// the prefix index live in block_pool / prefix_cache; this is only memory.
// kv_memory is where the blocks live (kv_store: host memory for the CPU model; the CUDA
// backend's device blocks) with the block-level copies the pool and the spill tier need.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "kv/kv_layout.h"
#include "kv/page_table.h"

namespace agentq {

class kv_store;

class kv_memory {
 public:
  virtual ~kv_memory() = default;
  virtual const kv_layout& layout() const = 0;
  virtual int32_t n_blocks() const = 0;
  // The host store when the blocks live in host memory (the CPU model reads it), else nullptr.
  virtual kv_store* host() { return nullptr; }
  // Windowed layouts: the (block, layer) -> page table the block_pool fills (host or device
  // pages alike); nullptr: every block holds every layer.
  virtual kv_page_table* pages() { return nullptr; }
  // Copy-on-write: the first n_rows tokens' K and V, every layer and head, from block src to dst.
  virtual void copy_rows(int32_t src, int32_t dst, int32_t n_rows) = 0;
  // blocks[i] -> out + i * layout().block_bytes(), laid out [n_layer][K, V][block_elems] in the
  // layout's element type (the spill file's order). Complete on return; false on a device error.
  // with_windowed false (windowed layouts): the full layers only, block_bytes_full_layers() each.
  virtual bool read_blocks(std::span<const int32_t> blocks, void* out, bool with_windowed = true) = 0;
  // in -> blocks[i], same layout. May finish asynchronously, but before any later forward pass
  // or copy touches those blocks; `in` may be reused on return. false on a device error.
  virtual bool write_blocks(std::span<const int32_t> blocks, const void* in, bool with_windowed = true) = 0;
};

// Host blocks. Without a window, block b of layer l is page l * n_blocks + b of the K (and V)
// arrays. With one (kv_layout::window), the arrays are n_pages pages of one layer's block each
// and every (block, layer) maps to a page through a table the block_pool fills: a block takes
// a page per layer when allocated and gives back its windowed layers' pages once no holder's
// window reaches it, so a long sequence holds ~window tokens in those layers.
class kv_store final : public kv_memory {
 public:
  // n_blocks: blocks' worth of memory (every layer). Windowed: n_blocks * n_layer pages, and
  // n_blocks() block ids (enough for every page to be in a block's full layers).
  kv_store(kv_layout layout, int32_t n_blocks);
  kv_store(const kv_store&) = delete;
  kv_store& operator=(const kv_store&) = delete;

  const kv_layout& layout() const override { return layout_; }
  int32_t n_blocks() const override { return n_blocks_; }
  kv_store* host() override { return this; }
  kv_page_table* pages() override { return table_.get(); }
  void copy_rows(int32_t src, int32_t dst, int32_t n_rows) override;
  bool read_blocks(std::span<const int32_t> blocks, void* out, bool with_windowed = true) override;
  bool write_blocks(std::span<const int32_t> blocks, const void* in, bool with_windowed = true) override;

  // Windowed stores: pages, and the page of (block, layer) (-1: none). The block_pool owns the
  // free pages and sets the table.
  bool paged() const { return table_ != nullptr; }
  int32_t n_pages() const { return n_pages_; }
  int32_t page(int32_t block_idx, int32_t layer) const { return table_->page(block_idx, layer); }
  void set_page(int32_t block_idx, int32_t layer, int32_t page_idx) { table_->set_page(block_idx, layer, page_idx); }

  // K/V of one block in one layer: block_elems() elements in the layout's order (see
  // kv_layout::elem_offset) of its element type T (float for f32, uint16_t IEEE half bits for
  // f16; checked).
  // The same as raw bytes, for code that handles either element type (kernels::quantize_row
  // with weight_type f32 or f16 writes either).
  uint8_t* k_bytes(int32_t layer, int32_t block_idx) { return k_.data() + offset(layer, block_idx); }
  uint8_t* v_bytes(int32_t layer, int32_t block_idx) { return v_.data() + offset(layer, block_idx); }
  template <class T = float>
  T* k(int32_t layer, int32_t block_idx) {
    return typed<T>(k_.data() + offset(layer, block_idx));
  }
  template <class T = float>
  T* v(int32_t layer, int32_t block_idx) {
    return typed<T>(v_.data() + offset(layer, block_idx));
  }
  template <class T = float>
  const T* k(int32_t layer, int32_t block_idx) const {
    return typed<T>(k_.data() + offset(layer, block_idx));
  }
  template <class T = float>
  const T* v(int32_t layer, int32_t block_idx) const {
    return typed<T>(v_.data() + offset(layer, block_idx));
  }

 private:
  size_t offset(int32_t layer, int32_t block_idx) const {
    if (table_) {
      const int32_t p = page(block_idx, layer);
      if (p < 0) no_page(layer, block_idx);
      return size_t(p) * size_t(layout_.block_elem_bytes());
    }
    return (size_t(layer) * n_blocks_ + size_t(block_idx)) * size_t(layout_.block_elem_bytes());
  }
  [[noreturn]] void no_page(int32_t layer, int32_t block_idx) const;
  template <class T>
  T* typed(uint8_t* p) const {
    static_assert(std::is_same_v<T, float> || std::is_same_v<T, uint16_t>);
    if (sizeof(T) != size_t(layout_.elem_bytes())) wrong_type(sizeof(T));
    return reinterpret_cast<T*>(p);
  }
  [[noreturn]] void wrong_type(size_t elem_bytes) const;

  // Zeroed memory on 2 MiB transparent huge pages where the host allows them.
  // NOTE: decode attention walks one head's rows, a few hundred bytes every few KiB, through
  // the whole context: on 4 KiB pages nearly every other row was a new TLB entry. Pages are
  // also zeroed on first touch instead of all at engine start.
  class huge_bytes {
   public:
    explicit huge_bytes(size_t n);
    ~huge_bytes();
    huge_bytes(const huge_bytes&) = delete;
    huge_bytes& operator=(const huge_bytes&) = delete;
    uint8_t* data() const { return p_; }

   private:
    uint8_t* p_;
    size_t n_;
  };

  kv_layout layout_;
  int32_t n_blocks_;
  int32_t n_pages_;
  std::unique_ptr<kv_page_table> table_;  // windowed: the page of each (block, layer); else null
  huge_bytes k_;  // [n_pages][block_elems] elements ([n_layer][n_blocks] without a window)
  huge_bytes v_;  // same
};

}  // namespace agentq
