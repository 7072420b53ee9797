// The shared decoder-only transformer: the description an architecture file fills in
// (layer_stack: hyper-parameters, options, per-layer tensors) and the CPU forward pass
// over it. One file per family under engine/model/<arch>.cpp builds a layer_stack.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "gguf/reader.h"
#include "model/model.h"
#include "model/rope_scaling.h"
#include "model/weights.h"

namespace agentq {

enum class ffn_act { silu, gelu_tanh, swiglu_oai };  // the gate's activation (SwiGLU / GeGLU / GPT-OSS's clamped SwiGLU)
// How a mixture of experts weighs its chosen experts: softmax over all experts, top-k, the k
// renormalised (qwen3moe); or top-k of the raw router logits, softmax over those k (gpt-oss).
enum class moe_gating { softmax_norm, softmax_topk };

// One layer's tensors and options. Empty vectors / null weights are absent tensors.
struct layer_desc {
  std::vector<float> attn_norm;        // [n_embd]
  weight wq, wk, wv;                   // [n_head*hd][n_embd], [n_kv*hd][n_embd] x2
  weight wqkv;                         // fused [n_head*hd + 2*n_kv*hd][n_embd] (phi3), else null
  std::vector<float> bq, bk, bv;       // q/k/v biases (qwen2)
  std::vector<float> q_norm, k_norm;   // [hd] per-head RMSNorm of q and k before RoPE (qwen3, gemma3)
  weight wo;                           // [n_embd][n_head*hd]
  std::vector<float> bo;               // [n_embd] attention output bias (gpt-oss)
  std::vector<float> sinks;            // [n_head] per-head attention sink logits (gpt-oss)
  std::vector<float> attn_post_norm;   // [n_embd] RMSNorm of the attention output (gemma2/3)
  std::vector<float> ffn_norm;         // [n_embd]
  weight w_gate, w_up, w_down;         // [n_ff][n_embd] x2, [n_embd][n_ff]
  weight w_gate_up;                    // fused [2*n_ff][n_embd], gate rows first (phi3), else null
  std::vector<float> ffn_post_norm;    // [n_embd] RMSNorm of the FFN output (gemma2/3)
  // Mixture of experts (qwen3moe): router [n_expert][n_embd]; experts' rows stacked
  // [n_expert][n_ff_exp][n_embd] (gate, up) and [n_expert][n_embd][n_ff_exp] (down).
  weight moe_router, moe_gate, moe_up, moe_down;
  // Their biases (gpt-oss): router [n_expert]; per expert [n_expert][n_ff_exp] x2, [n_expert][n_embd].
  std::vector<float> moe_router_b, moe_gate_b, moe_up_b, moe_down_b;
  bool use_rope = true;  // false: NoPE layer (smollm3)
  int32_t rope_set = 0;  // which layer_stack::rope_inv_freq this layer rotates with
  int32_t window = 0;    // sliding window in positions (key t visible from pos iff pos - t < window); 0: none
};

struct layer_stack {
  model_hparams hp;
  ffn_act act = ffn_act::silu;
  float embd_scale = 0.0f;     // token embeddings multiplied by this (gemma: sqrt(n_embd)); 0: not scaled
  float q_scale = 0.0f;        // q multiplied by this and scores left unscaled (gemma, phi3); 0: scores * 1/sqrt(hd)
  float attn_softcap = 0.0f;   // scores -> cap * tanh(scores / cap) (gemma2); 0: none
  float final_softcap = 0.0f;  // logits -> cap * tanh(logits / cap) (gemma2/3); 0: none
  int32_t n_expert = 0, n_expert_used = 0, n_ff_exp = 0;
  moe_gating gating = moe_gating::softmax_norm;
  ffn_act moe_act = ffn_act::silu;  // the experts' activation (silu or swiglu_oai)
  weight tok_embd;                  // [n_vocab][n_embd]
  weight output;                    // [n_vocab][n_embd] (= tok_embd when tied)
  std::vector<float> output_norm;   // [n_embd]
  std::vector<layer_desc> layers;
  // RoPE: per set, the angle per position of each rotated pair [n_rot/2] (set 0: global layers,
  // set 1: e.g. gemma's local layers) and cos/sin multiplier (LongRoPE's attention factor).
  std::vector<std::vector<float>> rope_inv_freq;
  float rope_mscale = 1.0f;
};

// What an architecture file gets: the open file, metadata readers with the family's
// key prefix, and tensor loaders that check type and shape. Every method returns false
// and sets error() on failure.
class model_loader {
 public:
  model_loader(const gguf::file& f, const weight_store& store, layer_stack& d, std::string* error)
      : f_(f), store_(store), d_(d), error_(error) {}
  const gguf::file& file() const { return f_; }
  layer_stack& desc() { return d_; }
  model_hparams& hp() { return d_.hp; }
  std::string* error() { return error_; }
  bool fail(const std::string& msg) {
    *error_ = msg;
    return false;
  }

