// SQLite RAII wrapper (see sqlite.h).
#include "store/sqlite.h"

#include <sqlite3.h>

#include <chrono>
#include <thread>

#include "store/wal_buffer_vfs.h"

namespace agentq::store {

namespace {
[[noreturn]] void fail(sqlite3* db, int rc, std::string_view what) {
  std::string msg(what);
  msg += ": ";
  msg += db ? sqlite3_errmsg(db) : sqlite3_errstr(rc);
  throw sqlite_error(rc, msg);
}
}  // namespace

sqlite_db::sqlite_db(const std::string& path, int32_t busy_timeout_ms, bool read_only, bool wal_buffer) {
  // NOTE: SQLite's memory statistics (on by default) take a process-wide mutex around every
  // sqlite3_malloc / sqlite3_free: ~5 % of a submit's instructions on the store's writer (session 23,
  // callgrind), every connection contending for it. Nothing here reads them (sqlite3_memory_used,
  // sqlite3_status). Off before SQLite initializes; a later call is refused (SQLITE_MISUSE) and harmless.
  static const bool k_memstatus_off = [] { return sqlite3_config(SQLITE_CONFIG_MEMSTATUS, 0) == SQLITE_OK; }();
  (void)k_memstatus_off;
  int flags = read_only ? SQLITE_OPEN_READONLY : (SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE);
  flags |= SQLITE_OPEN_NOMUTEX;  // NOTE: each connection is used by one thread at a time
  // NOTE: the VFS is registered after the memory statistics are off (registering initializes SQLite).
  const char* vfs = wal_buffer ? wal_buffer_vfs_name() : nullptr;
  int rc = sqlite3_open_v2(path.c_str(), &db_, flags, vfs);
  if (rc != SQLITE_OK) {
    std::string msg = "open " + path + ": " + (db_ ? sqlite3_errmsg(db_) : sqlite3_errstr(rc));
    sqlite3_close(db_);
    db_ = nullptr;
    throw sqlite_error(rc, msg);
  }
  sqlite3_busy_timeout(db_, busy_timeout_ms);
  sqlite3_extended_result_codes(db_, 1);
}

sqlite_db::~sqlite_db() { sqlite3_close_v2(db_); }

void sqlite_db::set_fine_busy_wait(int32_t timeout_ms) {
  fine_busy_timeout_ms_ = timeout_ms;
  sqlite3_busy_handler(
      db_,
      [](void* ctx, int n_prior) -> int {
        constexpr int k_n_fine = 50;  // 50 x 100 us = the first 5 ms
        const int64_t waited_us =
            n_prior < k_n_fine ? int64_t(n_prior) * 100 : k_n_fine * 100 + int64_t(n_prior - k_n_fine) * 1000;
        if (waited_us >= int64_t(static_cast<sqlite_db*>(ctx)->fine_busy_timeout_ms_) * 1000) return 0;  // SQLITE_BUSY
        std::this_thread::sleep_for(std::chrono::microseconds(n_prior < k_n_fine ? 100 : 1000));
        return 1;  // try again
      },
      this);
}

void sqlite_db::exec(const std::string& sql) {
  char* err = nullptr;
  int rc = sqlite3_exec(db_, sql.c_str(), nullptr, nullptr, &err);
  if (rc != SQLITE_OK) {
    std::string msg = err ? err : sqlite3_errstr(rc);
    sqlite3_free(err);
    throw sqlite_error(rc, msg);
  }
}

sqlite_stmt sqlite_db::prepare(std::string_view sql) {
  sqlite3_stmt* s = nullptr;
  int rc = sqlite3_prepare_v2(db_, sql.data(), static_cast<int>(sql.size()), &s, nullptr);
  if (rc != SQLITE_OK) fail(db_, rc, "prepare");
  return sqlite_stmt(db_, s);
}

int64_t sqlite_db::changes() const { return sqlite3_changes(db_); }
int64_t sqlite_db::last_insert_rowid() const { return sqlite3_last_insert_rowid(db_); }

int32_t sqlite_db::user_version() {
  auto s = prepare("PRAGMA user_version");
  s.step();
  return static_cast<int32_t>(s.col_int(0));
}

sqlite_stmt::~sqlite_stmt() { sqlite3_finalize(stmt_); }

sqlite_stmt& sqlite_stmt::bind(int idx, int64_t v) {
  int rc = sqlite3_bind_int64(stmt_, idx, v);
  if (rc != SQLITE_OK) fail(db_, rc, "bind");
  return *this;
}
sqlite_stmt& sqlite_stmt::bind(int idx, std::string_view v) {
  int rc = sqlite3_bind_text(stmt_, idx, v.data(), static_cast<int>(v.size()), SQLITE_TRANSIENT);
  if (rc != SQLITE_OK) fail(db_, rc, "bind");
  return *this;
}
sqlite_stmt& sqlite_stmt::bind_static(int idx, std::string_view v) {
  int rc = sqlite3_bind_text(stmt_, idx, v.data(), static_cast<int>(v.size()), SQLITE_STATIC);
  if (rc != SQLITE_OK) fail(db_, rc, "bind");
  return *this;
}
sqlite_stmt& sqlite_stmt::bind_null(int idx) {
  int rc = sqlite3_bind_null(stmt_, idx);
  if (rc != SQLITE_OK) fail(db_, rc, "bind");
  return *this;
}

bool sqlite_stmt::step() {
  int rc = sqlite3_step(stmt_);
  if (rc == SQLITE_ROW) return true;
  if (rc == SQLITE_DONE) return false;
  fail(db_, rc, "step");
}

void sqlite_stmt::reset() {
  sqlite3_reset(stmt_);
  sqlite3_clear_bindings(stmt_);
}

int64_t sqlite_stmt::col_int(int idx) const { return sqlite3_column_int64(stmt_, idx); }
std::string sqlite_stmt::col_text(int idx) const {
  const unsigned char* t = sqlite3_column_text(stmt_, idx);
  int n = sqlite3_column_bytes(stmt_, idx);
  return t ? std::string(reinterpret_cast<const char*>(t), n) : std::string();
}
bool sqlite_stmt::col_null(int idx) const { return sqlite3_column_type(stmt_, idx) == SQLITE_NULL; }

}  // namespace agentq::store
