// The transformer forward pass on one CUDA device (kernels/cuda), run from the same description
// of the layer stack as the CPU's (describe_model -> layer_stack, engine/model/<arch>.cpp): weights
// uploaded once from the GGUF mapping, K/V in device blocks, one call per batch with the same
// contract as model::forward. Built only with the CUDA backend (AGENTQ_HAVE_CUDA).
// The engine reaches it through forward_backend (cuda_backend.cpp).
#pragma once

#if AGENTQ_HAVE_CUDA

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "agentq/kernels_cuda.h"
#include "model/model.h"
#include "kv/page_table.h"
#include "model/transformer.h"

namespace agentq {

class cuda_forward {
 public:
  // Validates the model through model::load (same hparams and error messages as the CPU
  // path), uploads every weight and allocates n_blocks KV blocks of block_size tokens
  // (none when n_blocks is 0: call alloc_kv later). Uses the calling thread's current device.
  // nullptr + *error on failure (no device, out of device memory, an architecture the registry
  // does not mark cuda or a description this pass cannot run: the message names the architecture).
  static std::unique_ptr<cuda_forward> create(std::shared_ptr<const gguf::file> file, int32_t block_size,
                                              int32_t n_blocks, std::string* error);
  ~cuda_forward();

  // (Re)allocates the KV blocks, zeroed; false + *error when out of device memory.
  // n_block_ids > 0: windowed KV: n_blocks * n_layer pages of one layer's block each (kv() is then
  // one "layer" of pages), block ids 0..n_block_ids-1 mapped to pages per layer by the page table
  // set_page_table gives (its changed rows uploaded at the start of each forward()).
  bool alloc_kv(int32_t block_size, int32_t n_blocks, std::string* error, int32_t n_block_ids = 0);
  // The windowed KV's page table (owned by the caller, filled by the block_pool); nullptr: none.
  void set_page_table(kv_page_table* t) { page_table_ = t; }
  bool paged() const { return page_map_.ok(); }

  const model_hparams& hparams() const { return hp_; }
  kernels::cuda::kv_device_cache& kv() { return kv_; }
  // The stream every forward() launch goes on (copy-on-write copies go here too).
  kernels::cuda::stream_t stream() const { return stream_; }

  // As model::forward, with K/V in kv(): block tables index its blocks. logits is host
  // memory, [rows][n_vocab]. Returns the rows written; -1 after a CUDA failure
  // (kernels::cuda::cuda_failed() then says why).
  // NOTE: batches of more than kGemmMinRows tokens use cuBLAS GEMM, which is not
  // batch-invariant; decode batches up to that size use the fixed-order matvec. F32
  // weights always use matvec: the GEMM's fp16 inputs would drop the precision they carry
  // (and the tiny test model, all F32, then matches the CPU token for token).
  int32_t forward(std::span<const batch_seq> seqs, float* logits);

  static constexpr int32_t kGemmMinRows = 16;
  // Block-table width bucket of a graphed decode step (kGraphBlocks * block_size tokens: one
  // attention partition at the default block size, so short contexts keep the one-kernel path).
  static constexpr int32_t kGraphBlocks = 16;

  // Decode steps captured into a CUDA graph so far (0 with AGENTQ_CUDA_GRAPHS=0).
  int64_t graph_captures() const { return graph_captures_; }

 private:
  // A matrix on the device: a view of rows of an uploaded tensor (a fused attn_qkv or ffn_up is
  // viewed as its parts; a stack of experts is one view of n_expert * rows).
  struct mat {
    kernels::cuda::weight_type type = kernels::cuda::weight_type::f32;
    const void* data = nullptr;  // [n_out][row_bytes]
    int64_t n_in = 0, n_out = 0;
    explicit operator bool() const { return data != nullptr; }
    mat rows(int64_t first, int64_t n) const;
  };
  // One layer_desc on the device: f32 vectors (an empty buffer: absent) and matrices (null: absent).
  struct dev_layer {
    kernels::cuda::device_buffer attn_norm, bq, bk, bv, q_norm, k_norm, bo, sinks, attn_post_norm;
    kernels::cuda::device_buffer ffn_norm, ffn_post_norm, moe_router_b, moe_gate_b, moe_up_b, moe_down_b;
    mat wq, wk, wv, wo, w_gate, w_up, w_down, moe_router, moe_gate, moe_up, moe_down;
    bool use_rope = true;
    int32_t rope_set = 0;
    int32_t window = 0;  // positions; 0: none
  };

