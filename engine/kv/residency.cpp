// Residency: retention policy for jobs' KV between turns.
#include "kv/residency.h"

#include <algorithm>
#include <chrono>

namespace agentq {

residency::~residency() {
  for (auto& [k, r] : jobs_) pool_.free_seq(r.seq_idx);
}

void residency::keep(resident_seq seq, double now) {
  now_ = std::max(now_, now);
  AGENTQ_KV_ASSERT(pool_.seq(seq.seq_idx).live && pool_.seq(seq.seq_idx).n_tokens == int32_t(seq.tokens.size()));
  release(seq.job_key);
  seq.state = resident_state::idle;
  seq.expires_at = now + config_.idle_ttl_s;
  jobs_[seq.job_key] = std::move(seq);
}

park_action residency::park(uint64_t job_key, double expected_wait_s, double now) {
  now_ = std::max(now_, now);
  auto it = jobs_.find(job_key);
  if (it == jobs_.end()) return park_action::none;
  ++counters_.n_parks;
  const double used = double(pool_.n_blocks_used()) / double(pool_.n_blocks_total());
  const bool pin = expected_wait_s <= config_.pin_max_wait_s ||
                   (expected_wait_s <= config_.pin_relaxed_max_wait_s && used <= config_.pin_relaxed_used_fraction);
  if (pin) {
    it->second.state = resident_state::pinned;
    it->second.expires_at = now + expected_wait_s * config_.pin_ttl_factor + 1.0;
    it->second.parked_at = now;
    it->second.expected_wait_s = expected_wait_s;
    it->second.early_tried = false;
    ++counters_.n_pinned;
    return park_action::pinned;
  }
  it->second.parked_at = now;
  it->second.expected_wait_s = expected_wait_s;
  return evict(it, true) ? park_action::spilled : park_action::dropped;
}

bool residency::on_disk(const resident_seq& r) const {
  if (!spill_) return false;
  auto s = spilled_.find(r.job_key);
  if (s == spilled_.end()) return false;
  const spill_store::entry* e = spill_->find_path(s->second);
  return e && e->tokens == r.tokens;
}

double residency::resume_at(const resident_seq& r) const {
  const double wall = wall_now_s();
  if (r.state != resident_state::pinned && r.parked_at < 0) return wall;  // between turns: resumes at once
  return wall + std::max(0.0, r.parked_at + r.expected_wait_s - now_);
}

spill_status residency::write(const resident_seq& r, spill_store::time_point deadline, bool sync_dir) {
  std::string path;
  const auto t0 = std::chrono::steady_clock::now();
  spill_store::write_options o;
  o.job_key = r.job_key;
  o.resume_at = resume_at(r);
  o.deadline = deadline;
  o.sync_dir = sync_dir;
  const spill_status st = spill_->write(pool_, r.seq_idx, r.tokens, &path, o);
  if (st != spill_status::ok) return st;
  report(kv_move_event::kind::spill, r.job_key, r.tokens.size(), t0);
  auto old = spilled_.find(r.job_key);
  if (old != spilled_.end() && old->second != path) spill_->erase(old->second);
  spilled_[r.job_key] = path;
  return st;
}

bool residency::evict(std::map<uint64_t, resident_seq>::iterator it, bool allow_spill) {
  resident_seq& r = it->second;
  bool spilled = false;
  if (allow_spill && spill_ && int32_t(r.tokens.size()) >= config_.spill_min_tokens) {
    // NOTE: an early spill already wrote these tokens: nothing to write again (not counted twice)
    if (on_disk(r)) {
      spilled = true;
    } else if (write(r, spill_store::time_point::max()) == spill_status::ok) {
      spilled = true;
      ++counters_.n_spills;
    }
  }
  if (!spilled) ++counters_.n_drops;
  // NOTE: full blocks registered in the prefix cache stay there (unreferenced, evictable);
  // only the partial tail and unregistered blocks return to the free list now.
  if (before_evict) before_evict(r);
  pool_.free_seq(r.seq_idx);
  jobs_.erase(it);
  return spilled;
}

void residency::release(uint64_t job_key) {
  auto it = jobs_.find(job_key);
  if (it != jobs_.end()) {
    pool_.free_seq(it->second.seq_idx);
    jobs_.erase(it);
  }
  auto s = spilled_.find(job_key);
  if (s != spilled_.end()) {
    if (spill_) spill_->erase(s->second);
    spilled_.erase(s);
  }
  // NOTE: also files a previous process wrote for the job (found by the job key in the file)
  if (spill_) spill_->erase_job(job_key);
}

std::span<const token_id> residency::job_tokens(uint64_t job_key) const {
  if (job_key == 0) return {};
  if (auto it = jobs_.find(job_key); it != jobs_.end()) return it->second.tokens;
  if (!spill_) return {};
  const spill_store::entry* best = nullptr;
  for (const auto& e : spill_->entries())
    if (e.job_key == job_key && (!best || e.tokens.size() > best->tokens.size())) best = &e;
  return best ? std::span<const token_id>(best->tokens) : std::span<const token_id>{};
}

std::optional<resident_seq> residency::take(uint64_t job_key) {
  auto it = jobs_.find(job_key);
  if (it == jobs_.end()) return std::nullopt;
  resident_seq r = std::move(it->second);
  jobs_.erase(it);
  ++counters_.n_resumes;
  return r;
}

void residency::report(kv_move_event::kind what, uint64_t job_key, size_t n_tokens,
                       std::chrono::steady_clock::time_point t0) {
  if (!on_move) return;
  const kv_layout& l = pool_.layout();
  kv_move_event e;
  e.what = what;
  e.job_key = job_key;
  e.n_tokens = int32_t(n_tokens);
  // K and V of every layer per token; windowed KV: what the blocks hold (windowed layers: the window's blocks)
  e.n_bytes = pool_.windowed() ? l.seq_bytes(int32_t(n_tokens)) : int64_t(n_tokens) * l.block_bytes() / l.block_size;
  e.ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  on_move(e);
}

int32_t residency::restore(std::span<const token_id> tokens, int32_t max_tokens, int32_t min_tokens, int32_t seq_idx,
                           uint64_t job_key) {
  if (!spill_) return 0;
  int32_t n_common = 0;
  const int32_t idx = spill_->find(tokens, &n_common);
  n_common = std::min(n_common, max_tokens);
  if (idx < 0 || n_common <= min_tokens) return 0;
  const std::string path = spill_->entries()[size_t(idx)].path;
  const auto t0 = std::chrono::steady_clock::now();
  const bool ok = spill_->restore(idx, n_common, pool_, seq_idx);
  for (auto it = spilled_.begin(); it != spilled_.end();) {
    if (it->second == path) it = spilled_.erase(it); else ++it;
  }
  if (!ok) {
    ++counters_.n_restore_failures;
    return 0;
  }
  ++counters_.n_restores;
  report(kv_move_event::kind::restore, job_key, size_t(n_common), t0);
  return n_common;
}

void residency::expire(double now) {
  now_ = std::max(now_, now);
  for (auto it = jobs_.begin(); it != jobs_.end();) {
    auto next = std::next(it);
    resident_seq& r = it->second;
    if (r.expires_at <= now_) {
      ++counters_.n_expired;
      evict(it, true);
    } else if (r.state == resident_state::pinned && spill_ && config_.spill_after_s >= 0 && !r.early_tried &&
               now_ >= r.parked_at + config_.spill_after_s && int32_t(r.tokens.size()) >= config_.spill_min_tokens) {
      // NOTE: the wait has no known end: a copy on disk now means a crash or kill later loses
      // nothing; the KV stays pinned, so a resume in this process still reads memory.
      r.early_tried = true;
      if (!on_disk(r) && write(r, spill_store::time_point::max()) == spill_status::ok) {
        ++counters_.n_spills;
        ++counters_.n_early_spills;
      }
    }
    it = next;
  }
}

shutdown_spill_report residency::shutdown_spill(double budget_s) {
  shutdown_spill_report rep;
  const auto t0 = std::chrono::steady_clock::now();
  const auto deadline = t0 + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                 std::chrono::duration<double>(std::max(0.0, budget_s)));
  std::vector<resident_seq*> order;
  for (auto& [k, r] : jobs_) order.push_back(&r);
  // idle first (between turns: their jobs resume as soon as a process takes them), then pinned
  // waits by soonest expected resume
  std::stable_sort(order.begin(), order.end(), [](const resident_seq* a, const resident_seq* b) {
    const bool pa = a->state == resident_state::pinned, pb = b->state == resident_state::pinned;
    if (pa != pb) return pb;
    if (!pa) return a->expires_at < b->expires_at;
    return a->parked_at + a->expected_wait_s < b->parked_at + b->expected_wait_s;
  });
  for (resident_seq* r : order) {
    const int64_t n = int64_t(r->tokens.size());
    if (!spill_ || n < config_.spill_min_tokens) {
      ++rep.n_short;
      continue;
    }
    if (on_disk(*r)) {
      ++rep.n_seqs;
      rep.n_tokens += n;
      continue;
    }
    // NOTE: one directory fsync for the whole batch (below), not one per file: with many
    // small files the fsyncs, not the bytes, are what takes the time
    if (write(*r, deadline, false) == spill_status::ok) {
      ++counters_.n_spills;
      ++rep.n_seqs;
      ++rep.n_written;
      rep.n_tokens += n;
      rep.n_bytes += spill_->file_bytes(int32_t(n));
    } else {
      ++rep.n_dropped;
      rep.n_tokens_dropped += n;
    }
  }
  if (rep.n_written > 0) spill_->sync_dir();
  rep.ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  return rep;
}

