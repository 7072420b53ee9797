// Store-private: the per-tenant concurrent running jobs limit (--tenant-max-running, issue 29),
// enforced where jobs are claimed, inside the claim's write transaction (so global across workers
// and processes: SQLite serialises the writers). A job over the limit is held (jobs.hold = 1), not
// rejected: its Redis entry is acked and it waits in SQLite; each job of the tenant that leaves
// `running` promotes the oldest held one (hold = 2 + a "publish" outbox row, in that transaction).
#pragma once

#include <cstdint>
#include <string>

#include "store/conn.h"

namespace agentq::store::running_limit {

// A queued job's claim under limit (> 0): true = it may run now; false = hold it (see hold()).
// Promoted jobs go first when a slot is free; a fresh job waits behind the tenant's held ones.
struct verdict {
  bool admit = true;
  int32_t hold_before = 0;   // the job's hold before this claim (0 none, 1 held, 2 promoted)
  int64_t n_running = 0;     // the tenant's running jobs now
  int64_t n_promoted = 0;    // the tenant's promoted jobs on their way to a slot (a fresh job's check only)
  bool behind_held = false;  // held although a slot was free: older held jobs of the tenant go first
};
verdict check(conn& c, const std::string& job_id, const std::string& tenant, int64_t limit);

// Hold the job (hold = 1): its first hold writes a "waiting" event saying why; then refill (a
// fresh job held behind others may leave a slot for the oldest held one).
void hold(conn& c, const std::string& job_id, const std::string& tenant, const verdict& v, int64_t limit,
          int64_t now);

// Promote the tenant's oldest held jobs (priority, then age) into its free slots (limit minus
// running minus promoted): hold = 2 and a "publish" outbox row each. The number promoted.
int32_t refill(conn& c, const std::string& tenant, int64_t limit, int64_t now);

// refill for the job's tenant (after the job left `running`); no-op when limit <= 0.
void refill_for_job(conn& c, const std::string& job_id, int64_t limit, int64_t now);

// Tenants with held jobs and a free slot (a missed promotion: reconciler's safety net), at most limit.
bool any_stranded(conn& c, int64_t limit);
int32_t refill_all(conn& c, int64_t limit, int64_t now);

}  // namespace agentq::store::running_limit