  cuda_forward() = default;
  bool upload(const weight& w, mat* out, std::string* error);
  bool upload(const std::vector<float>& v, kernels::cuda::device_buffer* out, std::string* error);
  bool upload_layer(const layer_desc& L, dev_layer& D, std::string* error);
  static bool uses_matvec(const mat& w, int32_t n_x);  // else cuBLAS GEMM
  void linear(const mat& w, const float* x, int32_t n_x, float* y);
  // x += W a (tmp: scratch for the GEMM path's product).
  void residual_linear(const mat& w, const float* a, int32_t n_x, float* x, float* tmp);
  // x += post_norm(W a + b) (bias and norm when the layer has them; tmp: scratch [n_x][W.n_out]).
  void residual_out(const mat& w, const kernels::cuda::device_buffer& b, const kernels::cuda::device_buffer& post,
                    const float* a, int32_t n_x, float* x, float* tmp);
  float* scratch(kernels::cuda::device_buffer& b, size_t floats);
  // Windowed KV: the page table's rows changed since the last call -> page_map_ (on stream_).
  bool upload_pages();
  // Layer il's K/V base and page map (the page pool and page_map_ with windowed KV).
  float* k_cache(int32_t il) const { return paged() ? kv_.k_layer(0) : kv_.k_layer(il); }
  float* v_cache(int32_t il) const { return paged() ? kv_.v_layer(0) : kv_.v_layer(il); }
  kernels::cuda::kv_page_map page_map(int32_t il) const {
    return paged() ? kernels::cuda::kv_page_map{page_map_.as<int32_t>(), hp_.n_layer, il} : kernels::cuda::kv_page_map{};
  }

  std::shared_ptr<const gguf::file> file_;
  model_hparams hp_;
  layer_stack opts_;  // the description's options and RoPE tables (its layers are in layers_)
  int32_t block_size_ = 16;
  kernels::cuda::stream_t stream_ = nullptr;
  void* cublas_ = nullptr;
  std::vector<kernels::cuda::device_buffer> tensors_;                     // every uploaded matrix
  std::vector<std::pair<const gguf::tensor_info*, const void*>> uploaded_;  // tensor -> its bytes (a tied output)
  mat tok_embd_, output_;
  kernels::cuda::device_buffer output_norm_;
  std::vector<kernels::cuda::device_buffer> rope_sets_;  // [n_rot/2] angles per position, per RoPE set
  std::vector<dev_layer> layers_;
  kernels::cuda::kv_device_cache kv_;
  // Windowed KV: the device mirror of page_table_ ([n_block_ids][n_layer] page ids) and its pinned
  // staging (rows are copied there, then uploaded; forward() ends synchronised, so it is free again).
  kv_page_table* page_table_ = nullptr;
  kernels::cuda::device_buffer page_map_;
  kernels::cuda::pinned_buffer page_staging_;

  // Per-batch device scratch, grown on demand. NOTE: forward() is not reentrant.
  kernels::cuda::device_buffer x_, xb_, q_, k_, v_, att_, hb_, hb2_, rows_, logits_, attn_ws_, gemm_ws_;
  kernels::cuda::device_buffer router_, moe_ids_, moe_w_, moe_g_, moe_u_, moe_y_;  // mixture of experts
  kernels::cuda::device_buffer moe_order_, moe_chunks_;  // rows grouped by expert (moe_group)
  kernels::cuda::pinned_buffer staging_;  // host side of the per-batch index arrays
  kernels::cuda::device_buffer index_;    // ids, positions, block tables... (one upload per batch)

  // The graphed decode step: its executable graph and what its launches were captured with.
  bool graphs_enabled_ = true;
  kernels::cuda::graph graph_;
  std::vector<uintptr_t> graph_key_;
  int64_t graph_captures_ = 0;
};

}  // namespace agentq

#endif  // AGENTQ_HAVE_CUDA
