// Scheduler step by step: assert on each step's plan (no model); then a randomised run with
// a fake model that writes token stamps into K/V and "samples" from what it reads back
// through the block tables, so any wrong block (prefix reuse, copy-on-write, preemption,
// residency) changes the output.
#include <doctest/doctest.h>

#include <map>
#include <random>

#include "sched/scheduler.h"

using namespace agentq;

namespace {

kv_layout layout4() { return {1, 1, 2, 4}; }

seq_request req(uint64_t id, std::vector<token_id> prompt, uint64_t job = 0, uint64_t arrival = 0, int32_t prio = 0) {
  seq_request r;
  r.id = id;
  r.job_key = job;
  r.arrival_seq = arrival ? arrival : id;
  r.priority = prio;
  r.prompt = std::move(prompt);
  return r;
}
std::vector<token_id> iota(int32_t n, token_id from = 1) {
  std::vector<token_id> v(static_cast<size_t>(n));
  for (int32_t i = 0; i < n; ++i) v[size_t(i)] = from + i;
  return v;
}

// The fake model: K row = token stamp at each position; the next token is a hash of every
// stamp read back through the block table (so it depends on the whole KV content).
token_id fake_next(const std::vector<token_id>& ctx) {
  uint64_t h = 1469598103934665603ull;
  for (token_id t : ctx) h = (h ^ uint64_t(t)) * 1099511628211ull;
  return token_id(1 + (h >> 33) % 7);
}
std::vector<token_id> fake_forward(block_pool& pool, const step_plan& plan) {
  std::vector<token_id> out;
  const int32_t bs = pool.block_size();
  for (const auto& it : plan.items) {
    for (int32_t i = 0; i < it.n_tokens; ++i) {
      const int32_t pos = it.n_past + i;
      pool.store().k(0, it.block_table[pos / bs])[(pos % bs) * 2] = float(it.tokens[i]);
    }
    std::vector<token_id> ctx;
    for (int32_t pos = 0; pos < it.n_past + it.n_tokens; ++pos)
      ctx.push_back(token_id(pool.store().k(0, it.block_table[pos / bs])[(pos % bs) * 2]));
    out.push_back(it.sample ? fake_next(ctx) : -1);
  }
  return out;
}
std::vector<token_id> expected(std::vector<token_id> prompt, int32_t n_gen) {
  for (int32_t i = 0; i < n_gen; ++i) prompt.push_back(fake_next(prompt));
  return prompt;
}

struct rig {
  block_pool pool;
  prefix_cache cache{pool};
  residency res{pool, nullptr, residency_config{}};
  scheduler sched;
  rig(int32_t n_blocks, sched_config cfg) : pool(layout4(), n_blocks), sched(pool, cache, &res, cfg) {}
  step_plan step() {
    auto plan = sched.schedule();
    sched.sanity();
    sched.update(plan, fake_forward(pool, plan));
    sched.sanity();
    return plan;
  }
};

}  // namespace

TEST_CASE("scheduler: chunked prefill, then decode alongside an admitted prefill") {
  sched_config cfg;
  cfg.max_step_tokens = 8;
  rig r(64, cfg);
  REQUIRE_FALSE(r.sched.add(req(1, iota(10))));
  auto p = r.step();
  REQUIRE(p.items.size() == 1);
  CHECK(p.items[0].n_past == 0);
  CHECK(p.items[0].n_tokens == 8);
  CHECK_FALSE(p.items[0].sample);
  REQUIRE_FALSE(r.sched.add(req(2, iota(12, 100))));
  p = r.step();  // rest of 1's prompt (2) + 6 of 2's
  REQUIRE(p.items.size() == 2);
  CHECK(p.items[0].id == 1);
  CHECK(p.items[0].n_tokens == 2);
  CHECK(p.items[0].sample);
  CHECK(p.items[1].id == 2);
  CHECK(p.items[1].n_tokens == 6);
  p = r.step();  // decode 1 first, then the rest of 2
  REQUIRE(p.items.size() == 2);
  CHECK(p.items[0].id == 1);
  CHECK(p.items[0].n_tokens == 1);
  CHECK(p.items[1].id == 2);
  CHECK(p.items[1].n_tokens == 6);
  CHECK(p.items[1].sample);
  CHECK(p.n_tokens == 7);
  p = r.step();
  CHECK(p.items.size() == 2);
  CHECK(p.n_tokens == 2);
  CHECK(r.sched.find(1)->tokens == expected(iota(10), 3));
  CHECK(r.sched.find(2)->tokens == expected(iota(12, 100), 2));
  CHECK(r.sched.find(1)->n_tokens_computed == 10);
}

