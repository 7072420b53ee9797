// Error counters of this process's SQLite store and Redis client: agentq_sqlite_errors_total,
// agentq_redis_errors_total, agentq_redis_reconnects_total. A poller thread copies them once a
// second, so a scrape never waits on the queue's client locks (a blocked XREADGROUP holds one).
#pragma once

#include <memory>
#include <thread>

#include "metrics/registry.h"

namespace agentq::store {
class store;
}
namespace agentq::queue {
class queue;
}

namespace agentq::obs {

class process_metrics {
 public:
  // Registers a collector on reg; st and q must outlive this object (declare it after them).
  process_metrics(metrics::registry& reg, store::store& st, queue::queue& q);
  // st nullptr: a process without a job store (a remote worker); its SQLite counter stays 0.
  process_metrics(metrics::registry& reg, store::store* st, queue::queue& q);
  ~process_metrics();  // stops the poller; the collector then serves the last copy
  process_metrics(const process_metrics&) = delete;
  process_metrics& operator=(const process_metrics&) = delete;

 private:
  struct state;
  std::shared_ptr<state> state_;
  std::thread poller_;
};

}  // namespace agentq::obs
