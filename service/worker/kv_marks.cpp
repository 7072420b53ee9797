// KV spill / restore timeline marks (see kv_marks.h).
#include "worker/kv_marks.h"

#include <cstdio>

#include "obs/obs_store.h"
#include "store/store.h"

namespace agentq::worker {

void kv_marks::track(uint64_t job_key, const std::string& job_id, int64_t epoch) {
  std::lock_guard lock(mu_);
  jobs_[job_key] = {job_id, epoch};
  std::erase(forgotten_, job_key);
}

void kv_marks::forget(uint64_t job_key) {
  std::lock_guard lock(mu_);
  forgotten_.push_back(job_key);
}

void kv_marks::on_move(const kv_move_event& e) {
  std::lock_guard lock(mu_);
  queued_.push_back({store::now_ms(), e});
}

void kv_marks::flush(obs::timeline_sink& timeline, const std::string& worker_id) {
  std::vector<std::pair<pending, std::pair<std::string, int64_t>>> todo;
  {
    std::lock_guard lock(mu_);
    for (auto& p : queued_) {
      auto it = jobs_.find(p.move.job_key);
      if (it != jobs_.end()) todo.push_back({p, it->second});
    }
    queued_.clear();
    // NOTE: after the queue: a job's last turn restores, ends and is released within one housekeeper tick
    for (uint64_t k : forgotten_) jobs_.erase(k);
    forgotten_.clear();
  }
  for (auto& [p, job] : todo) {
    const bool spill = p.move.what == kv_move_event::kind::spill;
    obs::timeline_entry e;
    e.is_mark = true;
    e.kind = spill ? "kv_spill" : "kv_restore";
    e.start_ms = p.at_ms;
    char label[128];
    std::snprintf(label, sizeof label, "KV %s disk: %d tokens, %.1f KiB in %.1f ms",
                  spill ? "spilled to" : "restored from", p.move.n_tokens, double(p.move.n_bytes) / 1024.0, p.move.ms);
    e.label = label;
    e.attrs = {{"tokens", p.move.n_tokens}, {"bytes", p.move.n_bytes}, {"ms", p.move.ms}, {"worker", worker_id}};
    timeline.record(job.first, job.second, e);
  }
}

}  // namespace agentq::worker