  // "<arch>.<key>" metadata.
  std::optional<int64_t> get_int(const std::string& key) const { return f_.get_int(d_.hp.arch + "." + key); }
  std::optional<double> get_float(const std::string& key) const { return f_.get_float(d_.hp.arch + "." + key); }
  std::optional<std::string_view> get_string(const std::string& key) const { return f_.get_string(d_.hp.arch + "." + key); }

  // The hyper-parameters every family shares (llama.cpp's llama_model::load_hparams):
  // sizes, heads, head_dim from attention.key_length, RMS epsilon, RoPE base/scale/dims.
  bool common_hparams();
  // token_embd, output_norm and output (tied to token_embd when absent).
  bool common_output();
  // RoPE tables: set 0 from the rope base/scale (rope_freqs factors when given), more sets added by
  // add_rope_set. factors: [n_rot/2] divisors of each pair's frequency, or null.
  void add_rope_set(float base, float scale, const std::vector<float>* factors = nullptr);

  // A matrix [n_out][n_in] (ggml dims {n_in, n_out}; n_out 0: any) of a supported type.
  bool matrix(const std::string& name, int64_t n_in, int64_t n_out, weight* w, bool optional = false);
  // A stack of n_mat matrices [n_out][n_in] (ggml dims {n_in, n_out, n_mat}) as one weight of n_mat*n_out rows.
  bool stacked(const std::string& name, int64_t n_in, int64_t n_out, int64_t n_mat, weight* w);
  // A vector of n floats (dequantized).
  bool vec(const std::string& name, int64_t n, std::vector<float>* out, bool optional = false);
  // n_rows vectors of n floats (ggml dims {n, n_rows}, e.g. per-expert biases), dequantized, row after row.
  bool vecs(const std::string& name, int64_t n, int64_t n_rows, std::vector<float>* out);
  // Shared layer blocks (llama.cpp's create_tensor_qkv and friends):
  // attn_norm, q/k/v (or a fused attn_qkv when the file has one), q/k/v biases (required
  // when biases, else read when present), attn_output.
  bool attention(int32_t il, layer_desc& L, bool biases = false);
  // attn_q_norm / attn_k_norm, [head_dim] each.
  bool qk_norm(int32_t il, layer_desc& L);
  // ffn_norm, ffn_gate, ffn_up, ffn_down (n_ff wide).
  bool ffn_gated(int32_t il, layer_desc& L);
  // "blk.<il>.<name>"
  static std::string blk(int32_t il, const char* name) { return "blk." + std::to_string(il) + "." + name; }

 private:
  bool tensor(const std::string& name, int64_t n_in, int64_t n_out, int64_t n_mat, weight* w, bool optional);
  const gguf::file& f_;
  const weight_store& store_;
  layer_stack& d_;
  std::string* error_;
  rope_scaling rope_scaling_;  // rope.scaling.*, read by common_hparams
};

// The description of f's architecture (registry.cpp -> engine/model/<arch>.cpp): hyper-parameters,
// options, tensors (weights where store put them: views into the mapping for an empty store), RoPE
// tables, per-layer windows. Both backends run from it: the CPU's transformer.cpp and the CUDA
// backend's cuda_forward.cpp. false + *error (naming the architecture or tensor) on failure.
bool describe_model(const gguf::file& f, const weight_store& store, layer_stack* d, std::string* error);

// The CPU forward pass over a layer_stack (transformer.cpp).
std::unique_ptr<model> make_transformer(std::shared_ptr<const gguf::file> file, std::unique_ptr<weight_store> store,
                                        layer_stack desc, int32_t n_threads);

// y = x / rms(x) * w over n floats (the shared RMSNorm block, ggml's order; see transformer.cpp).
void rms_norm_row(const float* x, const float* w, float* y, int32_t n, float eps);

}  // namespace agentq
