// The worker's job threads (job_pool.h): idle threads on a stack (the warmest first), a queue for
// tasks while none is idle, threads started lazily; one mutex.
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
    for (auto* t : idle_) t->cv.notify_one();
  }
  for (auto& t : threads_) t.join();
}

void job_pool::run(std::function<void()> fn) {
  std::unique_lock lock(mu_);
  if (!idle_.empty()) {
    idle_thread* t = idle_.back();
    idle_.pop_back();
    t->task = std::move(fn);
    // NOTE: notified after the unlock (the woken thread does not block on mu_ at once): t stays
    // valid, a thread returns only once stopping_ is set, by the destructor, never beside run().
    lock.unlock();
    t->cv.notify_one();
    return;
  }
  tasks_.push_back(std::move(fn));
  if (static_cast<int32_t>(threads_.size()) < max_threads_) {
    threads_.emplace_back([this] {
      util::name_thread("aq-job", util::thread_class::throughput);  // per-thread profiles name it; --worker-nice lowers it
      thread_main();
    });
  }
}

int32_t job_pool::n_threads() const {
  std::lock_guard lock(mu_);
  return static_cast<int32_t>(threads_.size());
}

void job_pool::thread_main() {
  idle_thread me;
  std::unique_lock lock(mu_);
  for (;;) {
    std::function<void()> fn;
    if (!tasks_.empty()) {
      fn = std::move(tasks_.front());
      tasks_.pop_front();
    } else if (stopping_) {
      return;
    } else {
      idle_.push_back(&me);
      me.cv.wait(lock, [&] { return me.task || stopping_; });
      if (!me.task) {  // stopping: off the stack before the frame goes
        idle_.erase(std::find(idle_.begin(), idle_.end(), &me));
        return;
      }
      fn = std::move(me.task);
      me.task = nullptr;
    }
    lock.unlock();
    fn();
    fn = nullptr;  // NOTE: the task's captures (the job's context) go before the thread waits again
    lock.lock();
  }
}

}  // namespace agentq::worker
