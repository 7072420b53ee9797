// KV spill / restore marks on job timelines: the engine reports each move of a job's KV to
// or from the disk tier (engine thread); the worker's housekeeper writes them as
// kv_spill / kv_restore marks, fenced on the job's epoch like its other timeline writes.
#pragma once

#include <agentq/engine.h>

#include <algorithm>
#include <cstdint>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace agentq::obs {
class timeline_sink;
}

namespace agentq::worker {

class kv_marks {
 public:
  // The job this worker runs under job_key (at its current epoch); moves of unknown keys are dropped.
  void track(uint64_t job_key, const std::string& job_id, int64_t epoch);
  // The job's KV is released: after the next flush (which still writes moves queued before now).
  void forget(uint64_t job_key);
  // engine::on_kv_move listener: queues the move with the wall-clock time (no I/O here).
  void on_move(const kv_move_event& e);
  // Write the queued moves as timeline marks (best effort; fenced writes of a lost job are dropped).
  void flush(obs::timeline_sink& timeline, const std::string& worker_id);

 private:
  struct pending {
    int64_t at_ms = 0;
    kv_move_event move;
  };
  std::mutex mu_;
  std::vector<pending> queued_;
  std::unordered_map<uint64_t, std::pair<std::string, int64_t>> jobs_;  // job_key -> (job_id, epoch)
  std::vector<uint64_t> forgotten_;                                     // dropped from jobs_ at the next flush
};

}  // namespace agentq::worker
