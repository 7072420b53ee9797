// Family "phi3" (Phi-3, Phi-3.5, Phi-4 mini): fused attn_qkv (or separate q/k/v), q scaled by
// 1/sqrt(head_dim) after NeoX RoPE, fused gate/up ffn_up (gate rows first) with SwiGLU, and
// LongRoPE (rope_factors_short/long, rope.scaling.attn_factor) when the file has it.
// As llama.cpp's src/models/phi3.cpp.
#include <cmath>

#include "model/transformer.h"

namespace agentq {

bool build_phi3(model_loader& ld) {
  if (!ld.common_hparams() || !ld.common_output()) return false;
  layer_stack& d = ld.desc();
  model_hparams& hp = d.hp;
  hp.rope_neox = true;
  d.q_scale = 1.0f / std::sqrt(float(hp.head_dim));
  if (hp.n_ff <= 0) return ld.fail("missing or invalid metadata phi3.feed_forward_length");
  // NOTE: attention.sliding_window is ignored, as llama.cpp ignores it for Phi-3 (its SWA is
  // disabled there pending converter fixes); every layer attends to the whole context.

  // LongRoPE: per-pair frequency divisors, short below the original context, long above it,
  // and cos/sin scaled by rope.scaling.attn_factor.
  // NOTE: llama.cpp picks long when the context it runs with exceeds
  // rope.scaling.original_context_length; this engine always runs with the trained context
  // (context_length), so the choice is made from that.
  std::vector<float> f_short, f_long;
  if (!ld.vec("rope_factors_short.weight", hp.n_rot / 2, &f_short, true) ||
      !ld.vec("rope_factors_long.weight", hp.n_rot / 2, &f_long, true))
    return false;
  const int64_t n_ctx_orig = ld.get_int("rope.scaling.original_context_length").value_or(hp.n_ctx);
  const bool use_long = !f_long.empty() && hp.n_ctx > n_ctx_orig;
  ld.add_rope_set(hp.rope_base, hp.rope_scale, use_long ? &f_long : &f_short);
  d.rope_mscale = float(ld.get_float("rope.scaling.attn_factor").value_or(1.0));

  d.layers.resize(size_t(hp.n_layer));
  for (int32_t il = 0; il < hp.n_layer; ++il) {
    layer_desc& L = d.layers[size_t(il)];
    if (!ld.attention(il, L) || !ld.vec(model_loader::blk(il, "ffn_norm.weight"), hp.n_embd, &L.ffn_norm) ||
        !ld.matrix(model_loader::blk(il, "ffn_up.weight"), hp.n_embd, 2 * int64_t(hp.n_ff), &L.w_gate_up) ||
        !ld.matrix(model_loader::blk(il, "ffn_down.weight"), hp.n_ff, hp.n_embd, &L.w_down))
      return false;
  }
  return true;
}

}  // namespace agentq
