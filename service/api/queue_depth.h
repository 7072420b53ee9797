// Back-pressure (issue 29): queued jobs in total and per tenant against --max-queue-depth and
// --max-queue-depth-per-tenant. A submit that would go past a bound is refused with 429, error type
// queue_full and Retry-After (not the per-key rate limit's rate_limit_error). Counts come from
// SQLite (the truth), re-read at most every refresh interval; admits since then are added on.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>

namespace agentq::store {
class sqlite_db;
}

namespace agentq::api {

struct queue_bounds {
  int64_t max_total = 0;       // queued jobs in all; 0 = unbounded
  int64_t max_per_tenant = 0;  // queued jobs of one tenant; 0 = unbounded
  std::chrono::milliseconds refresh{250};
};

class queue_depth {
 public:
  // Own connection to the job store's file. nullptr with *error.
  static std::unique_ptr<queue_depth> open(const std::string& db_path, queue_bounds bounds, std::string* error);
  ~queue_depth();

  // Whether n_new more queued jobs of tenant fit; when not, the message and the seconds to wait.
  struct verdict {
    bool admitted = true;
    std::string message;
    int32_t retry_after_s = 0;
  };
  verdict admit(const std::string& tenant, int64_t n_new);
  const queue_bounds& bounds() const { return bounds_; }

 private:
  queue_depth(std::unique_ptr<store::sqlite_db> db, queue_bounds bounds);
  void refresh_locked();
  std::mutex mu_;
  std::unique_ptr<store::sqlite_db> db_;
  queue_bounds bounds_;
  std::chrono::steady_clock::time_point read_at_{};
  int64_t total_ = 0;
  std::unordered_map<std::string, int64_t> by_tenant_;
};

}  // namespace agentq::api
