// The worker's job threads (job_pool.h): a task queue under one mutex, threads started lazily.
#include "worker/job_pool.h"
#include <agentq/thread_class.h>

#include <pthread.h>
#include <algorithm>

namespace agentq::worker {

job_pool::job_pool(int32_t max_threads) : max_threads_(std::max(1, max_threads)) {}

job_pool::~job_pool() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  for (auto& t : threads_) t.join();
}

void job_pool::run(std::function<void()> fn) {
  std::unique_lock lock(mu_);
  tasks_.push_back(std::move(fn));
  // NOTE: idle threads are counted before the queued tasks they will take: start one only when
  // the queue holds more tasks than idle threads to take them.
  if (static_cast<int32_t>(tasks_.size()) > n_idle_ && static_cast<int32_t>(threads_.size()) < max_threads_) {
    threads_.emplace_back([this] {
      util::name_thread("aq-job", util::thread_class::throughput);  // per-thread profiles name it; --worker-nice lowers it
      thread_main();
    });
    return;
  }
  lock.unlock();
  cv_.notify_one();
}

int32_t job_pool::n_threads() const {
  std::lock_guard lock(mu_);
  return static_cast<int32_t>(threads_.size());
}

void job_pool::thread_main() {
  std::unique_lock lock(mu_);
  for (;;) {
    if (tasks_.empty()) {
      if (stopping_) return;
      ++n_idle_;
      cv_.wait(lock, [&] { return stopping_ || !tasks_.empty(); });
      --n_idle_;
      continue;
    }
    auto fn = std::move(tasks_.front());
    tasks_.pop_front();
    lock.unlock();
    fn();
    fn = nullptr;  // NOTE: the task's captures (the job's context) go before the thread waits again
    lock.lock();
  }
}

}  // namespace agentq::worker
