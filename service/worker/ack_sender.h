// The Redis acks of a worker's job threads, sent by one thread in pipelines (issue 29): a job thread
// hands its entry over once what ends its run here is durable, and goes on. Before, each job thread
// sent its own XACK script on the one control connection, waiting for the mutex behind the others'
// round trips and then for its reply: ~1.6 of a one-request job's ~4.8 context switches on the job
// threads (docs/queue_perf.md "Session 25 (branch `queue11b`)").
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "queue/queue.h"

namespace agentq::worker {

struct ack_sender_stats {
  int64_t n_acks = 0, n_batches = 0;  // entries sent; pipelines (round trips) they took
};

class ack_sender {
 public:
  // ack: sends a batch of entries' acks in one pipeline (queue::ack_many). A failed ack leaves its
  // entry pending: it is reclaimed, and its claim finds the job over and acks it then.
  explicit ack_sender(std::function<void(const std::vector<queue::delivery>&)> ack, int32_t max_batch = 64);
  ~ack_sender();  // sends what is queued, then joins
  ack_sender(const ack_sender&) = delete;
  ack_sender& operator=(const ack_sender&) = delete;

  // Queue d's ack; never waits for Redis. NOTE: the caller's durable write that ends the entry's
  // run (the job's end, release, requires_action) must have returned ok first, as for a direct ack.
  void post(const queue::delivery& d);
  // Blocks until every ack posted before this call has been sent (tests; shutdown uses the destructor).
  void flush();
  ack_sender_stats stats() const;

 private:
  void loop();

  std::function<void(const std::vector<queue::delivery>&)> ack_;
  int32_t max_batch_;
  mutable std::mutex mu_;
  std::condition_variable cv_;       // the thread waits here for work
  std::condition_variable sent_cv_;  // flush() waits here
  std::vector<queue::delivery> queue_;
  bool idle_ = false;  // the thread waits on cv_: only then does a post notify it (not once per ack)
  bool stopping_ = false;
  int64_t n_posted_ = 0, n_sent_ = 0, n_batches_ = 0;
  std::thread thread_;  // NOTE: last: started once the rest is constructed
};

}  // namespace agentq::worker
