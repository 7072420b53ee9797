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
  // Ranges are contiguous chunks claimed in order, shrinking from n / n_threads items
  // to n / (16 * n_threads) (guided), each a multiple of min_chunk items (the last may be
  // shorter), so every range starts at a multiple of min_chunk.
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
  void work_on(uint64_t state);

  int32_t n_threads_ = 1;
  std::vector<std::thread> workers_;

  // The current job. state_ packs [generation:16][n items:24][next unclaimed:24]; a worker
  // claims a chunk by CAS on it, so a claim succeeds only for the job it read, and the
  // caller waits for items done, never for every worker to wake (a preempted worker
  // on a busy host cannot stall the step unless it holds a chunk).
  std::atomic<uint64_t> state_{0};
  std::atomic<range_fn> job_fn_{nullptr};
  std::atomic<void*> job_ctx_{nullptr};
  std::atomic<int64_t> job_min_chunk_{1};  // every range starts at a multiple of it
  std::atomic<int64_t> job_floor_{1};      // the smallest guided chunk
  std::atomic<int64_t> n_done_{0};      // items of the current job finished
  std::atomic<bool> stop_{false};

  std::mutex mutex_;
  std::condition_variable wake_;
  std::atomic<int32_t> n_sleeping_{0};
};

}  // namespace agentq
