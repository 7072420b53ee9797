// Family "smollm3" (SmolLM3): the llama layer with every fourth layer (il % 4 == 3) without
// RoPE (NoPE). As llama.cpp's src/models/smollm3.cpp.
#include "model/transformer.h"

namespace agentq {

bool build_smollm3(model_loader& ld) {
  if (!ld.common_hparams() || !ld.common_output()) return false;
  layer_stack& d = ld.desc();
  // NOTE: the period is fixed per family, as the reference implementation fixes it
  // (llama.cpp: n_no_rope_layer_step = 4); SmolLM3's GGUF carries no key for it.
  constexpr int32_t k_no_rope_layer_step = 4;
  d.layers.resize(size_t(d.hp.n_layer));
  for (int32_t il = 0; il < d.hp.n_layer; ++il) {
    layer_desc& L = d.layers[size_t(il)];
    if (!ld.attention(il, L) || !ld.ffn_gated(il, L)) return false;
    L.use_rope = (il + 1) % k_no_rope_layer_step != 0;
  }
  return true;
}

}  // namespace agentq
