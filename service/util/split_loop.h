// A loop split over two threads: the caller's and one helper thread kept for the object's life
// (issue 29: a Batch file's lines are mapped by both halves of a chunk at once).
#pragma once

#include <condition_variable>
#include <cstddef>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>

namespace agentq::util {

class split_loop {
 public:
  using range_fn = std::function<void(size_t begin, size_t end)>;
  // The helper, named thread_name (util::name_thread, the latency class), starts at the first run()
  // that splits, so a loop that never does costs no thread. NOTE: thread_name must outlive the
  // helper's start: a string literal.
  explicit split_loop(const char* thread_name) : thread_name_(thread_name) {}
  ~split_loop();  // stops and joins the helper, if it started
  split_loop(const split_loop&) = delete;
  split_loop& operator=(const split_loop&) = delete;

  // fn(0, n / 2) on the helper and fn(n / 2, n) on the caller, at the same time; returns when both
  // are done, rethrowing what the helper's half threw. fn must be safe on two disjoint ranges at once.
  // NOTE: under min_split items run on the caller alone: a hand-off costs a wake (~20-40 us).
  void run(size_t n, const range_fn& fn, size_t min_split = 64);
  // The helper thread's CPU time so far, seconds (0 before it started).
  double helper_cpu_s();

 private:
  void loop();

  const char* thread_name_;
  std::mutex mu_;
  std::condition_variable cv_;
  const range_fn* fn_ = nullptr;  // set: the helper has fn(0, end_) to run
  size_t end_ = 0;
  std::exception_ptr error_;
  bool stop_ = false;
  std::thread thread_;  // started by the first run() that splits
};

}  // namespace agentq::util
