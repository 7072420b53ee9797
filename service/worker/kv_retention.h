// KV kept after a stored response ends (issue 27, --response-kv-ttl-s): which engine KV keys a
// finished job still holds for a previous_response_id continuation, and until when.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace agentq::worker {

// The engine KV key of a job: FNV-1a of its kv chain id (the first response of a
// previous_response_id chain, "kv_chain" in the spec), else of its own id. Never 0.
uint64_t job_key_of(const std::string& job_or_chain_id);
// The kv chain id a job's request_json names ("kv_chain"), else job_id.
std::string kv_chain_of(const std::string& request_json, const std::string& job_id);

// Thread-safe: job threads hold keys, the housekeeper expires them, deletions drop them.
class kv_retention {
 public:
  using clock = std::chrono::steady_clock;
  // job_id ended holding key: keep it until now + ttl (replaces the key's previous holder).
  void hold(uint64_t key, const std::string& job_id, clock::time_point until);
  // A new job claimed key (a continuation): nothing to expire for it any more.
  void claim(uint64_t key);
  // Keys whose time is up (removed).
  std::vector<uint64_t> expired(clock::time_point now);
  // The key job_id holds (removed), if it is the key's latest holder.
  std::optional<uint64_t> drop_job(const std::string& job_id);
  // Whether key is held by a job other than job_id.
  bool held_by_other(uint64_t key, const std::string& job_id);
  // (key, job id) of every held key.
  std::vector<std::pair<uint64_t, std::string>> held();
  size_t size();

 private:
  struct entry {
    std::string job_id;
    clock::time_point until;
  };
  std::mutex mu_;
  std::map<uint64_t, entry> keys_;
};

}  // namespace agentq::worker
