// Persistent thread pool: publish a job by bumping a generation counter; workers
// spin on it for a short while, then sleep on a condition variable.
#include "util/thread_pool.h"
#include <agentq/thread_class.h>

#include <pthread.h>
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
constexpr int k_spin_iters = 4000;
constexpr int k_gen_shift = 48, k_n_shift = 24;
constexpr uint64_t k_field_mask = (uint64_t(1) << 24) - 1;
inline uint64_t gen_of(uint64_t s) { return s >> k_gen_shift; }
}  // namespace

thread_pool::thread_pool(int32_t n_threads) {
  if (n_threads <= 0) n_threads = std::max(1u, std::thread::hardware_concurrency());
  n_threads_ = n_threads;
  workers_.reserve(n_threads_ - 1);
  for (int32_t i = 1; i < n_threads_; ++i) workers_.emplace_back([this] {
    util::name_thread("aq-engine-pool", util::thread_class::throughput);  // per-thread profiles name it; --worker-nice lowers it
    worker_main();
  });
}

thread_pool::~thread_pool() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_.store(true);
    state_.store(((gen_of(state_.load()) + 1) & 0xffff) << k_gen_shift);  // a new generation with no items
  }
  wake_.notify_all();
  for (auto& t : workers_) t.join();
}

// Claim and run chunks of the job whose state was read as s, until it has none left or
// a newer job replaced it.
void thread_pool::work_on(uint64_t s) {
  const uint64_t gen = gen_of(s);
  for (;;) {
    if (gen_of(s) != gen) return;
    const int64_t n = int64_t((s >> k_n_shift) & k_field_mask), next = int64_t(s & k_field_mask);
    if (next >= n) return;
    // NOTE: read before the claim; valid when the claim succeeds, because a job's fields are
    // rewritten only after all its items are done, which needs this claim to finish first.
    const range_fn fn = job_fn_.load(std::memory_order_relaxed);
    void* ctx = job_ctx_.load(std::memory_order_relaxed);
    // NOTE: guided self-scheduling: each claim takes 1/n_threads of what is left (at least
    // the floor), so the first claims are large (few CAS round trips, few restarts of a
    // thread's weight stream and its prefetch) and the last ones small, which keeps a thread
    // from waiting long on another's last chunk (with equal chunks of 1/(4 n_threads) that
    // tail averaged half a chunk, ~6% of a decode matmul at 2 threads). 1/n_threads, not the
    // earlier 1/(2 n_threads): on a Zen 5 host reading 72-79 GB/s, 110M decode Q4_K x1.07,
    // Q8_0 x1.12, F16 x1.02 (paired), 1B Q4_K unchanged at 46 GB/s.
    // Rounded up to whole multiples of min_chunk, so every range starts on one (linear_many's
    // row ranges then start on whole 8-row groups of the _x8 weight layouts).
    const int64_t gran = job_min_chunk_.load(std::memory_order_relaxed);
    const int64_t guided = std::max(job_floor_.load(std::memory_order_relaxed), (n - next + n_threads_ - 1) / n_threads_);
    const int64_t end = std::min(n, next + (guided + gran - 1) / gran * gran);
    if (!state_.compare_exchange_weak(s, s + uint64_t(end - next), std::memory_order_acq_rel, std::memory_order_acquire))
      continue;
    fn(ctx, next, end);
    n_done_.fetch_add(end - next, std::memory_order_release);
    s = state_.load(std::memory_order_acquire);
  }
}

void thread_pool::run(int64_t n, int64_t min_chunk, range_fn fn, void* ctx) {
  if (n_threads_ == 1 || n <= min_chunk || n > int64_t(k_field_mask)) {
    fn(ctx, 0, n);
    return;
  }
  job_fn_.store(fn, std::memory_order_relaxed);
  job_ctx_.store(ctx, std::memory_order_relaxed);
  // Chunk sizes are guided (work_on): never below min_chunk, nor below 1/(16 n_threads) of
  // the job unless the job is that small.
  job_min_chunk_.store(min_chunk, std::memory_order_relaxed);
  job_floor_.store(std::max<int64_t>(min_chunk, (n + 16 * n_threads_ - 1) / (16 * n_threads_)), std::memory_order_relaxed);
  n_done_.store(0, std::memory_order_relaxed);
  uint64_t s;
  {
    // NOTE: publish under the mutex so a worker between its check and its wait cannot miss it.
    std::lock_guard<std::mutex> lock(mutex_);
    s = (((gen_of(state_.load(std::memory_order_relaxed)) + 1) & 0xffff) << k_gen_shift) | (uint64_t(n) << k_n_shift);
    state_.store(s, std::memory_order_release);
  }
  if (n_sleeping_.load(std::memory_order_acquire) > 0) wake_.notify_all();
  work_on(s);
  // Chunks claimed by workers may still be running; spin briefly, then yield the core
  // (on an oversubscribed host the straggler may need it).
  for (int i = 0; n_done_.load(std::memory_order_acquire) != n; ++i) {
    if (i < k_spin_iters) AGENTQ_CPU_RELAX();
    else std::this_thread::yield();
  }
}

void thread_pool::worker_main() {
  uint64_t seen = 0;  // NOTE: generation 0 has no items; any job published later differs
  for (;;) {
    uint64_t s = state_.load(std::memory_order_acquire);
    for (int i = 0; i < k_spin_iters && gen_of(s) == seen; ++i) {
      AGENTQ_CPU_RELAX();
      s = state_.load(std::memory_order_acquire);
    }
    if (gen_of(s) == seen) {
      std::unique_lock<std::mutex> lock(mutex_);
      n_sleeping_.fetch_add(1, std::memory_order_acq_rel);
      wake_.wait(lock, [&] { return gen_of(state_.load(std::memory_order_acquire)) != seen; });
      n_sleeping_.fetch_sub(1, std::memory_order_acq_rel);
      s = state_.load(std::memory_order_acquire);
    }
    seen = gen_of(s);
    if (stop_.load()) return;
    work_on(s);
  }
}

}  // namespace agentq
