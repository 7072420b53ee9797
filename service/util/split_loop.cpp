// A loop split over two threads (see split_loop.h).
#include "util/split_loop.h"

#include <pthread.h>
#include <time.h>

#include "agentq/thread_class.h"

namespace agentq::util {

split_loop::~split_loop() {
  if (!thread_.joinable()) return;
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void split_loop::loop() {
  name_thread(thread_name_);
  std::unique_lock lock(mu_);
  for (;;) {
    cv_.wait(lock, [&] { return stop_ || fn_ != nullptr; });
    if (fn_ == nullptr) return;  // stopped with nothing to run
    const range_fn* fn = fn_;
    const size_t end = end_;
    lock.unlock();
    std::exception_ptr error;
    try {
      (*fn)(0, end);
    } catch (...) {
      error = std::current_exception();
    }
    lock.lock();
    error_ = error;
    fn_ = nullptr;
    cv_.notify_all();
  }
}

void split_loop::run(size_t n, const range_fn& fn, size_t min_split) {
  if (n < min_split) {
    fn(0, n);
    return;
  }
  const size_t half = n / 2;
  if (!thread_.joinable()) thread_ = std::thread([this] { loop(); });
  {
    std::lock_guard lock(mu_);
    fn_ = &fn;
    end_ = half;
    error_ = nullptr;
  }
  cv_.notify_all();
  std::exception_ptr mine;
  try {
    fn(half, n);
  } catch (...) {
    mine = std::current_exception();
  }
  std::exception_ptr theirs;
  {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return fn_ == nullptr; });  // the helper's half is done: fn may go
    theirs = error_;
  }
  if (mine) std::rethrow_exception(mine);
  if (theirs) std::rethrow_exception(theirs);
}

double split_loop::helper_cpu_s() {
  clockid_t id;
  timespec ts{};
  if (!thread_.joinable() || pthread_getcpuclockid(thread_.native_handle(), &id) != 0 ||
      clock_gettime(id, &ts) != 0)
    return 0;
  return double(ts.tv_sec) + double(ts.tv_nsec) / 1e9;
}

}  // namespace agentq::util
