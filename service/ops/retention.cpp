// The retention sweeper and the store's space metrics (see retention.h).
#include "ops/retention.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <filesystem>
#include <mutex>
#include <thread>

#include "metrics/registry.h"
#include "store/store.h"

namespace agentq::ops {

namespace fs = std::filesystem;

void count_deleted(const std::string& reason, int64_t n) {
  static auto& deleted = metrics::global().counter_family(
      "agentq_jobs_deleted_total", "Jobs made tombstones (content deleted), by reason: expired, unstored, request, tenant.",
      {"reason"});
  if (n > 0) deleted.with({reason}).inc(double(n));
}

namespace {
// Bytes of the regular files in dir; with max_age_ms > 0, removes files last written longer ago
// than that (wall clock) and returns the bytes removed.
int64_t dir_bytes(const std::string& dir, int64_t max_age_ms = 0) {
  int64_t n = 0;
  std::error_code ec;
  if (dir.empty() || !fs::is_directory(dir, ec)) return 0;
  for (const auto& de : fs::directory_iterator(dir, ec)) {
    if (!de.is_regular_file(ec)) continue;
    auto size = de.file_size(ec);
    if (ec) continue;
    if (max_age_ms > 0) {
      auto t = fs::last_write_time(de.path(), ec);
      if (ec) continue;
      auto age = std::chrono::duration_cast<std::chrono::milliseconds>(fs::file_time_type::clock::now() - t).count();
      if (age > max_age_ms && fs::remove(de.path(), ec)) n += int64_t(size);
    } else {
      n += int64_t(size);
    }
  }
  return n;
}
}  // namespace

struct retention::state {
  retention_options options;
  store::store& st;
  std::mutex mu;
  std::condition_variable cv;
  bool stopping = false, running = false, deleted_elsewhere = false;
  std::thread thread;
  std::atomic<int64_t> n_expired{0}, n_unstored{0}, n_spill_removed{0}, n_pages_reclaimed{0};
  std::atomic<int64_t> last_sweep_ms{0};
  std::atomic<bool> sweeping{false};
  state(retention_options o, store::store& s) : options(std::move(o)), st(s) {}

  // Wait between two write ops: at least batch_pause, and as long as the last op took, so deletion
  // holds the store's single writer at most half the time (API writes queue behind it).
  void pause(std::chrono::steady_clock::duration last_op = {}) {
    std::unique_lock lock(mu);
    cv.wait_for(lock, std::max<std::chrono::steady_clock::duration>(options.batch_pause, last_op),
                [this] { return stopping; });
  }

  // Delete what the lister yields, batch by batch, until it yields nothing (or stop).
  template <class L>
  int64_t drain(L list, const char* reason, std::atomic<int64_t>& total) {
    int64_t n = 0;
    for (;;) {
      {
        std::lock_guard lock(mu);
        if (stopping) break;
      }
      auto t0 = std::chrono::steady_clock::now();
      auto ids = list();
      if (ids.empty()) break;
      int64_t got = st.delete_jobs(std::move(ids)).get();
      auto took = std::chrono::steady_clock::now() - t0;
      if (got <= 0) break;  // a write failure (logged by the store) or a race: next sweep
      n += got;
      total += got;
      count_deleted(reason, got);
      pause(took);
    }
    return n;
  }

