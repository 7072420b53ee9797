// Per-tenant token quota (issue 29): --tenant-tokens-per-day N. A tenant whose finished jobs used
// N tokens (input + output, as GET /v1/usage counts them) since 00:00 UTC gets 429 with OpenAI's
// `insufficient_quota` type and Retry-After until the next UTC day; other tenants are unaffected.
// Counted from SQLite (the truth, finished jobs only: their usage is final), re-read at most once a
// second (less often when a count is slow: see refresh_locked), so running jobs finish past the
// quota and a burst can pass it by what ran since the last count.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

namespace agentq::store {
class sqlite_db;
}

namespace agentq::api {

struct quota_limits {
  int64_t tokens_per_day = 0;  // input + output tokens of one tenant per UTC day; 0 = none
  std::chrono::milliseconds refresh{1000};
};

class tenant_quota {
 public:
  // Own connection to the job store's file. nullptr with *error.
  static std::unique_ptr<tenant_quota> open(const std::string& db_path, quota_limits limits, std::string* error);
  ~tenant_quota();

  struct verdict {
    bool admitted = true;
    std::string message;
    int32_t retry_after_s = 0;
  };
  // Whether tenant may submit now (at now_ms, UNIX ms).
  verdict admit(const std::string& tenant, int64_t now_ms);
  // Tokens tenant used today as last counted (tests, metrics).
  int64_t used_today(const std::string& tenant, int64_t now_ms);

 private:
  tenant_quota(std::unique_ptr<store::sqlite_db> db, quota_limits limits);
  // Re-counts when stale; called with lock held, runs the query with it released.
  void refresh_locked(std::unique_lock<std::mutex>& lock, int64_t now_ms);
  std::mutex mu_;
  bool counting_ = false;  // one thread counts at a time; the others use the last counts
  std::unique_ptr<store::sqlite_db> db_;
  quota_limits limits_;
  std::chrono::steady_clock::time_point read_at_{};
  std::chrono::milliseconds interval_{1000};  // limits_.refresh, or 20x the last count's duration
  int64_t day_ = -1;                          // the UTC day (ms / 86,400,000) the counts are for
  std::unordered_map<std::string, int64_t> used_;
};

}  // namespace agentq::api
