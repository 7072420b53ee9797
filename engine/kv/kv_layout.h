// The shape of the paged KV cache: element type, layer/head geometry, block size, element order
// and the sliding-window layers (windowed KV), with the byte counts residency and spill use.
#pragma once

#include <algorithm>
#include <bitset>
#include <cstdint>
#include <string>

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
  // Windowed KV (host and CUDA stores): layers in layer_windowed attend to the last `window`
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

}  // namespace agentq
