// Causal attention of query heads over a sequence's paged K/V (CPU forward pass).
// NOTE: each query's result depends only on its own q, its positions 0..pos and the
// K/V rows there, in a fixed order (scores in position order, V accumulated in position
// order): queries that run together only share loads, so results are batch-invariant.
#pragma once

#include <cstdint>

namespace agentq {

class kv_store;

struct attention_args {
  const kv_store* kv = nullptr;
  int32_t layer = 0;
  const int32_t* block_table = nullptr;  // the sequence's blocks
  int32_t block_size = 0;                // tokens per block
  int32_t token_stride = 0;              // elements from a token's head values to the next token's
  int32_t head_offset = 0;               // elements from a block's start to this head's token 0
                                         // (kv_layout::token_stride / elem_offset(0, kv head))
  int32_t head_dim = 0;
  float scale = 1.0f;  // 1/sqrt(head_dim)
  int32_t window = 0;  // sliding window: key t is seen from pos iff pos - t < window; 0: all of 0..pos
  float softcap = 0;   // scores -> softcap * tanh(scores / softcap) before the softmax (gemma2); 0: none
  // An attention sink (gpt-oss): one more logit in the softmax's denominator with no value row,
  // so a head can attend to nothing. has_sink false: none.
  bool has_sink = false;
  float sink = 0;
};

// n_q queries of one head at consecutive positions pos0, pos0 + 1, ... of one sequence:
// out[j] = softmax(q[j] . K[0..pos0+j] * scale) V[0..pos0+j]. q[j], out[j]: head_dim floats
// q_stride / out_stride floats apart. scores: scratch of at least pos0 + n_q floats.
// With a window, the positions before it weigh exactly 0 (their scores are -inf), as if skipped.
void attend(const attention_args& a, const float* q, int64_t q_stride, int32_t pos0, int32_t n_q, float* out,
            int64_t out_stride, float* scores);

// One query each of two heads that read the same K/V head (GQA: a.head_offset == b.head_offset;
// a and b may differ only in their sink) at position pos: out_a and out_b bit for bit as
// attend(a, qa, .., pos, 1, out_a, ..) and attend(b, qb, ..) give them, each K/V row read once
// for both where the CPU allows (AVX-512, head_dim 64 or 128), else those two calls.
// scores: scratch of at least pos + 1 floats.
void attend_head_pair(const attention_args& a, const attention_args& b, const float* qa, const float* qb, int32_t pos,
                      float* out_a, float* out_b, float* scores);

}  // namespace agentq
