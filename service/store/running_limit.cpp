// The per-tenant concurrent running jobs limit, inside the store's write transactions (see running_limit.h).
#include "store/running_limit.h"

#include <algorithm>
#include <vector>

#include <nlohmann/json.hpp>

namespace agentq::store::running_limit {

namespace {

constexpr int32_t k_max_promote = 1000;  // promotions per refill at most (a removed limit drains in passes)

// NOTE: INDEXED BY pins the plans: running jobs are few in all (workers' slots), a tenant's jobs may
// be millions, so the running count walks the status index, never the tenant's; held and promoted
// jobs are counted in the partial index jobs_hold (migrations/0010), whose terms the queries repeat.
int64_t n_running(conn& c, const std::string& tenant) {
  auto& s = c.stmt("SELECT COUNT(*) FROM jobs INDEXED BY jobs_status WHERE status='running' AND tenant=?");
  s.bind(1, tenant);
  s.step();
  return s.col_int(0);
}

int64_t n_promoted(conn& c, const std::string& tenant) {
  auto& s = c.stmt(
      "SELECT COUNT(*) FROM jobs INDEXED BY jobs_hold WHERE tenant=? AND hold=2 AND hold != 0 AND status = 'queued'");
  s.bind(1, tenant);
  s.step();
  return s.col_int(0);
}

bool any_held(conn& c, const std::string& tenant) {
  auto& s = c.stmt(
      "SELECT 1 FROM jobs INDEXED BY jobs_hold WHERE tenant=? AND hold=1 AND hold != 0 AND status = 'queued' LIMIT 1");
  s.bind(1, tenant);
  return s.step();
}

int64_t n_held(conn& c, const std::string& tenant) {
  auto& s = c.stmt(
      "SELECT COUNT(*) FROM jobs INDEXED BY jobs_hold WHERE tenant=? AND hold=1 AND hold != 0 AND status = 'queued'");
  s.bind(1, tenant);
  s.step();
  return s.col_int(0);
}

}  // namespace

verdict check(conn& c, const std::string& job_id, const std::string& tenant, int64_t limit) {
  verdict v;
  auto& s = c.stmt("SELECT hold FROM jobs WHERE id=?");
  s.bind(1, job_id);
  if (s.step()) v.hold_before = static_cast<int32_t>(s.col_int(0));
  v.n_running = n_running(c, tenant);
  if (v.hold_before == 2) {
    v.admit = v.n_running < limit;  // promoted: a slot was freed for it
    return v;
  }
  // NOTE: a fresh job takes a slot only when no promoted job is on its way to it and none of the
  // tenant's jobs is held: else it queues behind them (FIFO per tenant, no starving the held ones).
  // A held job delivered again (reconciler, a stale entry) may take a free slot itself.
  v.n_promoted = n_promoted(c, tenant);
  const bool slot_free = v.n_running + v.n_promoted < limit;
  v.admit = slot_free && (v.hold_before == 1 || !any_held(c, tenant));
  v.behind_held = slot_free && !v.admit;
  return v;
}

void hold(conn& c, const std::string& job_id, const std::string& tenant, const verdict& v, int64_t limit,
          int64_t now) {
  c.stmt("UPDATE jobs SET hold=1 WHERE id=? AND status='queued'").bind_all(job_id).run();
  if (v.hold_before == 0) {
    // NOTE: two causes, two wordings: the tenant is at its limit, or a slot is free but older held
    // jobs of the tenant take it first (FIFO per tenant) — then saying "at its limit" would be wrong.
    auto jobs = [](int64_t n) { return std::to_string(n) + (n == 1 ? " job" : " jobs"); };
    std::string reason;
    int64_t n_ahead = 0;
    if (v.behind_held) {
      n_ahead = n_held(c, tenant) - 1;  // NOTE: this job is counted: held just above
      reason = "this tenant has " + jobs(v.n_running) + " running" +
               (v.n_promoted > 0 ? " and " + jobs(v.n_promoted) + " starting" : std::string()) + " of its limit of " +
               std::to_string(limit) + " (--tenant-max-running), but it already has " + jobs(n_ahead) +
               " waiting for a slot, submitted earlier, and they go first; the job waits queued and starts "
               "after them";
    } else {
      reason = "this tenant has " + jobs(v.n_running) + " running" +
               (v.n_promoted > 0 ? " and " + jobs(v.n_promoted) + " starting" : std::string()) + ", its limit is " +
               std::to_string(limit) +
               " (--tenant-max-running); the job waits queued and starts when one of them finishes";
    }
    nlohmann::json d = {{"code", "tenant_max_running"}, {"running", v.n_running}, {"limit", limit},
                        {"held_ahead", n_ahead},       {"reason", std::move(reason)}};
    c.stmt("INSERT INTO job_events(job_id, tenant, type, data_json, created_ms) SELECT id, tenant, 'waiting', ?, ? "
           "FROM jobs WHERE id=?")
        .bind_all(d.dump(), now, job_id)
        .run();
    c.wrote |= conn::k_wrote_event;
  }
  refill(c, tenant, limit, now);
}

int32_t refill(conn& c, const std::string& tenant, int64_t limit, int64_t now) {
  int64_t free = k_max_promote;
  if (limit > 0) free = std::min<int64_t>(free, limit - n_running(c, tenant) - n_promoted(c, tenant));
  if (free <= 0) return 0;
  std::vector<std::pair<std::string, int64_t>> jobs;  // id, priority
  auto& s = c.stmt(
      "SELECT id, priority FROM jobs INDEXED BY jobs_hold WHERE tenant=? AND hold=1 AND hold != 0 AND status = "
      "'queued' ORDER BY priority, created_ms LIMIT ?");
  s.bind_all(tenant, free);
  while (s.step()) jobs.emplace_back(s.col_text(0), s.col_int(1));
  s.reset();
  for (auto& [id, priority] : jobs) {
    c.stmt("UPDATE jobs SET hold=2, updated_ms=? WHERE id=?").bind_all(now, id).run();
    // NOTE: the relay looks the job's model up (the payload has none), as for a release.
    c.stmt("INSERT INTO outbox(kind, job_id, payload_json, target, next_attempt_ms, created_ms) "
           "VALUES ('publish',?,?,'',0,?)")
        .bind_all(id, nlohmann::json{{"priority", priority}}.dump(), now)
        .run();
    c.wrote |= conn::k_wrote_outbox;
  }
  return static_cast<int32_t>(jobs.size());
}

void refill_for_job(conn& c, const std::string& job_id, int64_t limit, int64_t now) {
  if (limit <= 0) return;
  auto& s = c.stmt("SELECT tenant FROM jobs WHERE id=?");
  s.bind(1, job_id);
  if (!s.step()) return;
  std::string tenant = s.col_text(0);
  s.reset();
  refill(c, tenant, limit, now);
}

namespace {
std::vector<std::string> held_tenants(conn& c) {
  std::vector<std::string> out;
  auto& s = c.stmt("SELECT DISTINCT tenant FROM jobs INDEXED BY jobs_hold WHERE hold=1 AND hold != 0 AND status = 'queued'");
  while (s.step()) out.push_back(s.col_text(0));
  s.reset();
  return out;
}
}  // namespace

bool any_stranded(conn& c, int64_t limit) {
  for (const auto& t : held_tenants(c))
    if (limit <= 0 || n_running(c, t) + n_promoted(c, t) < limit) return true;
  return false;
}

int32_t refill_all(conn& c, int64_t limit, int64_t now) {
  int32_t n = 0;
  for (const auto& t : held_tenants(c)) n += refill(c, t, limit, now);
  return n;
}

}  // namespace agentq::store::running_limit
