// The transformer forward pass over a paged KV cache (CPU). One call processes
// any mix of sequences: decode steps (1 token) and prefill chunks (many).
// NOTE: every row's reductions run in a fixed order whatever the batch holds,
// so a sequence's logits do not depend on its batch-mates (batch invariance).
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "agentq/engine.h"
#include "kv/kv_store.h"

namespace agentq {

namespace gguf { class file; }

struct batch_seq {
  const int32_t* block_table = nullptr;  // physical block ids covering positions [0, n_past + n_tokens)
  int32_t n_past = 0;                    // tokens already in KV (positions 0..n_past-1)
  const token_id* tokens = nullptr;      // new tokens: positions n_past..n_past+n_tokens-1
  int32_t n_tokens = 0;
  bool all_logits = false;               // logits for every new token, else only the last
};

struct model_hparams {
  std::string arch;
  int32_t n_vocab = 0, n_ctx = 0, n_embd = 0, n_ff = 0, n_layer = 0, n_head = 0, n_head_kv = 0, head_dim = 0;
  float rms_eps = 1e-5f, rope_base = 10000.0f, rope_scale = 1.0f;
  int32_t n_rot = 0;
  bool rope_neox = false;
  bool rope_yarn = false;          // YaRN scaling (rope_scaling.h); the CPU backend only
  float rope_attn_factor = 1.0f;   // rope.scaling.attn_factor: scales cos/sin
  // Per layer: its sliding window in positions (0: attends to the whole context). A windowed
  // layer needs only its window's K/V: with windowed KV (kv_layout_for(.., windowed)) its
  // blocks before the window give their pages back (kv_store, block_pool).
  std::vector<int32_t> layer_window;
};

// Weights (file bytes) below which "one thread per core" runs the model on one thread.
inline constexpr uint64_t k_one_thread_model_bytes = uint64_t(4) << 20;

class model {
 public:
  // compute: weights copied onto huge pages and repacked for the CPU kernels (weight_store).
  // validate: views into the mapping, for callers that only need the checks and hparams
  // (the CUDA backend uploads from the file itself; `agentq-engine info`).
  enum class weights { compute, validate };
  // Load weights from an opened GGUF (kept alive by the model); nullptr + *error on failure,
  // e.g. an unsupported weight type named in the message. n_threads <= 0: one per core, but one
  // in all for a model whose weights are under k_one_thread_model_bytes (model_loader.cpp).
  static std::unique_ptr<model> load(std::shared_ptr<const gguf::file> file, int32_t n_threads, std::string* error,
                                     weights mode = weights::compute);
  virtual ~model() = default;

  virtual const model_hparams& hparams() const = 0;
  // K/V blocks for this model: head-major, F16 elements unless asked otherwise (see kv_layout);
  // windowed: its sliding-window layers hold only their window (kv_layout::window).
  kv_layout kv_layout_for(int32_t block_size, kv_dtype dtype = kv_dtype::f16, bool windowed = false) const {
    const auto& h = hparams();
    kv_layout l{h.n_layer, h.n_head_kv, h.head_dim, block_size, dtype, /*head_major=*/true};
    return windowed ? with_layer_windows(l, h) : l;
  }
  // l with the model's sliding-window layers marked (kv_layout::window, layer_windowed): the one
  // rule both backends' windowed layouts come from (the CPU's and the CUDA backend's).
  // NOTE: needs a block size that is a multiple of 8: the CPU's attention starts a window's reads
  // at the multiple of 8 below it (attention.cpp), which must lie in a block the window holds.
  static kv_layout with_layer_windows(kv_layout l, const model_hparams& h) {
    if (l.block_size % 8 == 0 && h.n_layer <= int32_t(l.layer_windowed.size())) {
      for (int32_t il = 0; il < int32_t(h.layer_window.size()); ++il) {
        if (h.layer_window[size_t(il)] <= 0) continue;
        l.layer_windowed.set(size_t(il));
        l.window = std::max(l.window, h.layer_window[size_t(il)]);
      }
    }
    return l;
  }
  // Writes the new tokens' K/V into kv through each block table and returns logits:
  // for each seq in order, n_tokens rows if all_logits else 1 row, each [n_vocab].
  // Returns the number of rows written to logits.
  virtual int32_t forward(std::span<const batch_seq> seqs, kv_store& kv, float* logits) = 0;
};

}  // namespace agentq
