// Families "llama" (Llama 2/3/3.1 with rope_freqs, Mistral, TinyLlama, SmolLM) and "qwen2"
// (q/k/v biases, NeoX RoPE): pre-norm GQA attention and a SwiGLU FFN, as llama.cpp's
// src/models/llama.cpp and qwen2.cpp.
#include "model/transformer.h"

namespace agentq {

namespace {

bool build_llama_like(model_loader& ld, bool qwen2) {
  if (!ld.common_hparams() || !ld.common_output()) return false;
  layer_stack& d = ld.desc();
  d.hp.rope_neox = qwen2;
  d.layers.resize(size_t(d.hp.n_layer));
  for (int32_t il = 0; il < d.hp.n_layer; ++il)
    if (!ld.attention(il, d.layers[size_t(il)], /*biases=*/qwen2) || !ld.ffn_gated(il, d.layers[size_t(il)])) return false;
  // Llama 3.1-style frequency factors (one tensor for every layer).
  std::vector<float> freq_factors;
  if (!ld.vec("rope_freqs.weight", d.hp.n_rot / 2, &freq_factors, true)) return false;
  ld.add_rope_set(d.hp.rope_base, d.hp.rope_scale, &freq_factors);
  return true;
}

}  // namespace

bool build_llama(model_loader& ld) { return build_llama_like(ld, false); }
bool build_qwen2(model_loader& ld) { return build_llama_like(ld, true); }

}  // namespace agentq
