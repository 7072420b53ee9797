// Prompt-lookup proposer: suffix match over the sequence's context, adaptive k and n.
#include "spec/ngram_proposer.h"

#include <algorithm>

namespace agentq {

ngram_proposer::ngram_proposer(spec_params params, std::vector<token_id> prediction)
    : params_(params), prediction_(std::move(prediction)) {
  params_.k_max = std::max(1, params_.k_max);
  params_.n_min = std::max(1, params_.n_min);
  params_.n_max = std::max(params_.n_min, params_.n_max);
  k_ = std::min(4, params_.k_max);
  n_ = params_.n_min;
}

bool ngram_proposer::propose_from_prediction(std::span<const token_id> ctx, int32_t n_generated, int32_t want,
                                             std::vector<token_id>& out) {
  const int32_t len = int32_t(ctx.size()), n_pred = int32_t(prediction_.size());
  if (n_pred == 0) return false;
  // The output so far is a prefix of the prediction (its start, the common case of an edit that
  // keeps the beginning): continue it, with no suffix to match yet.
  n_generated = std::min(n_generated, len);
  if (n_generated < n_pred &&
      std::equal(ctx.end() - n_generated, ctx.end(), prediction_.begin(), prediction_.begin() + n_generated)) {
    pred_pos_ = size_t(n_generated);
    out.assign(prediction_.begin() + n_generated, prediction_.begin() + std::min(n_pred, n_generated + want));
    return true;
  }
  // NOTE: the first occurrence at or after the previous match, then the first anywhere: the
  // output walks through the prediction front to back (an edited file keeps its order).
  const int32_t start = int32_t(std::min<size_t>(pred_pos_, size_t(n_pred)));
  for (int32_t n = std::min(params_.n_max, len); n >= n_; --n) {
    const token_id* suffix = ctx.data() + (len - n);
    for (int32_t pass = 0; pass < 2; ++pass) {
      const int32_t lo = pass == 0 ? start : 0, hi = pass == 0 ? n_pred - n : std::min(n_pred - n, start - 1);
      for (int32_t p = lo; p <= hi; ++p) {
        if (prediction_[size_t(p)] != suffix[0] || !std::equal(suffix, suffix + n, prediction_.begin() + p)) continue;
        const int32_t from = p + n;
        if (from >= n_pred) continue;
        pred_pos_ = size_t(from);
        out.assign(prediction_.begin() + from, prediction_.begin() + std::min(n_pred, from + want));
        return true;
      }
    }
  }
  return false;
}

void ngram_proposer::propose(std::span<const token_id> ctx, int32_t n_generated, int32_t cap,
                             std::vector<token_id>& out) {
  out.clear();
  if (n_cooldown_ > 0) {
    --n_cooldown_;
    return;
  }
  const int32_t want = std::min(k_, cap);
  const int32_t len = int32_t(ctx.size());
  if (want <= 0) return;
  // NOTE: the Predicted Output first: the client said the output looks like it.
  if (propose_from_prediction(ctx, n_generated, want, out) || !params_.context) return;
  // NOTE: the longest suffix match wins, the latest occurrence among equally long ones: a
  // rewrite of a tool result follows its most recent copy, and a longer match predicts better
  // (a model continues what its whole recent context matched, not its last two tokens). One
  // backward pass: at each earlier occurrence of the last token, the match's length up to n_max.
  const int32_t n_hi = std::min(params_.n_max, len - 1);
  if (n_hi < n_) return;
  const token_id last = ctx[size_t(len - 1)];
  int32_t best_n = 0, best_from = 0;
  for (int32_t p = len - 2; p >= 0 && best_n < n_hi; --p) {
    if (ctx[size_t(p)] != last) continue;
    int32_t m = 1;
    while (m < n_hi && p - m >= 0 && ctx[size_t(p - m)] == ctx[size_t(len - 1 - m)]) ++m;
    if (m > best_n) best_n = m, best_from = p + 1;
  }
  if (best_n < n_) return;
  out.assign(ctx.begin() + best_from, ctx.begin() + std::min(len, best_from + want));
}

void ngram_proposer::on_verified(int32_t n_proposed, int32_t n_accepted) {
  if (n_proposed <= 0) return;
  if (n_accepted == 0) {
    // a miss: ask for a longer match next time, and back off when misses keep coming
    n_ = std::min(n_ + 1, params_.n_max);
    k_ = std::max(1, k_ / 2);
    if (++n_fail_streak_ >= 3) {
      n_cooldown_ = backoff_;
      backoff_ = std::min(backoff_ * 2, 512);
      n_fail_streak_ = 0;
    }
    return;
  }
  n_fail_streak_ = 0;
  backoff_ = 16;
  if (n_accepted == n_proposed) {
    // NOTE: doubled, not +2: with a cap of 16-24 a +2 ramp spent half of a 300-token rewrite
    // on short proposals after each edit, and a step's cost is mostly per position anyway.
    k_ = std::min(2 * k_, params_.k_max);
    n_ = std::max(params_.n_min, n_ - 1);
  } else {
    k_ = std::max(1, std::min(params_.k_max, n_accepted + 1));
  }
}

}  // namespace agentq
