// Family "gpt-oss" (OpenAI GPT-OSS 20B/120B; llama.cpp's LLM_ARCH_OPENAI_MOE): attention with
// q/k/v and output biases and a learned sink logit per head, NeoX RoPE with YaRN, sliding-window
// attention on every other layer, and a mixture of experts with router and expert biases, top-k
// router logits softmaxed over the k, and the clamped SwiGLU (MXFP4 experts in real files).
// As llama.cpp's src/models/openai-moe.cpp.
#include "model/transformer.h"

namespace agentq {

bool build_gpt_oss(model_loader& ld) {
  if (!ld.common_hparams() || !ld.common_output()) return false;
  layer_stack& d = ld.desc();
  model_hparams& hp = d.hp;
  hp.rope_neox = true;
  d.gating = moe_gating::softmax_topk;
  d.moe_act = ffn_act::swiglu_oai;
  const int64_t n_expert = ld.get_int("expert_count").value_or(0);
  const int64_t n_used = ld.get_int("expert_used_count").value_or(0);
  if (n_expert <= 0 || n_expert > 4096 || n_used <= 0 || n_used > n_expert)
    return ld.fail("gpt-oss needs expert_count > 0 and 0 < expert_used_count <= expert_count");
  const int64_t n_ff_exp = ld.get_int("expert_feed_forward_length").value_or(0);
  if (n_ff_exp <= 0 || n_ff_exp > (1 << 30)) return ld.fail("missing or invalid metadata gpt-oss.expert_feed_forward_length");
  d.n_expert = int32_t(n_expert);
  d.n_expert_used = int32_t(n_used);
  d.n_ff_exp = int32_t(n_ff_exp);
  // NOTE: the window is required metadata (as llama.cpp); the pattern's period defaults to 2,
  // layer il windowed iff il % period < period - 1 (even layers local, odd global), as llama.cpp's
  // set_swa_pattern. llama.cpp also reads rope.freq_base_swa (default: the global base); real
  // files carry none, and a different one is refused rather than rotated without YaRN.
  const int64_t n_swa = ld.get_int("attention.sliding_window").value_or(-1);
  const int64_t period = ld.get_int("attention.sliding_window_pattern").value_or(2);
  if (n_swa < 0 || n_swa > (1 << 30) || period < 0 || period > (1 << 20))
    return ld.fail("missing or invalid metadata gpt-oss.attention.sliding_window");
  if (auto base_swa = ld.get_float("rope.freq_base_swa"); base_swa && float(*base_swa) != hp.rope_base)
    return ld.fail("gpt-oss: rope.freq_base_swa different from rope.freq_base is not supported");
  const int64_t n_embd = hp.n_embd, n_ff = n_ff_exp;
  d.layers.resize(size_t(hp.n_layer));
  for (int32_t il = 0; il < hp.n_layer; ++il) {
    layer_desc& L = d.layers[size_t(il)];
    auto blk = [il](const char* n) { return model_loader::blk(il, n); };
    // post_attention_norm is the FFN's input norm here (not an output norm as in Gemma).
    if (!ld.attention(il, L) || !ld.vec(blk("attn_output.bias"), n_embd, &L.bo) ||
        !ld.vec(blk("attn_sinks.weight"), hp.n_head, &L.sinks) ||
        !ld.vec(blk("post_attention_norm.weight"), n_embd, &L.ffn_norm) ||
        !ld.matrix(blk("ffn_gate_inp.weight"), n_embd, n_expert, &L.moe_router) ||
        !ld.vec(blk("ffn_gate_inp.bias"), n_expert, &L.moe_router_b) ||
        !ld.stacked(blk("ffn_gate_exps.weight"), n_embd, n_ff, n_expert, &L.moe_gate) ||
        !ld.stacked(blk("ffn_up_exps.weight"), n_embd, n_ff, n_expert, &L.moe_up) ||
        !ld.stacked(blk("ffn_down_exps.weight"), n_ff, n_embd, n_expert, &L.moe_down) ||
        !ld.vecs(blk("ffn_gate_exps.bias"), n_ff, n_expert, &L.moe_gate_b) ||
        !ld.vecs(blk("ffn_up_exps.bias"), n_ff, n_expert, &L.moe_up_b) ||
        !ld.vecs(blk("ffn_down_exps.bias"), n_embd, n_expert, &L.moe_down_b))
      return false;
    if (n_swa > 0 && (period == 0 || il % period < period - 1)) L.window = int32_t(n_swa);
  }
  return true;
}

}  // namespace agentq
