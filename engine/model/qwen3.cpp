// Family "qwen3" (Qwen3 dense): Qwen2's layer without q/k/v biases, plus a per-head RMSNorm
// of q and k (attn_q_norm, attn_k_norm) before NeoX RoPE; head_dim from attention.key_length
// (may differ from n_embd / n_head); tied or separate output. As llama.cpp's src/models/qwen3.cpp.
#include "model/transformer.h"

namespace agentq {

bool build_qwen3(model_loader& ld) {
  if (!ld.common_hparams() || !ld.common_output()) return false;
  layer_stack& d = ld.desc();
  d.hp.rope_neox = true;
  d.layers.resize(size_t(d.hp.n_layer));
  for (int32_t il = 0; il < d.hp.n_layer; ++il) {
    layer_desc& L = d.layers[size_t(il)];
    if (!ld.attention(il, L) || !ld.qk_norm(il, L) || !ld.ffn_gated(il, L)) return false;
  }
  return true;
}

}  // namespace agentq
