// Family "gemma2" (Gemma 2): embeddings scaled by sqrt(n_embd); q scaled by 1/sqrt(head_dim)
// after NeoX RoPE; attention-score and final-logit soft-capping; sliding-window attention on
// every other layer; post-attention and post-FFN RMSNorms; a GELU-tanh gated FFN.
// As llama.cpp's src/models/gemma2.cpp. NOTE: the (1 + w) RMSNorm weights are baked into the
// GGUF by the converter (see gemma3.cpp).
#include <cmath>

#include "model/transformer.h"

namespace agentq {

bool build_gemma2(model_loader& ld) {
  if (!ld.common_hparams() || !ld.common_output()) return false;
  layer_stack& d = ld.desc();
  model_hparams& hp = d.hp;
  hp.rope_neox = true;
  d.act = ffn_act::gelu_tanh;
  d.embd_scale = std::sqrt(float(hp.n_embd));
  // Gemma 2 27B (46 layers) scales q by 1/sqrt(n_embd / n_head), the others by 1/sqrt(head_dim).
  d.q_scale = hp.n_layer == 46 ? 1.0f / std::sqrt(float(hp.n_embd / hp.n_head)) : 1.0f / std::sqrt(float(hp.head_dim));
  // NOTE: the defaults are llama.cpp's for Gemma 2 (caps 50 and 30, window 4096, local layers
  // the even ones), used when a file leaves the keys out.
  d.attn_softcap = float(ld.get_float("attn_logit_softcapping").value_or(50.0));
  d.final_softcap = float(ld.get_float("final_logit_softcapping").value_or(30.0));
  const int64_t n_swa = ld.get_int("attention.sliding_window").value_or(4096);
  const int64_t period = ld.get_int("attention.sliding_window_pattern").value_or(2);
  const float base_swa = float(ld.get_float("rope.freq_base_swa").value_or(hp.rope_base));
  if (n_swa <= 0 || n_swa > (1 << 30) || period < 0 || d.attn_softcap <= 0 || d.final_softcap <= 0)
    return ld.fail("invalid gemma2 sliding-window or soft-capping metadata");
  ld.add_rope_set(hp.rope_base, hp.rope_scale);
  ld.add_rope_set(base_swa, hp.rope_scale);
  d.layers.resize(size_t(hp.n_layer));
  for (int32_t il = 0; il < hp.n_layer; ++il) {
    layer_desc& L = d.layers[size_t(il)];
    if (!ld.attention(il, L) || !ld.vec(model_loader::blk(il, "post_attention_norm.weight"), hp.n_embd, &L.attn_post_norm) ||
        !ld.ffn_gated(il, L) || !ld.vec(model_loader::blk(il, "post_ffw_norm.weight"), hp.n_embd, &L.ffn_post_norm))
      return false;
    if (period == 0 || il % period < period - 1) {
      L.window = int32_t(n_swa);
      L.rope_set = 1;
    }
  }
  return true;
}

}  // namespace agentq
