// Family "gemma3" (Gemma 3 text): embeddings scaled by sqrt(n_embd); per-head Q/K RMSNorm;
// q scaled by 1/sqrt(head_dim) after NeoX RoPE; sliding-window attention on the local layers
// (five of every six) with their own RoPE base; post-attention and post-FFN RMSNorms; a GELU-tanh
// gated FFN; optional final logit soft-capping. As llama.cpp's src/models/gemma3.cpp.
// NOTE: Gemma's RMSNorm multiplies by (1 + w); the GGUF converter stores w + 1, so the norms
// here are plain RMSNorms of the file's weights (llama.cpp: conversion/gemma.py).
#include <cmath>

#include "model/transformer.h"

namespace agentq {

bool build_gemma3(model_loader& ld) {
  if (!ld.common_hparams() || !ld.common_output()) return false;
  layer_stack& d = ld.desc();
  model_hparams& hp = d.hp;
  hp.rope_neox = true;
  d.act = ffn_act::gelu_tanh;
  d.embd_scale = std::sqrt(float(hp.n_embd));
  // Gemma 3 27B (62 layers) scales q by 1/sqrt(n_embd / n_head), the others by 1/sqrt(head_dim).
  d.q_scale = hp.n_layer == 62 ? 1.0f / std::sqrt(float(hp.n_embd / hp.n_head)) : 1.0f / std::sqrt(float(hp.head_dim));
  d.final_softcap = float(ld.get_float("final_logit_softcapping").value_or(0.0));
  // NOTE: fixed per family as the reference fixes them: local layers are il % 6 < 5 and rotate
  // with base 10000 (llama.cpp reads sliding_window_pattern and rope.freq_base_swa when a file
  // carries them, with these defaults; so do we).
  const int64_t n_swa = ld.get_int("attention.sliding_window").value_or(0);
  const int64_t period = ld.get_int("attention.sliding_window_pattern").value_or(6);
  const float base_swa = float(ld.get_float("rope.freq_base_swa").value_or(10000.0));
  if (n_swa < 0 || n_swa > (1 << 30) || period < 0) return ld.fail("invalid gemma3 sliding-window metadata");
  ld.add_rope_set(hp.rope_base, hp.rope_scale);
  if (n_swa > 0) ld.add_rope_set(base_swa, 1.0f);
  d.layers.resize(size_t(hp.n_layer));
  for (int32_t il = 0; il < hp.n_layer; ++il) {
    layer_desc& L = d.layers[size_t(il)];
    if (!ld.attention(il, L) || !ld.qk_norm(il, L) ||
        !ld.vec(model_loader::blk(il, "post_attention_norm.weight"), hp.n_embd, &L.attn_post_norm) ||
        !ld.ffn_gated(il, L) || !ld.vec(model_loader::blk(il, "post_ffw_norm.weight"), hp.n_embd, &L.ffn_post_norm))
      return false;
    const bool local = n_swa > 0 && (period == 0 || il % period < period - 1);
    if (local) {
      L.window = int32_t(n_swa);
      L.rope_set = 1;
    }
  }
  return true;
}

}  // namespace agentq
