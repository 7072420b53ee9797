// Raw storage of the paged KV cache: n_blocks fixed-size blocks, each holding
// block_size tokens of K and V for every layer. Allocation, reference counts and
// the prefix index live in block_pool / prefix_cache; this is only memory.
// kv_memory is where the blocks live (kv_store: host memory for the CPU model; the CUDA
// backend's device blocks) with the block-level copies the pool and the spill tier need.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <type_traits>

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
  virtual bool read_blocks(std::span<const int32_t> blocks, void* out) = 0;
  // in -> blocks[i], same layout. May finish asynchronously, but before any later forward pass
  // or copy touches those blocks; `in` may be reused on return. false on a device error.
  virtual bool write_blocks(std::span<const int32_t> blocks, const void* in) = 0;
};

class kv_store final : public kv_memory {
 public:
  kv_store(kv_layout layout, int32_t n_blocks)
      : layout_(layout), n_blocks_(n_blocks),
        k_(size_t(layout.n_layer) * n_blocks * layout.block_elem_bytes()),
        v_(size_t(layout.n_layer) * n_blocks * layout.block_elem_bytes()) {}
  kv_store(const kv_store&) = delete;
  kv_store& operator=(const kv_store&) = delete;

  const kv_layout& layout() const override { return layout_; }
  int32_t n_blocks() const override { return n_blocks_; }
  kv_store* host() override { return this; }
  void copy_rows(int32_t src, int32_t dst, int32_t n_rows) override;
  bool read_blocks(std::span<const int32_t> blocks, void* out) override;
  bool write_blocks(std::span<const int32_t> blocks, const void* in) override;

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
    return (size_t(layer) * n_blocks_ + size_t(block_idx)) * size_t(layout_.block_elem_bytes());
  }
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
  huge_bytes k_;  // [n_layer][n_blocks][block_elems] elements
  huge_bytes v_;  // same
};

}  // namespace agentq