TEST_CASE("scheduler: per-job order — a job back from a tool keeps its place") {
  sched_config cfg;
  cfg.max_step_tokens = 4;
  cfg.max_running = 1;
  rig r(64, cfg);
  REQUIRE_FALSE(r.sched.add(req(10, iota(4), 0, 50)));     // newer job, submitted first
  REQUIRE_FALSE(r.sched.add(req(11, iota(4, 9), 0, 7)));   // older job's next turn
  REQUIRE_FALSE(r.sched.add(req(12, iota(4, 20), 0, 60, 1)));  // higher priority beats both
  auto p = r.step();
  REQUIRE(p.items.size() == 1);
  CHECK(p.items[0].id == 12);
  r.sched.finish(12, false, 0);
  p = r.step();
  CHECK(p.items[0].id == 11);
  r.sched.finish(11, false, 0);
  p = r.step();
  CHECK(p.items[0].id == 10);
}

TEST_CASE("scheduler: with a priority > 0 sequence present, priority-0 prefill gets low_priority_step_tokens") {
  // A batch-class prompt (priority 0) fills whole steps; a normal-priority one arriving then is
  // admitted in the very next step beside only 4 of the batch prompt's tokens (without the limit
  // the batch prompt took the whole budget and the normal one waited a step), and once it is gone
  // the batch prompt gets whole steps again. Outputs are unchanged.
  sched_config cfg;
  cfg.max_step_tokens = 32;
  cfg.low_priority_step_tokens = 4;
  rig r(64, cfg);
  REQUIRE_FALSE(r.sched.add(req(1, iota(100), 0, 1, 0)));
  auto p = r.step();
  REQUIRE(p.items.size() == 1);
  CHECK(p.items[0].n_tokens == 32);
  REQUIRE_FALSE(r.sched.add(req(2, iota(6, 200), 0, 2, 1)));
  p = r.step();
  REQUIRE(p.items.size() == 2);
  CHECK(p.items[0].id == 1);
  CHECK(p.items[0].n_tokens == 4);
  CHECK(p.items[1].id == 2);
  CHECK(p.items[1].n_tokens == 6);
  CHECK(p.items[1].sample);
  p = r.step();  // 2's decode token; 1 still limited while 2 is there
  REQUIRE(p.items.size() == 2);
  CHECK(p.items[0].id == 2);
  CHECK(p.items[1].n_tokens == 4);
  CHECK(r.sched.find(2)->tokens == expected(iota(6, 200), 2));
  r.sched.finish(2, false, 0);
  p = r.step();
  REQUIRE(p.items.size() == 1);
  CHECK(p.items[0].n_tokens == 32);
  while (r.sched.find(1)->n_generated() < 2) r.step();
  CHECK(r.sched.find(1)->tokens == expected(iota(100), 2));
}

TEST_CASE("scheduler: prefix reuse and residency — only appended tokens are computed") {
  sched_config cfg;
  cfg.max_step_tokens = 64;
  rig r(64, cfg);
  REQUIRE_FALSE(r.sched.add(req(1, iota(10), 77)));
  r.step();
  r.step();
  r.step();  // 10 prompt + 3 generated, 12 computed
  auto turn1 = r.sched.find(1)->tokens;
  CHECK(turn1 == expected(iota(10), 3));
  r.sched.finish(1, true, 0);
  r.sched.sanity();
  CHECK(r.res.has(77));
  // next turn: the whole conversation + a 5-token tool result
  auto prompt2 = turn1;
  for (token_id t : iota(5, 40)) prompt2.push_back(t);
  REQUIRE_FALSE(r.sched.add(req(2, prompt2, 77, 1)));
  auto p = r.step();
  REQUIRE(p.items.size() == 1);
  CHECK(p.items[0].n_past == 12);  // resident: the partially filled block too
  CHECK(p.items[0].n_tokens == 6);
  CHECK(r.sched.find(2)->n_tokens_cached == 12);
  r.step();
  CHECK(r.sched.find(2)->tokens == expected(prompt2, 2));
  // another job with the same first 8 tokens reuses the two full blocks from the cache
  auto prompt3 = iota(8);
  prompt3.push_back(99);
  REQUIRE_FALSE(r.sched.add(req(3, prompt3, 78)));
  p = r.step();
  REQUIRE(p.items.size() == 2);
  CHECK(p.items[1].id == 3);
  CHECK(p.items[1].n_past == 8);
  CHECK(p.items[1].n_tokens == 1);
  r.sched.finish(2, false, 0);
  r.sched.finish(3, true, 0);
  r.sched.sanity();
  // a divergent resume: the resident KV is truncated to the common prefix (copy-on-write)
  REQUIRE_FALSE(r.sched.add(req(4, iota(6), 78)));
  p = r.step();
  CHECK(p.items[0].n_past == 5);
  CHECK(r.pool.n_cow_copies() == 1);  // block 1 is shared with the cache: copied before the write
  r.sched.sanity();
}

