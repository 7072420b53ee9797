// Speculative decoding in the engine step: proposals before schedule() (prompt lookup and the
// Predicted Output, then the draft model), and the one verifier that walks a verify item's
// logits rows (see docs/speculative.md).
#include <algorithm>

#include "engine_impl.h"

namespace agentq {

void engine_impl::propose_drafts() {
  // NOTE: no room for proposals this step (a decode token per sequence fills the speculation
  // budget): skip the suffix searches and the draft model too, so a busy engine pays nothing.
  int32_t n_decoding = 0;
  for (auto& [id, arp] : active_) {
    const sequence* s = sched_->find(id);
    n_decoding += s && s->state == seq_state::running && int32_t(s->tokens.size()) - s->n_computed == 1 ? 1 : 0;
  }
  const int32_t spare = std::min(sched_->config().spec_step_tokens, sched_->config().max_step_tokens) - n_decoding;
  if (spare <= 0) return;
  std::vector<token_id> draft;
  std::vector<uint32_t> mask;
  // Proposals are checked against the constraint's mask before they cost a forward: a first
  // token the grammar forbids can never be accepted.
  auto allowed = [&](active_request& ar, const std::vector<token_id>& d) {
    if (!ar.constraint || !ar.constraint->fill_mask(mask)) return true;
    const token_id t = d[0];
    return size_t(t) / 32 < mask.size() && ((mask[size_t(t) / 32] >> (t % 32)) & 1u);
  };
  struct model_job {
    active_request* ar;
    draft_model::job job;
    std::vector<token_id> out;
  };
  std::vector<model_job> model_jobs;
  for (auto& [id, arp] : active_) {
    active_request& ar = *arp;
    ar.draft_from_model = false;
    if (!ar.spec_on) continue;
    const sequence* s = sched_->find(id);
    if (!s || s->state != seq_state::running || int32_t(s->tokens.size()) - s->n_computed != 1) continue;
    // NOTE: at most what the request may still emit less the token the verifier always samples,
    // and never up to the context's end (on_token's n_ctx check must see the same counts).
    int32_t cap = ar.req.max_tokens - int32_t(ar.output_ids.size()) - 1;
    if (desc_.n_ctx > 0) cap = std::min(cap, desc_.n_ctx - int32_t(s->tokens.size()) - 2);
    if (cap <= 0) continue;
    // Prompt lookup / the prediction first (free); the draft model where they find nothing.
    if (ar.proposer) {
      ar.proposer->propose(s->tokens, s->n_generated(), cap, draft);
      if (!draft.empty()) {
        if (allowed(ar, draft)) sched_->set_draft(id, draft);
        else ar.proposer->on_verified(int32_t(draft.size()), 0);
        continue;
      }
    }
    if (draft_ && draft_->take_turn(id)) model_jobs.push_back({&ar, {id, s->tokens, cap, nullptr}, {}});
  }
  if (model_jobs.empty()) return;
  // NOTE: the draft's proposals share the step's spare budget, so under load it spends no
  // draft forwards on tokens the scheduler would not verify anyway.
  const int32_t per = std::max(1, spare / int32_t(model_jobs.size()));
  if (int32_t(model_jobs.size()) > spare) model_jobs.resize(size_t(spare));
  std::vector<draft_model::job> jobs;
  for (auto& mj : model_jobs) {
    mj.job.cap = std::min(mj.job.cap, per);
    mj.job.out = &mj.out;
    jobs.push_back(mj.job);
  }
  if (!draft_->propose(jobs)) {
    const std::string why = draft_->failure();
    if (!why.empty()) fail_device("draft model: " + why);
    return;   // not sticky: no proposals this step
  }
  for (auto& mj : model_jobs) {
    if (mj.out.empty()) continue;
    if (!allowed(*mj.ar, mj.out)) {
      draft_->on_verified(mj.ar->id, int32_t(mj.out.size()), 0);
      continue;
    }
    mj.ar->draft_from_model = true;
    sched_->set_draft(mj.ar->id, std::move(mj.out));
  }
}

bool engine_impl::advance(active_request& ar, token_id tok) {
  ar.sampling->accept(tok);
  bool in_call = ar.constraint && ar.constraint->in_call();
  if (ar.constraint) ar.constraint->accept(tok);
  return in_call || (ar.constraint && ar.constraint->in_call());
}

void engine_impl::verify_draft(active_request& ar, const plan_item& it, const float* rows,
                               std::vector<token_id>& emitted, std::vector<pre_advanced>& pre) {
  // NOTE: with a deterministic proposal d (a point mass), rejection sampling accepts d with
  // probability min(1, p(d)/1) = p(d) and otherwise draws from p with d removed and
  // renormalised: exactly "draw t ~ p, accept iff t == d". So the verifier draws each row
  // with the request's own sampler (penalties, mask, temperature, seeded PRNG) and stops at
  // the first disagreement: one draw per emitted token, as without speculation, so greedy
  // and seeded sampling give the very same tokens (given batch-invariant logits).
  const size_t n_vocab = size_t(desc_.n_vocab);
  const token_id* draft = it.tokens + 1;
  emitted.clear();
  pre.clear();
  int32_t n_agreed = 0;
  for (int32_t j = 0; j <= it.n_draft; ++j) {
    const token_id t = sample(ar, const_cast<float*>(rows + size_t(j) * n_vocab));
    emitted.push_back(t);
    if (j == it.n_draft || t != draft[j]) break;
    ++n_agreed;
    // the token ends the output (EOS, a stop token) or the grammar: on_token finishes there
    if ((!ar.req.ignore_eos && tok_->is_eog(t)) || std::find(ar.req.stop_tokens.begin(), ar.req.stop_tokens.end(), t) != ar.req.stop_tokens.end())
      break;
    const bool in_call = advance(ar, t);
    const bool done = ar.constraint && ar.constraint->is_finished();
    pre.push_back({in_call, done});
    if (done) break;
  }
  ar.n_draft_accepted += n_agreed;
  ar.n_draft_rejected += it.n_draft - n_agreed;
  if (ar.draft_from_model) draft_->on_verified(ar.id, it.n_draft, n_agreed);
  else if (ar.proposer) ar.proposer->on_verified(it.n_draft, n_agreed);
  ar.draft_from_model = false;
}

}  // namespace agentq
