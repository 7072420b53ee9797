// Residency: each job's KV between turns. A finished turn's sequence stays resident
// under its job_key; park() applies the retention policy (pin in memory with a TTL,
// spill to the disk tier, or drop and recompute from the prefix cache on resume);
// memory pressure reclaims resident sequences (idle before pinned, soonest expiry
// first). The next turn adopts the resident sequence and computes only what it appends.
// A pinned wait is also written to disk after spill_after_s (crash safety), and
// shutdown_spill() writes what is resident before the process goes, within a time bound.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "agentq/engine.h"
#include "kv/block_pool.h"
#include "kv/spill.h"

namespace agentq {

struct residency_config {
  double idle_ttl_s = 60.0;                 // a finished turn's KV without park(): kept this long
  double pin_max_wait_s = 30.0;             // park: expected waits up to this are pinned in memory
  double pin_ttl_factor = 2.0;              // pinned for expected_wait * factor + 1 s
  double pin_relaxed_max_wait_s = 300.0;    // ...and waits up to this while the pool is lightly used
  double pin_relaxed_used_fraction = 0.5;   // "lightly used": at most this fraction of blocks in use
  int32_t spill_min_tokens = 64;            // shorter sequences are dropped (cheap to recompute), not spilled
  double spill_after_s = 5.0;               // a pinned wait this old is also written to disk (stays pinned); < 0 = never
};

enum class resident_state { idle, pinned };
enum class park_action { pinned, spilled, dropped, none };

struct resident_seq {
  uint64_t job_key = 0;
  int32_t seq_idx = -1;              // block_pool slot; its n_tokens == tokens.size()
  std::vector<token_id> tokens;      // tokens whose K/V the blocks hold
  std::vector<uint64_t> hashes;      // prefix-cache chain hashes of its registered full blocks
  resident_state state = resident_state::idle;
  double expires_at = 0;             // seconds (caller's clock)
  double parked_at = -1;             // pinned: when park() was called (caller's clock)
  double expected_wait_s = 0;        // pinned: park()'s expected wait
  bool early_tried = false;          // the early spill ran (done or failed): not retried
};

struct residency_counters {
  int64_t n_parks = 0, n_pinned = 0, n_spills = 0, n_drops = 0, n_expired = 0, n_reclaimed = 0;
  int64_t n_resumes = 0, n_restores = 0, n_restore_failures = 0;
  int64_t n_early_spills = 0;        // pinned waits written to disk while kept in memory
};

// What shutdown_spill() did (also the engine's public kv_shutdown_report).
using shutdown_spill_report = kv_shutdown_report;

class residency {
 public:
  // spill may be null (no disk tier).
  residency(block_pool& pool, spill_store* spill, residency_config config)
      : pool_(pool), spill_(spill), config_(config) {}
  ~residency();

  // A finished turn's sequence becomes the job's resident KV (replacing an older one).
  void keep(resident_seq seq, double now);
  // Apply the retention policy for a wait of about expected_wait_s seconds.
  park_action park(uint64_t job_key, double expected_wait_s, double now);
  // The job is over: drop its resident KV and its spill file (shared prefixes stay cached).
  void release(uint64_t job_key);
  // The tokens whose K/V the job holds: its resident sequence, else its file in the disk tier
  // (one per job; also after a restart); empty when neither. Valid until the next call that
  // changes residency or the disk tier.
  std::span<const token_id> job_tokens(uint64_t job_key) const;
  // Hand the job's resident sequence to a new turn (removed from residency); nullopt if none.
  std::optional<resident_seq> take(uint64_t job_key);
  // Try the disk tier for tokens into the empty seq seq_idx: restores the longest spilled
  // prefix of at most max_tokens tokens when it beats min_tokens. Returns tokens restored (0: none).
  // job_key: the job the seq belongs to (reported through on_move).
  int32_t restore(std::span<const token_id> tokens, int32_t max_tokens, int32_t min_tokens, int32_t seq_idx,
                  uint64_t job_key = 0);
  // TTLs that ran out: spill or drop.
  void expire(double now);
  // Memory pressure (block_pool evictor): spill or drop one resident sequence; false if none.
  bool reclaim_one();
  // The process is going: write every resident sequence worth it (>= spill_min_tokens, not
  // already on disk) to the disk tier, idle ones first (their jobs resume first), then pinned
  // by soonest expected resume, until budget_s has passed; the rest is dropped and counted.
  // Sequences stay resident (the caller exits).
  shutdown_spill_report shutdown_spill(double budget_s);

  // Called after every successful spill and restore (engine thread); empty = none.
  std::function<void(const kv_move_event&)> on_move;
  // Called before an evicted sequence's blocks are freed (spilled or dropped: a long wait, a TTL,
  // memory pressure; not release()); the scheduler drops the job's own tail from the prefix cache
  // there, so that the eviction frees that block as it did before tails were shared.
  std::function<void(const resident_seq&)> before_evict;

  bool has(uint64_t job_key) const { return jobs_.count(job_key) != 0; }
  int32_t n_resident() const { return int32_t(jobs_.size()); }
  int64_t n_blocks_parked() const;
  const residency_counters& counters() const { return counters_; }
  const residency_config& config() const { return config_; }
  spill_store* spill() const { return spill_; }

  // Each entry's slot is live and holds exactly its tokens.
  void sanity() const;

 private:
  // Tell on_move that n_tokens of job_key's K/V moved, taking the time since t0.
  void report(kv_move_event::kind what, uint64_t job_key, size_t n_tokens, std::chrono::steady_clock::time_point t0);
  // Spill (when the disk tier takes it) or drop, then free the blocks; true when on disk.
  bool evict(std::map<uint64_t, resident_seq>::iterator it, bool allow_spill);
  // Write r's K/V to the disk tier (replacing the job's older file); reports the move.
  spill_status write(const resident_seq& r, spill_store::time_point deadline, bool sync_dir = true);
  // The disk tier holds a file with exactly r's tokens, written for r's job.
  bool on_disk(const resident_seq& r) const;
  // Wall-clock time r's job is expected to resume (budget eviction order).
  double resume_at(const resident_seq& r) const;

  block_pool& pool_;
  spill_store* spill_;
  residency_config config_;
  std::map<uint64_t, resident_seq> jobs_;
  std::map<uint64_t, std::string> spilled_;  // job_key -> spill file (this process's spills)
  residency_counters counters_;
  double now_ = 0;
};

}  // namespace agentq
