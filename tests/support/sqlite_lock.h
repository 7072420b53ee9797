// Stopping a process that writes a SQLite file at a safe moment. NOTE: a process stopped
// (SIGSTOP) inside a write transaction blocks every writer of the file (SQLite's one-writer
// rule), so pause scenarios stop a worker only when no write lock is held. And the other way round:
// a test that holds the write lock (write_lock_holder) keeps the store's writer waiting, within its
// busy timeout, to see what goes on while a commit cannot land.
#pragma once

#include <sqlite3.h>

#include <chrono>
#include <functional>
#include <string>
#include <thread>

namespace agentq::test {

// Whether a writer could start a transaction on the file right now.
inline bool write_lock_free(const std::string& path) {
  sqlite3* db = nullptr;
  sqlite3_open(path.c_str(), &db);
  sqlite3_busy_timeout(db, 0);
  bool ok = sqlite3_exec(db, "BEGIN IMMEDIATE", nullptr, nullptr, nullptr) == SQLITE_OK;
  if (ok) sqlite3_exec(db, "ROLLBACK", nullptr, nullptr, nullptr);
  sqlite3_close(db);
  return ok;
}

// Holds the file's write lock (an open BEGIN IMMEDIATE) from construction until release() or
// destruction; held() is false if it was not taken within wait_ms.
class write_lock_holder {
 public:
  explicit write_lock_holder(const std::string& path, int wait_ms = 5000) {
    sqlite3_open(path.c_str(), &db_);
    sqlite3_busy_timeout(db_, wait_ms);
    held_ = sqlite3_exec(db_, "BEGIN IMMEDIATE", nullptr, nullptr, nullptr) == SQLITE_OK;
  }
  ~write_lock_holder() {
    release();
    sqlite3_close(db_);
  }
  write_lock_holder(const write_lock_holder&) = delete;
  write_lock_holder& operator=(const write_lock_holder&) = delete;
  bool held() const { return held_; }
  void release() {
    if (held_) sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
    held_ = false;
  }

 private:
  sqlite3* db_ = nullptr;
  bool held_ = false;
};

// pause() the writer, and keep it paused once the file's write lock is free (else resume()
// and retry, up to n_tries times); false if it never was.
inline bool pause_outside_write(const std::string& db_path, const std::function<void()>& pause,
                                const std::function<void()>& resume, int n_tries = 200) {
  for (int i = 0; i < n_tries; ++i) {
    pause();
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    if (write_lock_free(db_path)) return true;
    resume();
    std::this_thread::sleep_for(std::chrono::milliseconds(7));
  }
  return false;
}

}  // namespace agentq::test
