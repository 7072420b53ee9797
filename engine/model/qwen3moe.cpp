// Family "qwen3moe" (Qwen3-MoE, e.g. 30B-A3B): Qwen3's attention (per-head Q/K RMSNorm, NeoX
// RoPE) and a mixture-of-experts FFN: router ffn_gate_inp, experts stacked in
// ffn_{gate,up,down}_exps, softmax top-k with renormalised weights (model/moe.cpp).
// As llama.cpp's src/models/qwen3moe.cpp.
#include "model/transformer.h"

namespace agentq {

bool build_qwen3moe(model_loader& ld) {
  if (!ld.common_hparams() || !ld.common_output()) return false;
  layer_stack& d = ld.desc();
  model_hparams& hp = d.hp;
  hp.rope_neox = true;
  const int64_t n_expert = ld.get_int("expert_count").value_or(0);
  const int64_t n_used = ld.get_int("expert_used_count").value_or(0);
  if (n_expert <= 0 || n_expert > 4096 || n_used <= 0 || n_used > n_expert)
    return ld.fail("qwen3moe needs expert_count > 0 and 0 < expert_used_count <= expert_count");
  d.n_expert = int32_t(n_expert);
  d.n_expert_used = int32_t(n_used);
  d.n_ff_exp = int32_t(ld.get_int("expert_feed_forward_length").value_or(hp.n_ff / d.n_expert_used));
  if (d.n_ff_exp <= 0) return ld.fail("missing or invalid metadata qwen3moe.expert_feed_forward_length");
  const int64_t n_embd = hp.n_embd, n_ff = d.n_ff_exp;
  d.layers.resize(size_t(hp.n_layer));
  for (int32_t il = 0; il < hp.n_layer; ++il) {
    layer_desc& L = d.layers[size_t(il)];
    auto blk = [il](const char* n) { return model_loader::blk(il, n); };
    if (!ld.attention(il, L) || !ld.qk_norm(il, L) || !ld.vec(blk("ffn_norm.weight"), n_embd, &L.ffn_norm) ||
        !ld.matrix(blk("ffn_gate_inp.weight"), n_embd, n_expert, &L.moe_router) ||
        !ld.stacked(blk("ffn_gate_exps.weight"), n_embd, n_ff, n_expert, &L.moe_gate) ||
        !ld.stacked(blk("ffn_up_exps.weight"), n_embd, n_ff, n_expert, &L.moe_up) ||
        !ld.stacked(blk("ffn_down_exps.weight"), n_ff, n_embd, n_expert, &L.moe_down))
      return false;
  }
  return true;
}

}  // namespace agentq
