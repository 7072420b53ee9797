// The mixture-of-experts FFN block (qwen3moe, gpt-oss): a router choosing top-k experts and
// their weights (layer_stack::gating), each expert a (clamped) SwiGLU over the tokens routed to it.
#pragma once

#include <cstdint>
#include <vector>

#include "model/transformer.h"

namespace agentq {

class thread_pool;

struct moe_scratch {
  std::vector<float> router;            // [n_x][n_expert]
  std::vector<int32_t> sel;             // [n_x][k] chosen experts, best first
  std::vector<float> w;                 // [n_x][k] their weights
  std::vector<float> xg, g, u, y;       // one expert's gathered rows
  std::vector<float> out;               // [n_x][k][n_embd] each chosen expert's output
  std::vector<int32_t> rows;            // (token * k + slot) of the rows routed to one expert
};

// out = sum over each token's k chosen experts of w_e * down_e(act(gate_e x) * up_e x) (+ biases).
// x: [n_x][n_embd]; out: [n_x][n_embd], may alias x.
// NOTE: tokens are grouped by expert, so prefill reads each chosen expert's rows once and decode
// reads only the chosen experts' rows. Every row's result depends only on its own input (linear's
// contract) and the k outputs are summed in rank order, so results are batch-invariant.
void moe_ffn(thread_pool& pool, const layer_stack& d, const layer_desc& L, const float* x, int32_t n_x, float* out,
             moe_scratch& s);

// Bytes of expert weight rows every moe_ffn call so far has read (process-wide; benchmarks
// compare it per decoded token with the active-parameter bytes: scripts/bench/families.sh).
uint64_t moe_expert_bytes_read();

}  // namespace agentq
