// The threads that run a worker's job loops: started on demand up to a bound and kept, so a
// claimed job costs a hand-off, not a thread (a clone, a fresh stack, TLS set-up and an unmap).
// NOTE: a task goes to the thread that went idle last (a stack of idle threads, each waiting on its
// own condition variable). A shared queue under one condition variable wakes the longest-idle
// thread, the coldest: its stack and malloc's per-thread cache were evicted while ~16 others ran
// (issue 29: 13 % of the job threads' samples were malloc's first load of a cold tcache entry).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace agentq::worker {

class job_pool {
 public:
  // max_threads bounds the threads started (the worker's max_jobs: one loop per held job).
  explicit job_pool(int32_t max_threads);
  ~job_pool();  // waits for the tasks queued and running, then joins every thread
  job_pool(const job_pool&) = delete;
  job_pool& operator=(const job_pool&) = delete;

  // Run fn on an idle thread, or a new one while fewer than max_threads exist; else it waits for
  // the first thread free. NOTE: the worker never holds more than max_jobs jobs, so nothing waits.
  void run(std::function<void()> fn);
  int32_t n_threads() const;

 private:
  struct idle_thread {  // lives on its thread's stack while the thread exists
    std::condition_variable cv;
    std::function<void()> task;  // handed over by run(), under mu_
  };
  void thread_main();

  const int32_t max_threads_;
  mutable std::mutex mu_;
  std::deque<std::function<void()>> tasks_;  // only while no thread is idle
  std::vector<idle_thread*> idle_;           // the last to go idle at the back
  std::vector<std::thread> threads_;
  bool stopping_ = false;
};

}  // namespace agentq::worker
