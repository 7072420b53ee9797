// Store-private: a SQLite connection with a prepared-statement cache and the store's clock,
// shared by store.cpp (the job state machine) and deletion.cpp (tombstones, retention, space).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>

#include "store/sqlite.h"

namespace agentq::store {

class conn {
 public:
  // NOTE: secure_delete zeroes freed content in the pages SQLite writes, so a deleted job's
  // text leaves the file (and, after a checkpoint, the WAL) instead of lingering in free pages.
  // NOTE: temp_store=MEMORY keeps the statement sub-journal of the writer's per-op savepoints in
  // memory: on disk it spilled past 64 KiB into a temp file, ~17 pwrite64 calls per submitted job
  // (issue 29). Nothing durable lives there: a crash rolls the whole transaction back anyway.
  conn(const std::string& path, int32_t busy_ms, std::function<int64_t()> clock)
      : db(path, busy_ms), clock_(std::move(clock)) {
    db.exec("PRAGMA journal_mode=WAL");
    db.exec("PRAGMA synchronous=FULL");
    db.exec("PRAGMA foreign_keys=ON");
    db.exec("PRAGMA secure_delete=ON");
    db.exec("PRAGMA temp_store=MEMORY");
  }
  sqlite_stmt& stmt(const std::string& sql) {
    auto it = cache_.find(sql);
    if (it == cache_.end()) it = cache_.emplace(sql, std::make_unique<sqlite_stmt>(db.prepare(sql))).first;
    it->second->reset();
    return *it->second;
  }
  // End every statement so the connection holds no read snapshot between uses.
  void reset_all() {
    for (auto& [sql, st] : cache_) st->reset();
  }
  int64_t now() const { return clock_(); }  // the store's clock (ms since the epoch)
  // What the writer's current transaction wrote, for waking only the waiters it concerns
  // (store::wait_events); set by the insert helpers, cleared per transaction.
  static constexpr uint32_t k_wrote_event = 1, k_wrote_webhook_status = 2, k_wrote_outbox = 4;
  uint32_t wrote = 0;
  sqlite_db db;

 private:
  std::function<int64_t()> clock_;
  std::unordered_map<std::string, std::unique_ptr<sqlite_stmt>> cache_;
};

}  // namespace agentq::store
