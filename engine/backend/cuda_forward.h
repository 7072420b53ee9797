// The llama-family forward pass (llama, qwen2, qwen3: per-head Q/K RMSNorm) on one CUDA device (kernels/cuda): weights uploaded
// once from the GGUF mapping, K/V in device blocks, one call per batch with the same
// contract as model::forward. Built only with the CUDA backend (AGENTQ_HAVE_CUDA).
// The engine reaches it through forward_backend (cuda_backend.cpp).
#pragma once

#if AGENTQ_HAVE_CUDA

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "agentq/kernels_cuda.h"
#include "model/model.h"

namespace agentq {

class cuda_forward {
 public:
  // Validates the model through model::load (same hparams and error messages as the CPU
  // path), uploads every weight and allocates n_blocks KV blocks of block_size tokens
  // (none when n_blocks is 0: call alloc_kv later). Uses the calling thread's current device.
  // nullptr + *error on failure (no device, out of device memory, unsupported model).
  static std::unique_ptr<cuda_forward> create(std::shared_ptr<const gguf::file> file, int32_t block_size,
                                              int32_t n_blocks, std::string* error);
  ~cuda_forward();

  // (Re)allocates the KV blocks, zeroed; false + *error when out of device memory.
  bool alloc_kv(int32_t block_size, int32_t n_blocks, std::string* error);

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
  struct dev_weight {
    kernels::cuda::weight_type type = kernels::cuda::weight_type::f32;
    kernels::cuda::device_buffer data;  // [n_out][row_bytes]
    int64_t n_in = 0, n_out = 0;
  };
  struct dev_layer {
    kernels::cuda::device_buffer attn_norm, ffn_norm, bq, bk, bv;  // f32 vectors (biases may be empty)
    kernels::cuda::device_buffer q_norm, k_norm;  // [head_dim] per-head RMSNorm of q and k (qwen3), or empty
    dev_weight wq, wk, wv, wo, w_gate, w_up, w_down;
  };

  cuda_forward() = default;
  bool upload_matrix(const std::string& name, int64_t n_in, int64_t n_out, dev_weight* w, std::string* error);
  bool upload_vector(const std::string& name, int64_t n, kernels::cuda::device_buffer* out, bool optional,
                     std::string* error);
  static bool uses_matvec(const dev_weight& w, int32_t n_x);  // else cuBLAS GEMM
  void linear(const dev_weight& w, const float* x, int32_t n_x, float* y);
  // x += W a (tmp: scratch for the GEMM path's product).
  void residual_linear(const dev_weight& w, const float* a, int32_t n_x, float* x, float* tmp);
  float* scratch(kernels::cuda::device_buffer& b, size_t floats);

  std::shared_ptr<const gguf::file> file_;
  model_hparams hp_;
  int32_t block_size_ = 16;
  kernels::cuda::stream_t stream_ = nullptr;
  void* cublas_ = nullptr;
  dev_weight tok_embd_, output_;
  kernels::cuda::device_buffer output_norm_, rope_freqs_;
  std::vector<dev_layer> layers_;
  kernels::cuda::kv_device_cache kv_;

  // Per-batch device scratch, grown on demand. NOTE: forward() is not reentrant.
  kernels::cuda::device_buffer x_, xb_, q_, k_, v_, att_, hb_, hb2_, rows_, logits_, attn_ws_, gemm_ws_;
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
