// Error counters of this process's SQLite store and Redis client, read at scrape time:
// agentq_sqlite_errors_total, agentq_redis_errors_total, agentq_redis_reconnects_total.
#pragma once

#include "metrics/registry.h"

namespace agentq::store {
class store;
}
namespace agentq::queue {
class queue;
}

namespace agentq::obs {

// st and q must outlive every collect() of reg.
void register_process_metrics(metrics::registry& reg, store::store& st, queue::queue& q);

}  // namespace agentq::obs
