// Raw storage of the paged KV cache: n_blocks fixed-size blocks, each holding
// block_size tokens of K and V for every layer. Allocation, reference counts and
// the prefix index live in block_pool / prefix_cache; this is only memory.
// kv_memory is where the blocks live (kv_store: host memory for the CPU model; the CUDA
// backend's device blocks) with the block-level copies the pool and the spill tier need.
#pragma once

#include <algorithm>
#include <bitset>
#include <cstdint>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

namespace agentq {

// Element type of the stored K/V. The CPU model stores F16 by default (half the bytes each
// decode step reads, twice the tokens a KV budget holds; as llama.cpp's default cache), F32
// on request; the CUDA backend stores F32. Values are rounded to F16 once, when written.
enum class kv_dtype : uint8_t { f32 = 0, f16 = 1 };  // NOTE: the spill header stores the value
const char* kv_dtype_name(kv_dtype t);
// "f32" / "f16" -> *out; false for anything else.
bool parse_kv_dtype(const std::string& text, kv_dtype* out);

struct kv_layout {
  int32_t n_layer = 0;
  int32_t n_head_kv = 0;
  int32_t head_dim = 0;
  int32_t block_size = 16;   // tokens per block
  kv_dtype dtype = kv_dtype::f32;
  // Order of a block's K (or V) elements in one layer: token-major [block_size][n_head_kv][head_dim]
  // (CUDA), or head-major [n_head_kv][block_size][head_dim] (the CPU model). Head-major keeps
  // one head's rows contiguous: decode attention, which walks one head through the whole
  // context, reads 2 KiB runs (F16, 16 tokens x 64 dims) instead of 128 bytes every 1.5 KiB.
  bool head_major = false;
  // Windowed KV (host stores only): layers in layer_windowed attend to the last `window`
  // positions only (gemma2/3 local layers, gpt-oss's alternating ones) and hold K/V only for
  // the blocks their window can still reach (window_block); window 0: every layer holds every block.
  int32_t window = 0;                 // tokens (the largest window of the windowed layers)
  std::bitset<256> layer_windowed{};  // [n_layer]
  int32_t n_layer_windowed() const { return window > 0 ? int32_t(layer_windowed.count()) : 0; }
  int32_t n_layer_full() const { return n_layer - n_layer_windowed(); }
  // The first block a sequence of n_tokens positions keeps for its windowed layers: the next
  // query (at position n_tokens) sees keys from n_tokens + 1 - window on, and later ones later.
  int32_t window_block(int32_t n_tokens) const {
    return window > 0 ? (n_tokens + 1 - window > 0 ? (n_tokens + 1 - window) / block_size : 0) : 0;
  }
  // Bytes a sequence of n_tokens positions holds: every block in its full layers, the blocks
  // from window_block(n_tokens) on in its windowed layers.
  int64_t seq_bytes(int32_t n_tokens) const {
    const int64_t nb = (int64_t(n_tokens) + block_size - 1) / block_size;
    const int64_t nb_win = nb - std::min<int64_t>(nb, window_block(n_tokens));
    return 2 * block_elem_bytes() * (nb * n_layer_full() + nb_win * n_layer_windowed());
  }
  int32_t row() const { return n_head_kv * head_dim; }                       // elements per token per layer
  // Elements from a block's start to token t's values of kv head h, and from one token's
  // values of a head to the next token's.
  int64_t elem_offset(int32_t t, int32_t h) const {
    return head_major ? (int64_t(h) * block_size + t) * head_dim : int64_t(t) * row() + int64_t(h) * head_dim;
  }
  int32_t token_stride() const { return head_major ? head_dim : row(); }
  int64_t block_elems() const { return int64_t(block_size) * row(); }        // elements per block per layer, K or V
  int32_t elem_bytes() const { return dtype == kv_dtype::f16 ? 2 : 4; }
  int64_t block_elem_bytes() const { return block_elems() * elem_bytes(); }  // bytes per block per layer, K or V
  int64_t block_bytes() const { return 2 * int64_t(n_layer) * block_elem_bytes(); }
  // A block without its windowed layers (one outside every holder's window).
  int64_t block_bytes_full_layers() const { return 2 * int64_t(n_layer_full()) * block_elem_bytes(); }
};

class kv_store;

class kv_memory {
 public:
  virtual ~kv_memory() = default;
  virtual const kv_layout& layout() const = 0;
  virtual int32_t n_blocks() const = 0;
  // The host store when the blocks live in host memory (the CPU model reads it), else nullptr.
  virtual kv_store* host() { return nullptr; }
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
  void copy_rows(int32_t src, int32_t dst, int32_t n_rows) override;
  bool read_blocks(std::span<const int32_t> blocks, void* out, bool with_windowed = true) override;
  bool write_blocks(std::span<const int32_t> blocks, const void* in, bool with_windowed = true) override;

  // Windowed stores: pages, and the page of (block, layer) (-1: none). The block_pool owns the
  // free pages and sets the table.
  bool paged() const { return layout_.window > 0; }
  int32_t n_pages() const { return n_pages_; }
  int32_t page(int32_t block_idx, int32_t layer) const { return pages_[size_t(block_idx) * layout_.n_layer + layer]; }
  void set_page(int32_t block_idx, int32_t layer, int32_t page_idx) {
    pages_[size_t(block_idx) * layout_.n_layer + layer] = page_idx;
  }

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
    if (!pages_.empty()) {
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
  std::vector<int32_t> pages_;  // windowed: [n_blocks][n_layer] page ids, -1 = none; else empty
  huge_bytes k_;  // [n_pages][block_elems] elements ([n_layer][n_blocks] without a window)
  huge_bytes v_;  // same
};

}  // namespace agentq
