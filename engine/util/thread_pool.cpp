// Persistent thread pool: publish a job by bumping a generation counter; workers
// spin on it for a short while, then sleep on a condition variable.
#include "util/thread_pool.h"

#include <algorithm>
#include <chrono>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define AGENTQ_CPU_RELAX() _mm_pause()
#else
#define AGENTQ_CPU_RELAX() ((void)0)
#endif

namespace agentq {

namespace {
// About 50-100 us of spinning before a worker sleeps: long enough to bridge the gap
// between a decode step's matmuls, short enough not to burn a core when idle.
constexpr int k_spin_iters = 20000;
}  // namespace

thread_pool::thread_pool(int32_t n_threads) {
  if (n_threads <= 0) n_threads = std::max(1u, std::thread::hardware_concurrency());
  n_threads_ = n_threads;
  workers_.reserve(n_threads_ - 1);
  for (int32_t i = 1; i < n_threads_; ++i) workers_.emplace_back([this] { worker_main(); });
}

thread_pool::~thread_pool() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_.store(true);
    generation_.fetch_add(1);
  }
  wake_.notify_all();
  for (auto& t : workers_) t.join();
}

void thread_pool::work_on_current_job() {
  for (;;) {
    int64_t b = next_.fetch_add(job_chunk_, std::memory_order_relaxed);
    if (b >= job_n_) break;
    job_fn_(job_ctx_, b, std::min(job_n_, b + job_chunk_));
  }
}

void thread_pool::run(int64_t n, int64_t min_chunk, range_fn fn, void* ctx) {
  if (n_threads_ == 1 || n <= min_chunk) {
    fn(ctx, 0, n);
    return;
  }
  job_fn_ = fn;
  job_ctx_ = ctx;
  job_n_ = n;
  job_chunk_ = std::max<int64_t>(min_chunk, (n + 4 * n_threads_ - 1) / (4 * n_threads_));
  next_.store(0, std::memory_order_relaxed);
  n_active_.store(n_threads_ - 1, std::memory_order_relaxed);
  {
    // NOTE: bump under the mutex so a worker between its check and its wait cannot miss it.
    std::lock_guard<std::mutex> lock(mutex_);
    generation_.fetch_add(1, std::memory_order_release);
  }
  if (n_sleeping_.load(std::memory_order_acquire) > 0) wake_.notify_all();
  work_on_current_job();
  while (n_active_.load(std::memory_order_acquire) != 0) AGENTQ_CPU_RELAX();
}

void thread_pool::worker_main() {
  uint64_t seen = 0;  // NOTE: not a load: a job may be published before this thread first runs
  for (;;) {
    uint64_t g = seen;
    for (int i = 0; i < k_spin_iters; ++i) {
      g = generation_.load(std::memory_order_acquire);
      if (g != seen) break;
      AGENTQ_CPU_RELAX();
    }
    if (g == seen) {
      std::unique_lock<std::mutex> lock(mutex_);
      n_sleeping_.fetch_add(1, std::memory_order_acq_rel);
      wake_.wait(lock, [&] { return generation_.load(std::memory_order_acquire) != seen; });
      n_sleeping_.fetch_sub(1, std::memory_order_acq_rel);
      g = generation_.load(std::memory_order_acquire);
    }
    seen = g;
    if (stop_.load()) return;
    work_on_current_job();
    n_active_.fetch_sub(1, std::memory_order_acq_rel);
  }
}

}  // namespace agentq
