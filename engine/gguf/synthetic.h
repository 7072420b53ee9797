// Synthetic model files: deterministic pseudo-random weights from a seed, with the real tensor
// names and metadata of each architecture and a real tokenizer copied from a vocab GGUF.
// Used by agentq-mkgguf (benchmarks) and the parity tests, which regenerate from the seed.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "agentq/kernels.h"

namespace agentq::gguf {

struct synthetic_spec {
  std::string arch = "llama";  // llama, qwen2, qwen3, qwen3moe, smollm3, gemma2, gemma3, phi3, gpt-oss
  std::string shape = "tiny";  // recorded in general.name
  int32_t n_embd = 256, n_layer = 2, n_head = 4, n_head_kv = 2, n_ff = 512, n_ctx = 512;
  int32_t head_dim = 0;  // 0: n_embd / n_head (else written as attention.key_length / value_length)
  int32_t n_rot = 0;     // rotated dims per head; 0: head_dim
  float rope_base = 10000.0f;
  int32_t n_expert = 0, n_expert_used = 0, n_ff_exp = 0;  // qwen3moe, gpt-oss
  int32_t n_swa = 0;                                      // gemma2/3, gpt-oss attention.sliding_window
  bool tied = false;                                      // no output.weight (token_embd reused)
  // Parity models: larger weights and norm weights around 1 (not all 1), so that logits are
  // spread out and greedy output varies instead of repeating one token.
  bool varied = false;
  float sigma = 0.0f;  // > 0: the stddev of every matrix instead of the defaults (agentq-mkgguf --sigma)
  // Hand-built induction heads over small random weights (gguf/copy_circuit.h; llama only):
  // greedy decoding copies what followed the latest occurrence of its last few tokens.
  bool copy_heads = false;
  kernels::weight_type type = kernels::weight_type::f32;
  uint64_t seed = 1;
  std::string vocab;  // a GGUF whose tokenizer.* metadata is copied
  std::string chat_template;  // non-empty: written as tokenizer.chat_template (instead of the vocab's)
  int n_threads = 1;
};

struct synthetic_result {
  size_t n_tensors = 0;
  uint64_t n_bytes = 0;  // tensor data
  int64_t n_vocab = 0;
};

// The architectures write_synthetic knows.
const std::vector<std::string>& synthetic_archs();
// The small shape the parity tests and scripts/dev/llamacpp_families.sh use for arch (varied, F32).
synthetic_spec parity_spec(const std::string& arch, uint64_t seed, const std::string& vocab);
// Writes spec's model to path; false + *error on a bad spec, a vocab without tokens, or I/O failure.
bool write_synthetic(const synthetic_spec& spec, const std::string& path, synthetic_result* result, std::string* error);

}  // namespace agentq::gguf
