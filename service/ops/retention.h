// Retention: a background sweeper that tombstones finished jobs past their retention period
// (server default, per-key override) and store:false jobs once their result is delivered, in
// small batches off the request path; then gives the space back (incremental vacuum, WAL
// checkpoint) and removes spill files older than the period. Also the space metrics.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

namespace agentq::store {
class store;
}
namespace agentq::metrics {
class registry;
}

namespace agentq::ops {

struct retention_options {
  int64_t retention_ms = 30LL * 86400000;          // finished jobs kept this long; 0 = forever
  int32_t batch_jobs = 64;                         // jobs per write transaction (bounds the write stall)
  std::chrono::milliseconds batch_pause{10};       // between two batches (lets API writes in)
  std::chrono::milliseconds interval{10000};       // between sweeps
  int32_t vacuum_pages = 256;                      // free pages given back per write transaction
  std::string spill_dir;                           // *.kv files older than retention_ms go; empty = none
  // Records that hang off jobs but live elsewhere (the Batch API's finished batches and their output
  // files): called each sweep with the cutoff (ms since the epoch; finished before it = expired);
  // returns how many records went. Empty = none.
  std::function<int64_t(int64_t cutoff_ms)> sweep_more;
};

// Count jobs deleted for a reason ("expired", "unstored", "request", "tenant") in
// agentq_jobs_deleted_total (the API's deletions use it too).
void count_deleted(const std::string& reason, int64_t n);

class retention {
 public:
  // Registers agentq_db_bytes, agentq_db_wal_bytes, agentq_db_free_pages, agentq_spill_bytes and the
  // retention figures on reg (collected at scrape time).
  retention(retention_options options, store::store& st, metrics::registry& reg);
  ~retention();  // stop()
  void start();
  void stop();
  // One sweep now, on the caller's thread: every expired and delivered store:false job, then space.
  // The number of jobs deleted.
  int64_t sweep_once();
  // A deletion happened elsewhere (DELETE /v1/jobs/{id}): checkpoint and reclaim soon.
  void notify_deleted();

 private:
  struct state;
  std::shared_ptr<state> state_;
};

}  // namespace agentq::ops
