// The WAL checkpointer (see checkpointer.h): a PASSIVE checkpoint on its own connection whenever
// the writer's commit leaves the WAL at n_pages or more.
#include "store/checkpointer.h"

#include <pthread.h>
#include <algorithm>
#include <spdlog/spdlog.h>
#include <sqlite3.h>

#include "store/sqlite.h"
#include <agentq/thread_class.h>

namespace agentq::store {

wal_checkpointer::wal_checkpointer(const std::string& path, int32_t busy_timeout_ms, int32_t n_pages)
    : db_(std::make_unique<sqlite_db>(path, busy_timeout_ms)), n_pages_(n_pages) {
  db_->exec("PRAGMA journal_mode=WAL");
  db_->exec("PRAGMA synchronous=FULL");  // NOTE: the checkpoint fsyncs the database file before the WAL may restart
  thread_ = std::thread([this] {
    util::name_thread("aq-db-ckpt");  // per-thread profiles name it
    run();
  });
}

wal_checkpointer::~wal_checkpointer() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void wal_checkpointer::attach(sqlite_db& writer) {
  // NOTE: sqlite3_wal_hook replaces the hook sqlite3_wal_autocheckpoint installed: the writer's
  // connection no longer checkpoints on its own (but for the backstop in on_commit).
  sqlite3_wal_hook(writer.handle(), &wal_checkpointer::on_commit, this);
}

// Runs on the writer's thread after each commit, its write lock released; n_frames: frames in the WAL.
int wal_checkpointer::on_commit(void* arg, sqlite3* db, const char* name, int n_frames) {
  auto* self = static_cast<wal_checkpointer*>(arg);
  // The WAL restarted from its beginning (a pass that ended just before may have stored its count late).
  const bool restarted = n_frames < self->last_frames_ || self->backfilled_.load() > n_frames;
  if (restarted) self->backfilled_ = 0;
  const int n_added = restarted ? n_frames : n_frames - self->last_frames_;  // by this commit
  self->last_frames_ = n_frames;
  self->tail_wanted_ = false;
  if (n_frames < self->n_pages_) return SQLITE_OK;
  const bool busy = self->pending_.load();
  // NOTE: the tail is what about two commits add (at least k_tail_frames): the frames committed
  // while the last pass ran, which a pass of its own would again race the next commits for.
  const int tail = std::max(k_tail_frames, 2 * n_added);
  if (n_frames >= 16 * self->n_pages_) {
    int n_log = 0, n_done = 0;
    if (sqlite3_wal_checkpoint_v2(db, name, SQLITE_CHECKPOINT_PASSIVE, &n_log, &n_done) == SQLITE_OK && n_done >= 0)
      self->backfilled_ = n_done;
    self->n_backstop_++;
    return SQLITE_OK;
  }
  if (!busy && n_frames - self->backfilled_.load() <= tail) {
    self->tail_wanted_ = true;
    return SQLITE_OK;
  }
  // NOTE: at most one notify per pass: while a pass is asked for or running, commits add nothing.
  if (busy || self->pending_.exchange(true)) return SQLITE_OK;
  {
    std::lock_guard lock(self->mu_);
    self->wanted_ = true;
  }
  self->cv_.notify_one();
  return SQLITE_OK;
}

bool wal_checkpointer::copy_tail(sqlite_db& writer, bool submit_waits) {
  if (!tail_wanted_ || (submit_waits && last_frames_ < 3 * n_pages_)) return false;
  tail_wanted_ = false;
  int n_log = 0, n_done = 0;
  if (sqlite3_wal_checkpoint_v2(writer.handle(), "main", SQLITE_CHECKPOINT_PASSIVE, &n_log, &n_done) == SQLITE_OK &&
      n_done >= 0)
    backfilled_ = n_done;
  n_tails_++;
  return true;
}

void wal_checkpointer::run() {
  for (;;) {
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [&] { return stopping_ || wanted_; });
      if (stopping_) return;
      wanted_ = false;
    }
    int n_log = 0, n_done = 0;
    int rc = sqlite3_wal_checkpoint_v2(db_->handle(), "main", SQLITE_CHECKPOINT_PASSIVE, &n_log, &n_done);
    n_passes_++;
    if (rc == SQLITE_OK && n_done >= 0) backfilled_ = n_done;
    if (rc != SQLITE_OK && rc != SQLITE_BUSY)
      spdlog::warn("store: WAL checkpoint failed: {}", sqlite3_errmsg(db_->handle()));
    pending_ = false;  // NOTE: after backfilled_: the writer's next commit sees this pass's result
  }
}

}  // namespace agentq::store
