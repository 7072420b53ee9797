// A persistent fork-join thread pool for the forward pass: parallel_for splits
// [0, n) into chunks that the caller and the workers claim. Workers spin briefly
// after each job (decode steps arrive back to back) and then sleep.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

namespace agentq {

class thread_pool {
 public:
  // n_threads <= 0: one per hardware core. The calling thread counts as one.
  explicit thread_pool(int32_t n_threads = 0);
  ~thread_pool();
  thread_pool(const thread_pool&) = delete;
  thread_pool& operator=(const thread_pool&) = delete;

  int32_t n_threads() const { return n_threads_; }

  // Run fn(begin, end) over disjoint ranges covering [0, n) and return when all are done.
  // Ranges are contiguous chunks of about n / (4 * n_threads) items (at least min_chunk).
  // NOTE: which thread runs which range varies; callers must make each item's result
  // independent of the split (true for per-row work), which keeps outputs deterministic.
  // Not reentrant: one parallel_for at a time, and fn must not call parallel_for.
  template <typename F>
  void parallel_for(int64_t n, F&& fn, int64_t min_chunk = 1) {
    if (n <= 0) return;
    auto call = [](void* ctx, int64_t b, int64_t e) { (*static_cast<F*>(ctx))(b, e); };
    run(n, min_chunk, call, const_cast<void*>(static_cast<const void*>(&fn)));
  }

 private:
  using range_fn = void (*)(void* ctx, int64_t begin, int64_t end);
  void run(int64_t n, int64_t min_chunk, range_fn fn, void* ctx);
  void worker_main();
  void work_on_current_job();

  int32_t n_threads_ = 1;
  std::vector<std::thread> workers_;

  // The current job; published by bumping generation_.
  range_fn job_fn_ = nullptr;
  void* job_ctx_ = nullptr;
  int64_t job_n_ = 0;
  int64_t job_chunk_ = 1;
  std::atomic<int64_t> next_{0};        // next unclaimed item
  std::atomic<int32_t> n_active_{0};    // workers still inside the current job
  std::atomic<uint64_t> generation_{0}; // bumped once per job
  std::atomic<bool> stop_{false};

  std::mutex mutex_;
  std::condition_variable wake_;
  std::atomic<int32_t> n_sleeping_{0};
};

}  // namespace agentq
