// Continuous batching. schedule() builds one step's plan: a decode token for every
// running sequence, then prefill chunks (chunked prefill) up to max_step_tokens, then
// admissions of waiting sequences; it preempts (recompute) when blocks run out.
// update() applies the sampled tokens. Order is per job: (priority desc, arrival_seq
// asc), so a job back from a tool call keeps its place ahead of newer jobs.
// The model is not involved: tests drive schedule()/update() directly.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "agentq/engine.h"
#include "kv/block_pool.h"
#include "kv/prefix_cache.h"
#include "kv/residency.h"

namespace agentq {

struct sched_config {
  int32_t max_step_tokens = 512;  // tokens per step (decodes + prefill chunks)
  int32_t max_running = 64;       // sequences per step
  // With a sequence of priority > 0 running or waiting, prefill chunks of priority-0 sequences get
  // at most this many tokens of a step in all (decode tokens unlimited); 0 = no limit.
  int32_t low_priority_step_tokens = 0;
  bool prefix_reuse = true;       // prefix cache and job residency (false: re-prefill baseline)
  int32_t n_ctx = 0;              // tokens per sequence at most (0 = unbounded)
  int32_t spec_step_tokens = 1 << 30;  // proposals only while decode tokens + proposals stay within this
};

enum class seq_state { waiting, running };

struct seq_request {
  uint64_t id = 0;                // unique, caller-chosen
  uint64_t job_key = 0;           // 0 = no residency
  uint64_t arrival_seq = 0;
  int32_t priority = 0;
  std::vector<token_id> prompt;   // non-empty
};

struct sequence {
  seq_request req;
  uint64_t submit_order = 0;      // tie-break after (priority, arrival_seq)
  std::vector<token_id> tokens;   // prompt + generated
  int32_t n_prompt = 0;
  int32_t n_computed = 0;         // tokens whose K/V is in the pool
  int32_t seq_idx = -1;           // block_pool slot, -1 while holding no KV
  std::vector<uint64_t> hashes;   // prefix-cache chain hashes of its registered full blocks
  seq_state state = seq_state::waiting;
  bool admitted_once = false;
  int32_t n_tokens_cached = 0;    // prompt tokens served from resident / cached / restored KV (first admission)
  int32_t n_tokens_computed = 0;  // prompt tokens prefilled (recompute after preemption included)
  int32_t n_preemptions = 0;
  // Speculation: tokens proposed to follow tokens.back() (set_draft), verified in the next
  // step's decode item; verify holds {tokens.back(), draft...} for the plan to point at.
  std::vector<token_id> draft;
  std::vector<token_id> verify;
  int32_t n_generated() const { return int32_t(tokens.size()) - n_prompt; }
};

struct plan_item {
  uint64_t id = 0;
  int32_t n_past = 0;              // tokens already in KV
  int32_t n_tokens = 0;            // tokens to compute: positions n_past..n_past+n_tokens-1
  bool sample = false;             // the chunk ends at the last known token: sample the next
  int32_t n_draft = 0;             // of n_tokens, proposed tokens after the last known one (verify: logits for all)
  const token_id* tokens = nullptr;     // valid until the next schedule()/update()/finish()
  const int32_t* block_table = nullptr; // same
};

struct step_plan {
  std::vector<plan_item> items;
  std::vector<uint64_t> preempted;       // sent back to waiting (KV freed; recomputed later)
  std::vector<uint64_t> out_of_memory;   // can never get another block: finish them (length)
  int32_t n_tokens = 0;
  bool empty() const { return items.empty(); }
};

class scheduler {
 public:
  // residency may be null. The scheduler installs the pool's evictor (cache, then residency).
  scheduler(block_pool& pool, prefix_cache& cache, residency* res, sched_config config);
  ~scheduler();

  // Queue a sequence. An error when it can never run: prompt longer than n_ctx, or needing
  // more blocks than the whole pool.
  std::optional<std::string> add(seq_request request);
  // Plan one step. Mutates block tables (reservations, admissions, preemptions).
  step_plan schedule();
  // Propose tokens to follow a running, decoding sequence's last token; the next schedule()
  // verifies as many as the step's spare budget and KV allow (decode tokens come first).
  void set_draft(uint64_t id, std::vector<token_id> draft);
  // Apply a step: KV now holds the planned tokens; sampled[i] is item i's new token
  // (read only where items[i].sample). With speculation, n_accepted[i] (when given) of
  // item i's n_draft proposals were accepted: they join the sequence ahead of sampled[i],
  // and the K/V written for the rejected ones is forgotten (overwritten by later steps).
  void update(const step_plan& plan, std::span<const token_id> sampled, std::span<const int32_t> n_accepted = {});
  // Remove a sequence (finished, cancelled, failed). keep_kv with a job_key: its K/V becomes
  // the job's resident sequence; otherwise freed (full blocks stay in the prefix cache).
  void finish(uint64_t id, bool keep_kv, double now);

  const sequence* find(uint64_t id) const;
  int32_t n_running() const;
  int32_t n_waiting() const;
  bool idle() const { return seqs_.empty(); }
  const sched_config& config() const { return config_; }

  // Invariants: running seqs hold a live slot with n_tokens == n_computed; waiting ones hold
  // none; registered hashes cover only computed full blocks; plus pool/cache/residency sanity.
  void sanity() const;

 private:
  bool before(const sequence& a, const sequence& b) const;  // scheduling order
  std::vector<sequence*> ordered(seq_state st);
  void preempt(sequence& s);
  void drop_kv(sequence& s);
  void register_blocks(sequence& s);
  // The partly filled last block of s, whose K/V s no longer writes (it ends, is preempted
  // or parked), into the prefix cache as a tail (prefix_cache::insert_tail).
  void register_tail(const sequence& s);
  // First admission or readmission: resident KV, disk tier or prefix cache.
  void attach_prefix(sequence& s);

  block_pool& pool_;
  prefix_cache& cache_;
  residency* residency_;
  sched_config config_;
  std::map<uint64_t, sequence> seqs_;
  uint64_t next_order_ = 0;
};

}  // namespace agentq
