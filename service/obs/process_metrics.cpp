// Store and Redis error counters (see process_metrics.h).
#include "obs/process_metrics.h"

#include <atomic>
#include <condition_variable>
#include <mutex>

#include "queue/queue.h"
#include "store/store.h"

namespace agentq::obs {

struct process_metrics::state {
  std::atomic<double> sqlite_errors{0}, redis_errors{0}, redis_reconnects{0};
  std::mutex mu;
  std::condition_variable cv;
  bool stopping = false;
};

process_metrics::process_metrics(metrics::registry& reg, store::store& st, queue::queue& q)
    : process_metrics(reg, &st, q) {}

process_metrics::process_metrics(metrics::registry& reg, store::store* st, queue::queue& q)
    : state_(std::make_shared<state>()) {
  auto poll = [s = state_.get(), st, &q] {
    if (st) s->sqlite_errors = double(st->stats().n_write_errors);
    auto qs = q.stats();
    s->redis_errors = double(qs.redis.n_errors + qs.redis.n_io_errors);
    s->redis_reconnects = double(qs.redis.n_reconnects);
  };
  poll();
  poller_ = std::thread([s = state_.get(), poll] {
    std::unique_lock lock(s->mu);
    while (!s->cv.wait_for(lock, std::chrono::seconds(1), [s] { return s->stopping; })) {
      lock.unlock();
      poll();
      lock.lock();
    }
  });
  reg.add_collector([s = state_](std::vector<metrics::family>& out) {
    auto counter = [&out](const char* name, const char* help, double v) {
      out.push_back(metrics::value_family(name, help, metrics::metric_type::counter, v));
    };
    counter("agentq_sqlite_errors_total", "Failed SQLite write transactions of the job store.", s->sqlite_errors);
    counter("agentq_redis_errors_total", "Redis commands that failed (error replies and I/O errors).", s->redis_errors);
    counter("agentq_redis_reconnects_total", "Reconnections to Redis.", s->redis_reconnects);
  });
}

process_metrics::~process_metrics() {
  {
    std::lock_guard lock(state_->mu);
    state_->stopping = true;
  }
  state_->cv.notify_all();
  poller_.join();
}

}  // namespace agentq::obs
