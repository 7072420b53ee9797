// The threads that run the handlers that may block (a write waiting for the store's commit, a Redis
// round trip, a file's validation), apart from the io threads (issue 29).
// NOTE: the io threads are few (one per two cores by default: each wakes once for many connections'
// events), so a handler that blocks one of them stalls every connection it owns; the router
// (router.h, runs_on::pool) hands such a handler here and the connection gets its answer as a
// deferred response (message.h), made on its own io thread as any other.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>

#include "http/message.h"
#include "http/router.h"

namespace agentq::http {

// What the pool is doing now (read by the daemon's /metrics collector; shared, so it outlives the
// pool). NOTE: queued > 0 for long means every thread waits on something slow (a commit, Redis):
// raise --http-blocking-threads or look at what they wait for.
struct blocking_pool_load {
  int32_t n_threads = 0;
  std::atomic<int64_t> n_busy{0};    // handlers running
  std::atomic<int64_t> n_queued{0};  // handed over, not started yet
};

class blocking_pool {
 public:
  explicit blocking_pool(int32_t n_threads);
  ~blocking_pool();  // stop()
  blocking_pool(const blocking_pool&) = delete;
  blocking_pool& operator=(const blocking_pool&) = delete;

  // A deferred response that runs fn(req) on a pool thread (req is moved there) and answers with
  // what it returns (a deferred or streaming response of fn's own is passed on as it is).
  // NOTE: fn must outlive the call (the router's table does).
  response run(request& req, const handler& fn);
  // Let the queued handlers finish, then join the threads; run() afterwards answers 503.
  void stop();
  std::shared_ptr<const blocking_pool_load> load() const;

 private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

}  // namespace agentq::http
