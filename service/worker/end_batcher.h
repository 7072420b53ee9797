// The ends of a worker's batch-class jobs, committed in groups (issue 29): the job threads that reach
// their end within a few milliseconds of each other share one SQLite transaction (one fsync:
// store::commit_steps) and one pipelined Redis round trip for their acks (queue::ack_many), instead
// of a transaction and an ack round trip each. Interactive classes never wait here.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <future>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "queue/queue.h"
#include "store/store.h"

namespace agentq::worker {

struct end_batcher_options {
  int32_t max_group = 64;  // job ends per transaction at most
  // How long the first end of a group waits for others. NOTE: batch jobs have a 24 h completion
  // window; a few ms of latency buys one commit and one ack round trip for the whole group.
  std::chrono::microseconds linger{5000};
};

struct end_batcher_deps {
  // Writes the group's steps (control_plane::commit_steps): answers in order.
  std::function<std::vector<store::write_status>(std::vector<store::step_item>)> commit;
  // Acks the deliveries of the jobs written ok (queue::ack_many).
  std::function<void(const std::vector<queue::delivery>&)> ack;
  // Jobs the worker holds that have not ended yet (waiting here included): a group flushes at once
  // when every one of them is waiting here, since no other end can come. Empty = linger only.
  std::function<int32_t()> n_running;
  // Before a job's ack (util/fault.h "before_xack", matched against the subject); may be empty.
  std::function<void(const std::string& subject)> before_ack;
};

struct end_batcher_stats {
  int64_t n_groups = 0, n_ends = 0;
};

class end_batcher {
 public:
  end_batcher(end_batcher_options options, end_batcher_deps deps);
  ~end_batcher();  // writes what is queued, then joins
  end_batcher(const end_batcher&) = delete;
  end_batcher& operator=(const end_batcher&) = delete;

  // Commit one job's last step with the group it joins; blocks until that group's transaction is
  // done. ok: written and its entry acked (or the ack failed: the entry stays pending, is reclaimed,
  // and its claim finds the job over). Anything else: nothing written for this job, nothing acked.
  store::write_status commit_end(store::step_item item, const queue::delivery& delivery, std::string fault_subject);
  // The same without waiting: done gets the answer on this batcher's thread once the group's
  // transaction and acks are done (it must be quick: the next group waits for it).
  void commit_end_async(store::step_item item, const queue::delivery& delivery, std::string fault_subject,
                        std::function<void(store::write_status)> done);
  end_batcher_stats stats() const;

 private:
  struct pending {
    store::step_item item;
    queue::delivery delivery;
    std::string fault_subject;
    std::function<void(store::write_status)> done;
  };
  void loop();
  void flush(std::vector<pending>& group);

  end_batcher_options options_;
  end_batcher_deps deps_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<pending> queue_;
  std::chrono::steady_clock::time_point first_at_{};  // when queue_'s oldest arrived
  bool stopping_ = false;
  int64_t n_groups_ = 0, n_ends_ = 0;
  std::thread thread_;  // NOTE: last: started once the rest is constructed
};

}  // namespace agentq::worker
