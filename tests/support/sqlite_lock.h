// Stopping a process that writes a SQLite file at a safe moment. NOTE: a process stopped
// (SIGSTOP) inside a write transaction blocks every writer of the file (SQLite's one-writer
// rule), so pause scenarios stop a worker only when no write lock is held.
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