  int64_t sweep() {
    sweeping = true;
    int64_t n = drain([this] { return st.list_unstored_done(options.batch_jobs); }, "unstored", n_unstored);
    if (options.retention_ms > 0)
      n += drain([this] { return st.list_expired(options.retention_ms, options.batch_jobs); }, "expired", n_expired);
    if (options.retention_ms > 0 && options.sweep_more) {
      int64_t more = options.sweep_more(st.now() - options.retention_ms);
      if (more > 0) spdlog::info("retention: {} finished batches deleted with their output files", more);
    }
    if (options.retention_ms > 0 && !options.spill_dir.empty()) {
      // NOTE: spill files hold KV by token prefix, not by job; one older than the retention period
      // belongs to no job that may still be read (a crash's orphan or a long-expired wait).
      int64_t freed = dir_bytes(options.spill_dir, options.retention_ms);
      if (freed > 0) n_spill_removed += freed;
    }
    bool elsewhere;
    {
      std::lock_guard lock(mu);
      elsewhere = deleted_elsewhere;
      deleted_elsewhere = false;
    }
    if (n > 0 || elsewhere) {
      // Give free pages back in small steps, then fold the WAL (which still holds the deleted
      // content's old page images) into the file and truncate it.
      for (int i = 0; i < 100000; ++i) {
        auto t0 = std::chrono::steady_clock::now();
        int64_t got = st.reclaim_space(options.vacuum_pages).get();
        if (got <= 0) break;
        n_pages_reclaimed += got;
        pause(std::chrono::steady_clock::now() - t0);
      }
      if (!st.checkpoint()) spdlog::debug("retention: WAL checkpoint incomplete (readers); next sweep");
    }
    last_sweep_ms = st.now();
    sweeping = false;
    if (n > 0) spdlog::info("retention: {} jobs deleted", n);
    return n;
  }
};

retention::retention(retention_options options, store::store& st, metrics::registry& reg)
    : state_(std::make_shared<state>(std::move(options), st)) {
  reg.add_collector([s = state_](std::vector<metrics::family>& out) {
    auto add = [&out](const char* name, const char* help, metrics::metric_type type, double v) {
      out.push_back(metrics::value_family(name, help, type, v));
    };
    using metrics::metric_type;
    auto sp = s->st.space();
    add("agentq_db_bytes", "Size of the job store's SQLite file.", metric_type::gauge, double(sp.db_bytes));
    add("agentq_db_wal_bytes", "Size of the job store's write-ahead log.", metric_type::gauge, double(sp.wal_bytes));
    add("agentq_db_free_pages", "Free pages in the SQLite file (reclaimed by incremental vacuum).", metric_type::gauge,
        double(sp.n_free_pages));
    add("agentq_spill_bytes", "Bytes of KV spill files in the data directory.", metric_type::gauge,
        double(dir_bytes(s->options.spill_dir)));
    add("agentq_retention_sweeping", "1 while a retention sweep is deleting.", metric_type::gauge,
        s->sweeping ? 1.0 : 0.0);
    add("agentq_retention_last_sweep_timestamp_seconds", "When the last retention sweep ended.", metric_type::gauge,
        double(s->last_sweep_ms) / 1000.0);
    add("agentq_retention_reclaimed_pages_total", "Pages given back to the file system by incremental vacuum.",
        metric_type::counter, double(s->n_pages_reclaimed));
    add("agentq_retention_spill_removed_bytes_total", "Bytes of spill files older than the retention period removed.",
        metric_type::counter, double(s->n_spill_removed));
  });
}

retention::~retention() { stop(); }

void retention::start() {
  auto s = state_;
  std::lock_guard lock(s->mu);
  if (s->running) return;
  s->running = true;
  s->thread = std::thread([s] {
    std::unique_lock lock(s->mu);
    while (!s->stopping) {
      lock.unlock();
      try {
        s->sweep();
      } catch (const std::exception& e) {
        spdlog::error("retention: sweep failed: {}", e.what());
      }
      lock.lock();
      s->cv.wait_for(lock, s->options.interval, [&] { return s->stopping || s->deleted_elsewhere; });
    }
  });
}

void retention::stop() {
  auto s = state_;
  {
    std::lock_guard lock(s->mu);
    s->stopping = true;
  }
  s->cv.notify_all();
  if (s->thread.joinable()) s->thread.join();
}

int64_t retention::sweep_once() { return state_->sweep(); }

void retention::notify_deleted() {
  {
    std::lock_guard lock(state_->mu);
    state_->deleted_elsewhere = true;
  }
  state_->cv.notify_all();
}

}  // namespace agentq::ops
