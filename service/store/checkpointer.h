// The WAL checkpointer: copies the job store's write-ahead log back into the database file on its
// own thread and connection, so the store's writer never runs a checkpoint inside a commit (issue 29:
// SQLite's auto-checkpoint ran in the committing thread, 6-20 ms of page copies and an fsync every
// ~1,000 WAL pages, during which every submit waited on the writer).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

struct sqlite3;

namespace agentq::store {

class sqlite_db;

class wal_checkpointer {
 public:
  // Opens its own connection to path (throws sqlite_error) and starts the thread.
  // n_pages: the WAL size that asks for a checkpoint (SQLite's auto-checkpoint default: 1000).
  wal_checkpointer(const std::string& path, int32_t busy_timeout_ms, int32_t n_pages = 1000);
  ~wal_checkpointer();  // stops the thread; a pass in progress finishes
  wal_checkpointer(const wal_checkpointer&) = delete;
  wal_checkpointer& operator=(const wal_checkpointer&) = delete;

  // Replace writer's auto-checkpoint with this checkpointer: after each commit on writer, a WAL of
  // n_pages or more wakes the thread (a PASSIVE checkpoint: it never blocks the writer or readers).
  // NOTE: the WAL restarts from its beginning only once every frame is copied, and frames committed
  // while the thread copies are not; so when no more than about two commits' frames (at least
  // k_tail_frames) are left the writer copies that tail itself (copy_tail: a few pages and the
  // database file's fsync, instead of the whole log), and its next transaction restarts the WAL. As a
  // backstop a WAL of 16 x n_pages (readers pinning old frames) is checkpointed by the writer inside
  // its commit, as SQLite would have done.
  void attach(sqlite_db& writer);
  // NOTE: 512, not 64 as until session 24: at 1,000 submits/s a commit adds ~20 frames, so frames
  // committed during a pass soon exceeded 64 and every commit or two asked for another pass — tens of
  // passes a second, each with the database file's fsync beside the writer's WAL flushes on a disk
  // whose flush is the commit's cost, and the slowest submits overlapped those passes (docs/queue_perf.md
  // "Session 24"). A tail of up to 512 frames (2 MiB) is still one fsync and is copied only while no
  // submit waits.
  static constexpr int k_tail_frames = 512;

  // Copy the tail the writer's last commit left, if it left one (see attach); on the writer's thread,
  // outside a transaction. submit_waits: a latency op is queued; then the tail is skipped unless the
  // WAL holds 3 x n_pages frames or more. true = copied.
  // NOTE: not inside the commit (the WAL hook) as until session 21: there its 1.6-2.7 ms (p50; up
  // to 20 ms) came before the group's answers and before the next group; the writer now calls this
  // after answering its group, and defers it while submits wait (session 22). A skipped tail is
  // wanted again after the next commit or the thread's next pass; the bound keeps a steady stream of
  // submits from growing the WAL until the backstop (a whole checkpoint inside a commit).
  bool copy_tail(sqlite_db& writer, bool submit_waits);

  int64_t n_passes() const { return n_passes_.load(); }          // checkpoints this thread ran
  int64_t n_tails() const { return n_tails_.load(); }            // tails the writer copied
  int64_t n_backstop() const { return n_backstop_.load(); }      // whole checkpoints the writer ran

 private:
  static int on_commit(void* self, sqlite3* db, const char* name, int n_pages);
  void run();

  std::unique_ptr<sqlite_db> db_;
  const int32_t n_pages_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool wanted_ = false;    // guarded by mu_: a commit asked for a pass since the last one began
  bool stopping_ = false;  // guarded by mu_
  std::atomic<bool> pending_{false};  // a pass is asked for or running: the writer notifies only on a change
  std::atomic<int> backfilled_{0};    // WAL frames copied as of the last pass (0 after a restart)
  int last_frames_ = 0;               // the writer's: WAL frames at its last commit (a drop = restarted)
  bool tail_wanted_ = false;          // the writer's: its last commit left a tail to copy
  std::atomic<int64_t> n_passes_{0}, n_backstop_{0}, n_tails_{0};
  std::thread thread_;
};

}  // namespace agentq::store
