// Hand-built "copy" weights for synthetic llama models (agentq-mkgguf --shape 110m-copy): an
// induction circuit on top of small random weights, so greedy decoding continues a sequence
// with what followed the latest occurrence of its last D (up to 8) tokens, as real models
// rewriting a file do. Same tensors, sizes and types as the random model: the forward costs the same.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace agentq::gguf {

struct synthetic_spec;

// Residual layout (dims of n_embd; M = head_dim; D = min(8, n_head_kv, (n_embd - 1) / M - 2)):
//   A  [0, M)            the token's code c(t), +-1 entries (token_embd)
//   Bk [kM, (k+1)M)      c(t[i-k]), k = 1..D, written by layer 0's offset-k head
//   C  [(D+1)M, +M)      the induction heads' votes: mean of c(t[j]) over each head's j
//   n_embd - 1           a constant (beta): RoPE-only queries/keys read it; it fixes the RMS
// Layers 1.. are induction layers: each kv head scores key c(t[j-1]) + .. + c(t[j-D]) against
// query c(t[i]) + .. + c(t[i-D+1]) through its own random projection into the head's
// low-frequency RoPE pairs (nearly position-independent), so the heads' crosstalk is
// independent and their votes add up in C; output.weight reads C. Ties go to the latest match.
class copy_circuit {
 public:
  // The circuit for spec's shape (arch llama, untied); nullopt + *error if the shape is too small.
  static std::optional<copy_circuit> make(const synthetic_spec& spec, std::string* error);
  // Adds the circuit's part of row r of tensor `name` (n_cols values) to row; tensors the
  // circuit does not use are left alone.
  void overlay(const std::string& name, int64_t r, float* row, int64_t n_cols) const;
  // stddev of the random weights under the circuit (the spec's sigma if set).
  float background_sigma() const { return sigma_bg_; }

 private:
  float code(uint64_t salt, int64_t a, int64_t b) const;  // deterministic +-1
  void layer0(const std::string& t, int64_t r, float* row) const;
  void induction(int layer, const std::string& t, int64_t r, float* row) const;

  int64_t n_embd_ = 0, hd_ = 0, grp_ = 1, n_kv_ = 0;
  int64_t m_ = 0;                    // code width M (= head_dim)
  int64_t n_off_ = 0;                // D: tokens an induction head matches
  int64_t n_pos_pairs_ = 8;          // high-frequency pairs the offset heads use
  int64_t low_pair_ = 0;             // first low-frequency pair the induction heads use
  float rope_base_ = 10000.0f, beta_ = 0;
  float s_pos_ = 0, s_o0_ = 0, s_ind_ = 0, s_o1_ = 0, s_out_ = 0, sigma_bg_ = 0.002f;
  uint64_t seed_ = 1;
};

}  // namespace agentq::gguf
