// Prompt-lookup (n-gram) speculation: proposes the tokens that followed the latest earlier
// occurrence of the sequence's last n tokens in its own context (prompt + generated), or in
// the request's Predicted Output. One per sequence; k and n adapt to its acceptance, and it
// backs off when proposals fail.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "agentq/engine.h"

namespace agentq {

struct spec_params {
  int32_t k_max = 8;   // proposed tokens per step at most
  int32_t n_min = 2;   // shortest suffix matched (tokens)
  // longest suffix matched (tokens). NOTE: 8, not 4: on the copy model's rewrite (which
  // continues its last 6 tokens' match) acceptance went 0.86 -> 0.99 (Q8_0), 0.77 -> 0.98
  // (Q4_K); a 4-token suffix that recurs in the passage picked its latest copy, not the one the
  // longer context continues. 16 read the same.
  int32_t n_max = 8;
  bool context = true; // match in the sequence's own context (false: the prediction only)
};

class ngram_proposer {
 public:
  // prediction: the request's Predicted Output tokens (may be empty), lookup text that is not
  // part of the context; kept by the proposer.
  explicit ngram_proposer(spec_params params, std::vector<token_id> prediction = {});

  // Up to min(k, cap) tokens that may follow ctx (its last token is the next input); empty
  // when nothing matches, while backing off, or cap <= 0. n_generated: of ctx, the tail the
  // request generated (the prediction is aligned with it: at its start it proposes the
  // prediction's first tokens).
  void propose(std::span<const token_id> ctx, int32_t n_generated, int32_t cap, std::vector<token_id>& out);
  // The verifier's answer to the last proposal: n_accepted of n_proposed tokens agreed.
  void on_verified(int32_t n_proposed, int32_t n_accepted);

  int32_t k() const { return k_; }
  int32_t n() const { return n_; }
  bool backing_off() const { return n_cooldown_ > 0; }

 private:
  // The prediction's continuation of ctx's suffix (the first match at or after pred_pos_, else
  // the first anywhere); false when none.
  bool propose_from_prediction(std::span<const token_id> ctx, int32_t n_generated, int32_t want,
                               std::vector<token_id>& out);

  spec_params params_;
  std::vector<token_id> prediction_;
  size_t pred_pos_ = 0;      // where the last prediction proposal started (matches move forward)
  int32_t k_ = 4;            // current draft length limit
  int32_t n_ = 2;            // current shortest suffix to match
  int32_t n_fail_streak_ = 0;  // verifications in a row with nothing accepted
  int32_t n_cooldown_ = 0;   // decode steps left without proposing
  int32_t backoff_ = 16;     // the next cooldown (doubles up to 512 while proposals keep failing)
};

}  // namespace agentq
