// The observability tables (migrations/0004_observability.sql) on the job store's SQLite
// file, through one connection of their own: worker-side writes (engine samples, worker
// metric families, fenced timeline spans) and API-side reads (engine series, latest worker
// metrics, job counts, per-job timelines).
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "obs/sinks.h"

namespace agentq::store {
class sqlite_db;
struct job_row;
}  // namespace agentq::store

namespace agentq::obs {

// One engine sample of a worker (a point of GET /v1/engine/stats).
struct engine_sample {
  int64_t at_ms = 0;
  double tokens_per_s = 0;           // generated tokens/s since the previous sample
  double prompt_tokens_per_s = 0;    // computed (prefilled) prompt tokens/s since the previous sample
  int64_t batch_size = 0;            // tokens in the engine's latest step
  int64_t running = 0, waiting = 0;  // sequences
  int64_t kv_blocks_used = 0, kv_blocks_total = 0, kv_blocks_parked = 0, kv_blocks_spilled = 0;
  double prefix_hit_rate = 0;  // cached / prompt tokens since the engine started, 0..1
};
nlohmann::json to_json(const engine_sample& s);  // the contract's sample object (with at_ms)

struct worker_families {
  std::string worker_id;
  int64_t at_ms = 0;
  nlohmann::json families;  // metrics::to_json form
};

// Jobs by (status, priority): counts and the oldest updated_ms (queue age for 'queued').
struct job_count {
  std::string status;
  int32_t priority = 1;  // 0 high, 1 normal, 2 low
  int64_t n_jobs = 0;
  int64_t oldest_updated_ms = 0;
};

// One timeline entry the worker records.
struct timeline_entry {
  bool is_mark = false;
  std::string kind;  // "tool", "parked", ...
  int64_t start_ms = 0;
  std::optional<int64_t> end_ms;  // nullopt = open span
  std::optional<int32_t> turn;
  std::string label;
  nlohmann::json attrs = nlohmann::json::object();
};

class obs_store : public timeline_sink, public sample_sink {
 public:
  // db_path: the job store's file (migrated here if needed). nullptr with *error on failure.
  static std::unique_ptr<obs_store> open(const std::string& db_path, std::string* error);
  ~obs_store() override;

  // --- worker side (errors are logged and reported as false) ---------------------
  bool write_sample(const std::string& worker_id, const engine_sample& s, const nlohmann::json& families) override;
  void prune(int64_t before_ms) override;  // samples older than before_ms
  // Fenced on the job's lease epoch (a stale worker writes nothing): false when fenced or on error.
  bool record(const std::string& job_id, int64_t epoch, const timeline_entry& e) override;
  // Close this job's open spans of a kind at end_ms (fenced).
  bool close_open(const std::string& job_id, int64_t epoch, const std::string& kind, int64_t end_ms) override;

  // --- API side --------------------------------------------------------------------
  // {"object":"engine.stats","now_ms","workers":[{"worker_id","samples":[...]}]}; samples at_ms > since_ms.
  nlohmann::json engine_stats(int64_t since_ms, int64_t now_ms);
  // Each worker's latest families, written at or after min_at_ms.
  std::vector<worker_families> latest_families(int64_t min_at_ms);
  std::vector<job_count> job_counts();
  // Queued jobs held by --tenant-max-running (jobs.hold = 1), from the partial index jobs_hold.
  int64_t n_held_jobs();
  // The contract's job.timeline object (obs/timeline.cpp).
  nlohmann::json timeline(const store::job_row& job);

 private:
  explicit obs_store(std::unique_ptr<store::sqlite_db> db);
  std::mutex mu_;  // NOTE: one connection, one user at a time
  std::unique_ptr<store::sqlite_db> db_;
};

}  // namespace agentq::obs
