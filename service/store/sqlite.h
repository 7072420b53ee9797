// A thin RAII layer over the SQLite C API for the store: connections, prepared statements,
// typed bind/column helpers. Errors throw sqlite_error; the store facade catches them.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>

struct sqlite3;
struct sqlite3_stmt;

namespace agentq::store {

struct sqlite_error : std::runtime_error {
  int code;
  sqlite_error(int code, const std::string& what) : std::runtime_error(what), code(code) {}
};

class sqlite_stmt;

class sqlite_db {
 public:
  // Open path (create if missing); busy timeout in ms. Throws sqlite_error. wal_buffer: through
  // the WAL-buffering VFS (wal_buffer_vfs.h; a connection with synchronous FULL only).
  sqlite_db(const std::string& path, int32_t busy_timeout_ms, bool read_only = false, bool wal_buffer = false);
  ~sqlite_db();
  sqlite_db(const sqlite_db&) = delete;
  sqlite_db& operator=(const sqlite_db&) = delete;

  void exec(const std::string& sql);                 // one or more statements, no results
  sqlite_stmt prepare(std::string_view sql);
  int64_t changes() const;
  int64_t last_insert_rowid() const;
  int32_t user_version();
  sqlite3* handle() { return db_; }
  // Replace SQLite's busy wait (sleeps of 1, 2, 5, 10 ... 100 ms: it can sleep on for tens of ms
  // after the other connection let go) with a poll every 100 us for the first 5 ms, then every
  // 1 ms, up to timeout_ms in all. For the latency-critical connection (the store's writer).
  void set_fine_busy_wait(int32_t timeout_ms);

 private:
  sqlite3* db_ = nullptr;
  int32_t fine_busy_timeout_ms_ = 0;
};

class sqlite_stmt {
 public:
  sqlite_stmt(sqlite3* db, sqlite3_stmt* stmt) : db_(db), stmt_(stmt) {}
  sqlite_stmt(sqlite_stmt&& o) noexcept : db_(o.db_), stmt_(o.stmt_) { o.stmt_ = nullptr; }
  sqlite_stmt& operator=(sqlite_stmt&&) = delete;
  ~sqlite_stmt();

  // Bind by 1-based index; chainable.
  sqlite_stmt& bind(int idx, int64_t v);
  sqlite_stmt& bind(int idx, int32_t v) { return bind(idx, static_cast<int64_t>(v)); }
  sqlite_stmt& bind(int idx, std::string_view v);
  sqlite_stmt& bind(int idx, const std::string& v) { return bind(idx, std::string_view(v)); }
  sqlite_stmt& bind(int idx, const char* v) { return bind(idx, std::string_view(v)); }
  // Bind text without copying it (SQLITE_STATIC); integers as bind.
  // NOTE: v must stay valid and unchanged until the statement's step is done. Use it in one
  // expression with run() (`stmt.bind_all_static(...).run()`: temporaries live to its end) or with
  // arguments that outlive the steps. Nothing reads a binding after that: the store resets and
  // unbinds each statement before each use (conn::stmt) and after each op (conn::reset_all).
  sqlite_stmt& bind_static(int idx, std::string_view v);
  sqlite_stmt& bind_static(int idx, int64_t v) { return bind(idx, v); }
  template <class... A>
  sqlite_stmt& bind_all_static(const A&... a) {
    int i = 0;
    (bind_static(++i, a), ...);
    return *this;
  }
  sqlite_stmt& bind_null(int idx);
  template <class... A>
  sqlite_stmt& bind_all(const A&... a) {
    int i = 0;
    (bind(++i, a), ...);
    return *this;
  }

  bool step();                                       // true = a row is ready; false = done
  void run() { while (step()) {} }                   // execute to completion
  void reset();

  int64_t col_int(int idx) const;                    // 0-based
  std::string col_text(int idx) const;
  bool col_null(int idx) const;

 private:
  sqlite3* db_;
  sqlite3_stmt* stmt_;
};

}  // namespace agentq::store
