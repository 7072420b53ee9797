// Batch jobs into Redis, fairly (issue 29). Accepted batch lines are queued jobs in SQLite with no
// outbox row; this thread hands them to their model's batch stream through a bounded window (at most
// `window` entries not yet acked per stream), dealing the free places round-robin between tenants
// (within a tenant: its batches in creation order, lines in order). One tenant's 100,000-line batch
// so holds at most `window` places ahead of another tenant's batch submitted after it, instead of
// 100,000. It also re-publishes its own jobs that Redis lost (the reconciler skips queued batch jobs).
// One thread in the API process.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <string>
#include <thread>

namespace agentq::store {
class store;
class batch_store;
}  // namespace agentq::store
namespace agentq::queue {
class queue;
}

namespace agentq::api {

struct batch_feeder_options {
  int32_t window = 256;                               // entries not yet acked per batch stream
  std::chrono::milliseconds busy_poll{10};            // while lines wait for room in a stream
  std::chrono::milliseconds idle_poll{200};
  std::chrono::milliseconds reconcile_interval{5000}; // look for published jobs Redis lost
  int64_t reconcile_grace_ms = 2000;
  std::chrono::milliseconds save_interval{1000};      // cursors to SQLite at most this often
};

struct batch_feeder_deps {
  store::batch_store* batches = nullptr;  // its own connection (not the runner's: long transactions)
  store::store* store = nullptr;
  queue::queue* q = nullptr;
};

struct batch_feeder_stats {
  int64_t n_published = 0, n_republished = 0;
};

class batch_feeder {
 public:
  batch_feeder(batch_feeder_options options, batch_feeder_deps deps);
  ~batch_feeder();  // stop()
  void start();
  void stop();      // saves the cursors
  void wake();      // lines were accepted: feed now
  // One pass: publish what the window has room for. The number published; -1 when lines are left
  // waiting for room (poll again soon) and nothing was published. (The thread's body; tests.)
  int32_t feed_once();
  // Published jobs still queued and missing from Redis are published again. The number.
  int32_t reconcile_once();
  void save_cursors();
  batch_feeder_stats stats() const { return {n_published_.load(), n_republished_.load()}; }

 private:
  struct line {
    int64_t line_idx = 0;
    std::string job_id;  // "" = a refused line (nothing to publish)
    std::string model;   // routing (#28): the job's model; "" = the legacy stream
    std::string stream;
  };
  struct feed {
    std::string tenant;
    int64_t seq = 0;              // the batch's creation order
    int64_t next = 0;             // lines [0, next) handed to Redis
    int64_t saved = -1;           // `next` as last saved
    int64_t fetched = 0;          // lines [next, fetched) are in `ahead`
    std::deque<line> ahead;
    bool open = false;            // seen open in this pass
  };
  void refill(const std::string& batch_id, feed& f, int64_t n_accepted);

  batch_feeder_options options_;
  batch_feeder_deps deps_;
  std::map<std::string, feed> feeds_;  // batch id -> feed state (feeder thread only)
  uint64_t n_passes_ = 0;
  std::chrono::steady_clock::time_point saved_at_{};
  std::mutex mu_;
  std::condition_variable cv_;
  bool woken_ = false;
  std::atomic<bool> running_{false};
  std::atomic<int64_t> n_published_{0}, n_republished_{0};
  std::thread thread_;
};

}  // namespace agentq::api
