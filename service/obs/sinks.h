// Where a worker's observability writes go: obs_store (the job store's SQLite file, in-process)
// or a remote worker's control-plane link (worker/remote_control_plane.h), which sends them as
// messages the control plane applies to its obs_store.
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

namespace agentq::obs {

struct timeline_entry;
struct engine_sample;

// Job timeline spans and marks, fenced on the job's lease epoch: false when fenced or on error.
class timeline_sink {
 public:
  virtual ~timeline_sink() = default;
  virtual bool record(const std::string& job_id, int64_t epoch, const timeline_entry& e) = 0;
  // Close this job's open spans of a kind at end_ms (fenced).
  virtual bool close_open(const std::string& job_id, int64_t epoch, const std::string& kind, int64_t end_ms) = 0;
};

// A worker's engine samples and metric families (GET /v1/engine/stats, /metrics).
class sample_sink {
 public:
  virtual ~sample_sink() = default;
  virtual bool write_sample(const std::string& worker_id, const engine_sample& s, const nlohmann::json& families) = 0;
  virtual void prune(int64_t before_ms) = 0;  // samples older than before_ms
};

}  // namespace agentq::obs