TEST_CASE("scheduler: out of blocks — the newest job is preempted and recomputed, nothing fails") {
  sched_config cfg;
  cfg.max_step_tokens = 64;
  rig r(6, cfg);  // 24 token slots
  REQUIRE_FALSE(r.sched.add(req(1, iota(8))));
  REQUIRE_FALSE(r.sched.add(req(2, iota(8, 50))));
  bool saw_preempt = false;
  for (int i = 0; i < 12; ++i) {
    auto p = r.step();
    for (auto id : p.preempted) { CHECK(id == 2); saw_preempt = true; }
    CHECK(p.out_of_memory.empty());
  }
  CHECK(saw_preempt);
  CHECK(r.sched.find(1)->tokens == expected(iota(8), 12));
  r.sched.finish(1, false, 0);
  for (int i = 0; i < 12; ++i) r.step();
  const auto* s2 = r.sched.find(2);
  REQUIRE(s2);
  CHECK(s2->n_preemptions >= 1);
  CHECK(s2->tokens == expected(iota(8, 50), int32_t(s2->tokens.size()) - 8));
  CHECK(int32_t(s2->tokens.size()) > 8 + 12);
  // too long to ever fit
  CHECK(r.sched.add(req(9, iota(25))).has_value());
}

TEST_CASE("scheduler: alone and out of room reports out_of_memory") {
  sched_config cfg;
  rig r(2, cfg);
  REQUIRE_FALSE(r.sched.add(req(1, iota(7))));
  r.step();
  r.step();  // 8 computed
  auto p = r.sched.schedule();
  CHECK(p.items.empty());
  REQUIRE(p.out_of_memory.size() == 1);
  r.sched.finish(1, false, 0);
  r.sched.sanity();
}

TEST_CASE("scheduler: randomised — tiny pool, many sequences, jobs and turns; outputs match solo") {
  std::mt19937 rng(42);
  int64_t n_preempted = 0, n_resumes = 0, n_evictions = 0, n_cow = 0;
  for (int round = 0; round < 12; ++round) {
    sched_config cfg;
    cfg.max_step_tokens = 3 + int32_t(rng() % 20);
    cfg.max_running = 1 + int32_t(rng() % 6);
    cfg.prefix_reuse = round % 4 != 3;
    rig r(7 + int32_t(rng() % 6), cfg);
    std::vector<token_id> system = iota(6 + int32_t(rng() % 6), 1);
    struct want { std::vector<token_id> prompt; int32_t n_gen; uint64_t job; };
    std::map<uint64_t, want> live;
    std::map<uint64_t, std::vector<token_id>> job_history;
    uint64_t next_id = 1;
    int n_done = 0;
    for (int step = 0; step < 400 && (n_done < 30 || !live.empty()); ++step) {
      if (n_done + int(live.size()) < 30 && rng() % 3 == 0) {
        const uint64_t job = 1 + rng() % 5;
        std::vector<token_id> prompt = job_history.count(job) ? job_history[job] : system;
        for (int n = 1 + int(rng() % 6); n-- > 0;) prompt.push_back(1 + token_id(rng() % 7));
        if (int32_t(prompt.size()) > 20) prompt = system;  // keep within the pool
        bool busy = false;
        for (auto& [id, w] : live) busy |= w.job == job;
        if (!busy) {
          REQUIRE_FALSE(r.sched.add(req(next_id, prompt, job, job)));
          live[next_id++] = {prompt, 1 + int32_t(rng() % 5), job};
        }
      }
      auto plan = r.sched.schedule();
      r.sched.sanity();
      n_preempted += int64_t(plan.preempted.size());
      r.sched.update(plan, fake_forward(r.pool, plan));
      r.sched.sanity();
      for (auto id : plan.out_of_memory) {
        // only when alone; a 20-token prompt + 5 fits 8 blocks: must not happen
        FAIL("out of memory for " << id);
      }
      for (auto it = live.begin(); it != live.end();) {
        const auto* s = r.sched.find(it->first);
        if (s && s->n_generated() >= it->second.n_gen) {
          REQUIRE(s->tokens == expected(it->second.prompt, it->second.n_gen));
          job_history[it->second.job] = s->tokens;
          r.sched.finish(it->first, true, double(step));
          r.sched.sanity();
          if (rng() % 4 == 0) r.res.park(it->second.job, 100.0, double(step));
          if (rng() % 6 == 0) { r.res.release(it->second.job); job_history.erase(it->second.job); }
          r.sched.sanity();
          ++n_done;
          it = live.erase(it);
        } else {
          ++it;
        }
      }
      r.res.expire(double(step));
    }
    CHECK(n_done == 30);
    CHECK(live.empty());
    n_resumes += r.res.counters().n_resumes;
    n_evictions += r.cache.n_evictions();
    n_cow += r.pool.n_cow_copies();
  }
  MESSAGE("preempted " << n_preempted << ", resumes " << n_resumes << ", evictions " << n_evictions << ", cow " << n_cow);
  CHECK(n_preempted > 0);
  CHECK(n_resumes > 0);
  CHECK(n_evictions > 0);
}
