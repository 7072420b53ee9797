// Token sampling from one row of logits: repetition/frequency/presence penalties
// over the last N tokens, an optional allowed-token mask (grammar), then greedy or
// temperature + top-k + top-p + min-p with a per-request seeded PRNG.
#pragma once

#include <cstdint>
#include <deque>
#include <span>
#include <vector>

#include "agentq/engine.h"

namespace agentq {

// xoshiro256** seeded through splitmix64: the same seed gives the same stream on every
// platform and standard library (std::*_distribution output is implementation-defined).
class rng {
 public:
  explicit rng(uint64_t seed = 0);
  uint64_t next();
  float uniform();  // [0, 1), 24 random bits
 private:
  uint64_t s_[4];
};

class sampler {
 public:
  explicit sampler(const sampling_params& params);

  // Pick the next token from logits [n_vocab] (modified in place: penalties, mask,
  // temperature). allow_bits: optional bitmask of allowed ids (bit id%32 of word id/32,
  // at least (n_vocab+31)/32 words); banned ids are never sampled. Returns -1 only
  // when the mask allows no token.
  // NOTE: the chain is penalties -> mask -> greedy | (temperature -> top-k -> top-p -> min-p -> draw);
  // top-p and min-p see the tempered distribution (as vLLM and HF transformers).
  token_id sample(float* logits, int32_t n_vocab, std::span<const uint32_t> allow_bits = {});

  // Record a token in the penalty window (prompt tokens too, if the caller wants them penalised).
  void accept(token_id id);

  const sampling_params& params() const { return params_; }

 private:
  sampling_params params_;
  rng rng_;
  std::deque<token_id> recent_;          // last penalty_last_n accepted tokens
  std::vector<int32_t> counts_;          // scratch: occurrences per id in recent_
  struct candidate {
    float logit;  // tempered
    float e;      // exp(logit - max logit)
    token_id id;
  };
  std::vector<candidate> cand_;  // scratch: candidates
};

}  // namespace agentq