bool residency::reclaim_one() {
  if (jobs_.empty()) return false;
  // idle before pinned, then the soonest expiry
  auto victim = std::min_element(jobs_.begin(), jobs_.end(), [](const auto& a, const auto& b) {
    const int ra = a.second.state == resident_state::pinned, rb = b.second.state == resident_state::pinned;
    if (ra != rb) return ra < rb;
    return a.second.expires_at < b.second.expires_at;
  });
  ++counters_.n_reclaimed;
  evict(victim, true);
  return true;
}

int64_t residency::n_blocks_parked() const {
  int64_t n = 0;
  // Windowed KV: in blocks of every layer (the bytes held / a whole block's), rounded up.
  const kv_layout& l = pool_.layout();
  for (const auto& [k, r] : jobs_)
    n += pool_.windowed() ? (l.seq_bytes(pool_.seq(r.seq_idx).n_tokens) + l.block_bytes() - 1) / l.block_bytes()
                          : int64_t(pool_.seq(r.seq_idx).blocks.size());
  return n;
}

void residency::sanity() const {
  for (const auto& [k, r] : jobs_) {
    AGENTQ_KV_ASSERT(k == r.job_key);
    AGENTQ_KV_ASSERT(pool_.seq(r.seq_idx).live);
    AGENTQ_KV_ASSERT(pool_.seq(r.seq_idx).n_tokens == int32_t(r.tokens.size()));
    AGENTQ_KV_ASSERT(int32_t(r.hashes.size()) <= int32_t(r.tokens.size()) / pool_.block_size());
  }
}

}  // namespace agentq
