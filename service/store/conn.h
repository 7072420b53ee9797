// Store-private: a SQLite connection with a prepared-statement cache and the store's clock,
// shared by store.cpp (the job state machine) and deletion.cpp (tombstones, retention, space).
#pragma once

#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "store/sqlite.h"

namespace agentq::store {

class conn {
 public:
  // NOTE: secure_delete zeroes freed content in the pages SQLite writes, so a deleted job's
  // text leaves the file (and, after a checkpoint, the WAL) instead of lingering in free pages.
  // NOTE: temp_store=MEMORY keeps the statement sub-journal of the writer's per-op savepoints in
  // memory: on disk it spilled past 64 KiB into a temp file, ~17 pwrite64 calls per submitted job
  // (issue 29). Nothing durable lives there: a crash rolls the whole transaction back anyway.
  // wal_buffer: the WAL-buffering VFS (wal_buffer_vfs.h: synchronous=FULL, set here before any write).
  conn(const std::string& path, int32_t busy_ms, std::function<int64_t()> clock, bool wal_buffer = false)
      : db(path, busy_ms, false, wal_buffer), clock_(std::move(clock)) {
    db.exec("PRAGMA journal_mode=WAL");
    db.exec("PRAGMA synchronous=FULL");
    db.exec("PRAGMA foreign_keys=ON");
    db.exec("PRAGMA secure_delete=ON");
    db.exec("PRAGMA temp_store=MEMORY");
  }
  // The cached statement for sql, reset and unbound. Text in an array (a string literal) is found
  // by its address first (no std::string built, no hash of the SQL per call: issue 29, ~25
  // statements per job on the writer), checked against the cached text (a buffer's address may
  // hold other text later); anything else by its content. Both lead to the same statement.
  template <size_t N>
  sqlite_stmt& stmt(const char (&sql)[N]) {
    const size_t len = strnlen(sql, N);
    if (auto it = by_address_.find(sql); it != by_address_.end()) {
      entry* e = it->second;
      if (e->sql->size() == len && std::memcmp(e->sql->data(), sql, len) == 0) return use(*e);
    }
    entry& e = find_or_prepare(std::string(sql, len));
    // NOTE: bounded: a literal has one address per call site in practice, but the language does
    // not promise it; past the bound lookups just take the content path.
    if (by_address_.size() < k_max_addresses) by_address_[sql] = &e;
    return use(e);
  }
  sqlite_stmt& stmt(const std::string& sql) { return use(find_or_prepare(sql)); }
  // End every statement used since the last call, so the connection holds no read snapshot
  // between uses. NOTE: only those: resetting the whole cache (~60 statements on the writer)
  // after every op was ~300 sqlite3_reset + clear_bindings calls per job (issue 29).
  void reset_all() {
    for (entry* e : used_) {
      e->st->reset();
      e->used = false;
    }
    used_.clear();
  }
  size_t n_used() const { return used_.size(); }  // statements a reset_all would end now (tests)
  int64_t now() const { return clock_(); }  // the store's clock (ms since the epoch)
  // What the writer's current transaction wrote, for waking only the waiters it concerns
  // (store::wait_events); set by the insert helpers, cleared per transaction.
  static constexpr uint32_t k_wrote_event = 1, k_wrote_webhook_status = 2, k_wrote_outbox = 4;
  uint32_t wrote = 0;
  // The writer's try of a group (store.cpp run_batch): isolate_ops = each op in its own savepoint
  // (set for the second try only; an op that nests its own savepoints, commit_steps, does so then
  // only); op_threw = an op threw in a try without it.
  bool isolate_ops = false, op_threw = false;
  sqlite_db db;

 private:
  struct entry {
    const std::string* sql = nullptr;  // its key in cache_
    std::unique_ptr<sqlite_stmt> st;
    bool used = false;  // in used_ (fetched since the last reset_all)
  };
  static constexpr size_t k_max_addresses = 4096;
  entry& find_or_prepare(const std::string& sql) {
    auto it = cache_.find(sql);
    if (it == cache_.end()) {
      it = cache_.emplace(sql, entry{nullptr, std::make_unique<sqlite_stmt>(db.prepare(sql))}).first;
      it->second.sql = &it->first;
    }
    return it->second;
  }
  sqlite_stmt& use(entry& e) {
    e.st->reset();
    if (!e.used) {
      e.used = true;
      used_.push_back(&e);
    }
    return *e.st;
  }
  std::function<int64_t()> clock_;
  std::unordered_map<std::string, entry> cache_;            // NOTE: node-based: entries never move
  std::unordered_map<const char*, entry*> by_address_;      // string literals' addresses -> cache_
  std::vector<entry*> used_;                                // fetched since the last reset_all
};

}  // namespace agentq::store
