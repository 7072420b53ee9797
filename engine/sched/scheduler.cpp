// Continuous batching scheduler: per-step plans, chunked prefill, admission, preemption.
#include "sched/scheduler.h"

#include <algorithm>

namespace agentq {

scheduler::scheduler(block_pool& pool, prefix_cache& cache, residency* res, sched_config config)
    : pool_(pool), cache_(cache), residency_(res), config_(config) {
  // NOTE: unreferenced cached blocks go first (speculative), then resident jobs' KV
  // (idle before pinned); running sequences are preempted only by schedule() itself.
  pool_.set_evictor([this] { return cache_.evict_one() || (residency_ && residency_->reclaim_one()); });
  // NOTE: a turn's tail is shared when the turn ends (finish); a resident sequence the residency
  // evicts (spilled or dropped) takes its own tail out of the cache, so the block is freed with
  // it (and a spilled job resumes from its file, as before tails). release() keeps the tail: the
  // job is over and its last block may serve the next job with the same prompt head.
  if (residency_)
    residency_->before_evict = [this](const resident_seq& r) {
      const int32_t n = int32_t(r.tokens.size()), bs = pool_.block_size();
      if (n % bs != 0) cache_.take_tail(pool_.seq(r.seq_idx).blocks[size_t(n / bs)]);
    };
}

scheduler::~scheduler() {
  for (auto& [id, s] : seqs_)
    if (s.seq_idx >= 0) pool_.free_seq(s.seq_idx);
  pool_.set_evictor(nullptr);
  if (residency_) residency_->before_evict = nullptr;
}

bool scheduler::before(const sequence& a, const sequence& b) const {
  if (a.req.priority != b.req.priority) return a.req.priority > b.req.priority;
  if (a.req.arrival_seq != b.req.arrival_seq) return a.req.arrival_seq < b.req.arrival_seq;
  return a.submit_order < b.submit_order;
}

std::vector<sequence*> scheduler::ordered(seq_state st) {
  std::vector<sequence*> v;
  for (auto& [id, s] : seqs_)
    if (s.state == st) v.push_back(&s);
  std::sort(v.begin(), v.end(), [this](const sequence* a, const sequence* b) { return before(*a, *b); });
  return v;
}

std::optional<std::string> scheduler::add(seq_request request) {
  const int32_t n = int32_t(request.prompt.size());
  if (n == 0) return std::string("empty prompt");
  if (config_.n_ctx > 0 && n > config_.n_ctx)
    return "prompt has " + std::to_string(n) + " tokens, the model's context is " + std::to_string(config_.n_ctx);
  if (!pool_.fits(n))
    return "prompt needs " + std::to_string(pool_.blocks_for_tokens(n)) + " KV blocks, the pool has " +
           std::to_string(pool_.n_blocks_total()) + " (raise kv_budget_bytes)";
  AGENTQ_KV_ASSERT(seqs_.count(request.id) == 0);
  sequence s;
  s.tokens = request.prompt;
  s.n_prompt = n;
  s.submit_order = next_order_++;
  s.req = std::move(request);
  const uint64_t id = s.req.id;
  seqs_.emplace(id, std::move(s));
  return std::nullopt;
}

void scheduler::drop_kv(sequence& s) {
  if (s.seq_idx >= 0) {
    register_tail(s);
    pool_.free_seq(s.seq_idx);
  }
  s.seq_idx = -1;
  s.n_computed = 0;
  s.hashes.clear();
}

void scheduler::preempt(sequence& s) {
  // NOTE: recompute, not spill: its full blocks are registered in the prefix cache, so a
  // readmission gets back whatever has not been evicted meanwhile.
  drop_kv(s);
  s.draft.clear();
  s.state = seq_state::waiting;
  ++s.n_preemptions;
}

void scheduler::register_blocks(sequence& s) {
  if (!config_.prefix_reuse) return;
  const int32_t bs = pool_.block_size();
  const auto& table = pool_.seq(s.seq_idx).blocks;
  while (int32_t(s.hashes.size()) < s.n_computed / bs) {
    const size_t i = s.hashes.size();
    const uint64_t parent = i == 0 ? prefix_cache::root_hash : s.hashes[i - 1];
    s.hashes.push_back(cache_.insert(parent, std::span(s.tokens).subspan(i * size_t(bs), size_t(bs)), table[i]));
  }
}

void scheduler::register_tail(const sequence& s) {
  if (!config_.prefix_reuse || s.seq_idx < 0) return;
  const int32_t bs = pool_.block_size();
  const int32_t n_full = s.n_computed / bs, n_rows = s.n_computed % bs;
  // NOTE: only when every full block before it is registered: the chain hash is the tail's key.
  if (n_rows == 0 || int32_t(s.hashes.size()) != n_full) return;
  const uint64_t parent = n_full == 0 ? prefix_cache::root_hash : s.hashes.back();
  cache_.insert_tail(parent, std::span(s.tokens).subspan(size_t(n_full) * bs, size_t(n_rows)),
                     pool_.seq(s.seq_idx).blocks[size_t(n_full)]);
}

void scheduler::attach_prefix(sequence& s) {
  AGENTQ_KV_ASSERT(s.seq_idx < 0);
  const int32_t max_reuse = int32_t(s.tokens.size()) - 1;  // the last token is computed for its logits
  const int32_t bs = pool_.block_size();
  if (config_.prefix_reuse && residency_ && s.req.job_key != 0) {
    if (auto r = residency_->take(s.req.job_key)) {
      int32_t c = 0;
      const int32_t lim = std::min<int32_t>(int32_t(r->tokens.size()), max_reuse);
      while (c < lim && r->tokens[size_t(c)] == s.tokens[size_t(c)]) ++c;
      s.seq_idx = r->seq_idx;
      c = pool_.truncate(s.seq_idx, c);  // windowed KV: perhaps fewer (see block_pool::truncate)
      // The job appends to its own last block: the cache's tail entry for it (finish() left
      // one) is dropped so that the write is in place, not a copy. Another sequence that
      // attached it meanwhile keeps its reference (then the write copies, as for any share).
      if (c % bs != 0) cache_.take_tail(pool_.seq(s.seq_idx).blocks[size_t(c / bs)]);
      r->hashes.resize(std::min<size_t>(r->hashes.size(), size_t(c / bs)));
      s.hashes = std::move(r->hashes);
      s.n_computed = c;
      if (c > 0) return;
      drop_kv(s);  // nothing in common: start from the cache like any other sequence
    }
  }
  s.seq_idx = pool_.create_seq();
  if (!config_.prefix_reuse) return;
  const int32_t n_cached = cache_.lookup(s.tokens, max_reuse).n_tokens;
  if (residency_) {
    const int32_t n = residency_->restore(s.tokens, max_reuse, n_cached, s.seq_idx, s.req.job_key);
    if (n > 0) {
      s.n_computed = n;
      register_blocks(s);
      return;
    }
  }
  // NOTE: looked up again: restore() may have evicted blocks the first lookup saw.
  const auto m = cache_.lookup(s.tokens, max_reuse);
  pool_.attach(s.seq_idx, m.blocks, m.n_tokens);
  s.hashes = m.hashes;
  s.n_computed = m.n_tokens;
}

step_plan scheduler::schedule() {
  step_plan plan;
  int32_t budget = config_.max_step_tokens;
  std::vector<sequence*> running = ordered(seq_state::running);
  std::vector<uint64_t> preempted_now;

  auto unplan = [&](uint64_t id) {
    for (size_t i = 0; i < plan.items.size(); ++i)
      if (plan.items[i].id == id) {
        budget += plan.items[i].n_tokens;
        plan.items.erase(plan.items.begin() + ptrdiff_t(i));
        return;
      }
  };
  // Reserve room for s, preempting running sequences ordered after it (lowest first).
  // false: s could not get room; it was preempted itself, or (alone) is out of memory.
  auto reserve = [&](sequence& s, int32_t n_total) {
    while (!pool_.reserve(s.seq_idx, n_total)) {
      sequence* victim = nullptr;
      for (auto it = running.rbegin(); it != running.rend(); ++it) {
        if (*it != &s && (*it)->state == seq_state::running && before(s, **it)) { victim = *it; break; }
      }
      if (!victim) {
        bool others = false;
        for (auto* r : running) others |= r != &s && r->state == seq_state::running;
        if (others) {
          unplan(s.req.id);
          preempt(s);
          plan.preempted.push_back(s.req.id);
          preempted_now.push_back(s.req.id);
        } else {
          plan.out_of_memory.push_back(s.req.id);
        }
        return false;
      }
      unplan(victim->req.id);
      preempt(*victim);
      plan.preempted.push_back(victim->req.id);
      preempted_now.push_back(victim->req.id);
    }
    return true;
  };
  auto add_item = [&](sequence& s, int32_t n) {
    plan_item it;
    it.id = s.req.id;
    it.n_past = s.n_computed;
    it.n_tokens = n;
    it.sample = s.n_computed + n == int32_t(s.tokens.size());
    plan.items.push_back(it);
    budget -= n;
  };

  // 1. one decode token for every running sequence that has finished its prompt, then its
  // proposed tokens from what budget is left after every decode token.
  // NOTE: proposals never preempt or take a decode token's place: under load they shrink to
  // nothing, so speculation cannot starve a neighbour.
  int32_t n_decoding = 0;
  for (sequence* s : running)
    n_decoding += s->state == seq_state::running && int32_t(s->tokens.size()) - s->n_computed == 1 ? 1 : 0;
  int32_t spare = std::min(budget, config_.spec_step_tokens) - n_decoding;
  for (sequence* s : running) {
    if (s->state != seq_state::running || int32_t(s->tokens.size()) - s->n_computed != 1) continue;
    if (budget < 1) break;
    if (!reserve(*s, s->n_computed + 1)) continue;
    int32_t nd = std::min<int32_t>(int32_t(s->draft.size()), std::max(0, spare));
    if (config_.n_ctx > 0) nd = std::min(nd, std::max(0, config_.n_ctx - s->n_computed - 1));
    if (nd > 0 && !pool_.reserve(s->seq_idx, s->n_computed + 1 + nd)) nd = 0;
    add_item(*s, 1 + nd);
    if (nd > 0) {
      spare -= nd;
      s->verify.assign(1, s->tokens.back());
      s->verify.insert(s->verify.end(), s->draft.begin(), s->draft.begin() + nd);
      plan.items.back().n_draft = nd;
      plan.items.back().sample = true;
    }
    s->draft.clear();
  }
  // Prompt tokens priority-0 sequences may still take this step. NOTE: a step's wall time grows
  // with its tokens, and a normal/high job's prompt waits for the whole step it is in: during a
  // batch that was a full 512-token step of batch prefill (session 24, docs/queue_perf.md).
  int32_t low_budget = INT32_MAX;
  if (config_.low_priority_step_tokens > 0)
    for (auto& [id, s] : seqs_)
      if (s.req.priority > 0) {
        low_budget = config_.low_priority_step_tokens;
        break;
      }
  // 2. prefill chunks of running sequences
  for (sequence* s : running) {
    const int32_t pending = int32_t(s->tokens.size()) - s->n_computed;
    if (s->state != seq_state::running || pending <= 1) continue;
    if (budget < 1) break;
    const int32_t n = std::min({pending, budget, s->req.priority > 0 ? INT32_MAX : low_budget});
    if (n < 1) continue;
    if (!reserve(*s, s->n_computed + n)) continue;
    add_item(*s, n);
    if (s->req.priority <= 0 && low_budget != INT32_MAX) low_budget -= n;
  }
  // 3. admit waiting sequences in job order while there is room
  int32_t n_running = 0;
  for (auto& [id, s] : seqs_) n_running += s.state == seq_state::running ? 1 : 0;
  for (sequence* s : ordered(seq_state::waiting)) {
    if (n_running >= config_.max_running || budget < 1) break;
    if (s->req.priority <= 0 && low_budget < 1) break;  // the rest are priority 0 too (ordered)
    if (std::find(preempted_now.begin(), preempted_now.end(), s->req.id) != preempted_now.end()) break;
    attach_prefix(*s);
    if (!s->admitted_once) {
      s->admitted_once = true;
      s->n_tokens_cached = s->n_computed;
    }
    const int32_t n = std::min({int32_t(s->tokens.size()) - s->n_computed, budget,
                                s->req.priority > 0 ? INT32_MAX : low_budget});
    if (!pool_.reserve(s->seq_idx, s->n_computed + n)) {
      // NOTE: no preemption for admission: a waiting sequence never displaces a running one;
      // it holds no KV while it waits (its cached prefix stays in the prefix cache).
      drop_kv(*s);
      break;
    }
    s->state = seq_state::running;
    ++n_running;
    add_item(*s, n);
    if (s->req.priority <= 0 && low_budget != INT32_MAX) low_budget -= n;
  }
  // 4. pointers last: block tables may have moved while reserving
  for (auto& it : plan.items) {
    const sequence& s = seqs_.at(it.id);
    it.tokens = it.n_draft > 0 ? s.verify.data() : s.tokens.data() + it.n_past;
    it.block_table = pool_.seq(s.seq_idx).blocks.data();
    plan.n_tokens += it.n_tokens;
  }
  return plan;
}

void scheduler::set_draft(uint64_t id, std::vector<token_id> draft) {
  auto found = seqs_.find(id);
  if (found == seqs_.end() || found->second.state != seq_state::running) return;
  found->second.draft = std::move(draft);
}

void scheduler::update(const step_plan& plan, std::span<const token_id> sampled, std::span<const int32_t> n_accepted) {
  AGENTQ_KV_ASSERT(sampled.size() >= plan.items.size());
  for (size_t i = 0; i < plan.items.size(); ++i) {
    const plan_item& it = plan.items[i];
    sequence& s = seqs_.at(it.id);
    AGENTQ_KV_ASSERT(s.state == seq_state::running && s.n_computed == it.n_past);
    if (it.n_draft > 0) {
      // KV holds the last known token and the accepted proposals (they equal what was
      // sampled at their positions); positions past them are forgotten.
      const int32_t na = i < n_accepted.size() ? n_accepted[i] : 0;
      AGENTQ_KV_ASSERT(na >= 0 && na <= it.n_draft);
      s.tokens.insert(s.tokens.end(), s.verify.begin() + 1, s.verify.begin() + 1 + na);
      s.n_computed += 1 + na;
      register_blocks(s);  // NOTE: before set_n_tokens: see below
      pool_.set_n_tokens(s.seq_idx, s.n_computed);
      s.tokens.push_back(sampled[i]);
      continue;
    }
    s.n_computed += it.n_tokens;
    // NOTE: blocks are registered before set_n_tokens moves the window: with windowed KV a block
    // the cache holds keeps its windowed pages past the window (lingering, block_pool), so a
    // later prompt sharing this prefix can use it; one not yet cached would give them back.
    register_blocks(s);
    pool_.set_n_tokens(s.seq_idx, s.n_computed);
    s.n_tokens_computed += std::max(0, std::min(s.n_computed, s.n_prompt) - it.n_past);
    if (it.sample) s.tokens.push_back(sampled[i]);
  }
}

void scheduler::finish(uint64_t id, bool keep_kv, double now) {
  auto found = seqs_.find(id);
  if (found == seqs_.end()) return;
  sequence& s = found->second;
  if (s.seq_idx >= 0 && keep_kv && s.req.job_key != 0 && residency_ && config_.prefix_reuse && s.n_computed > 0) {
    pool_.truncate(s.seq_idx, s.n_computed);
    // NOTE: the tail is shared at once, not when the job ends: a batch line's job releases its
    // KV only after its end is committed (worker/end_batcher), many steps later.
    register_tail(s);
    resident_seq r;
    r.job_key = s.req.job_key;
    r.seq_idx = s.seq_idx;
    r.tokens.assign(s.tokens.begin(), s.tokens.begin() + s.n_computed);
    r.hashes = std::move(s.hashes);
    residency_->keep(std::move(r), now);
    s.seq_idx = -1;
  } else {
    drop_kv(s);
  }
  seqs_.erase(found);
}

const sequence* scheduler::find(uint64_t id) const {
  auto it = seqs_.find(id);
  return it == seqs_.end() ? nullptr : &it->second;
}

int32_t scheduler::n_running() const {
  int32_t n = 0;
  for (const auto& [id, s] : seqs_) n += s.state == seq_state::running ? 1 : 0;
  return n;
}

int32_t scheduler::n_waiting() const { return int32_t(seqs_.size()) - n_running(); }

void scheduler::sanity() const {
  const int32_t bs = pool_.block_size();
  for (const auto& [id, s] : seqs_) {
    AGENTQ_KV_ASSERT(id == s.req.id);
    AGENTQ_KV_ASSERT(int32_t(s.tokens.size()) >= s.n_prompt);
    if (s.state == seq_state::running) {
      AGENTQ_KV_ASSERT(s.seq_idx >= 0 && pool_.seq(s.seq_idx).live);
      AGENTQ_KV_ASSERT(pool_.seq(s.seq_idx).n_tokens == s.n_computed);
      AGENTQ_KV_ASSERT(s.n_computed < int32_t(s.tokens.size()));
    } else {
      AGENTQ_KV_ASSERT(s.seq_idx < 0 && s.n_computed == 0);
    }
    AGENTQ_KV_ASSERT(int32_t(s.hashes.size()) <= s.n_computed / bs);
    if (!config_.prefix_reuse) AGENTQ_KV_ASSERT(s.hashes.empty());
  }
  pool_.sanity();
  cache_.sanity();
  if (residency_) residency_->sanity();
}

}  // namespace agentq
