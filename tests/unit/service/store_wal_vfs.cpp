// The WAL-buffering VFS (store/wal_buffer_vfs.h): a commit's frames reach the file in a few
// writes and another connection reads them at once; frames survive a process that exits without
// closing; a spilled transaction rolled back leaves nothing held and nothing wrong in the file;
// and a random mix of commits, rollbacks, spills and checkpoints from a buffered and a plain
// connection always reads back what was committed, the buffer empty between transactions; and
// every sync of the WAL reaches the file with nothing held (the commit's fdatasync covers it all).
#include <doctest/doctest.h>
#include <sqlite3.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <fstream>
#include <map>
#include <random>
#include <string>

#include "store/conn.h"
#include "store/wal_buffer_vfs.h"
#include "temp_dir.h"

using namespace agentq::store;

namespace {
int64_t clock0() {
  return 0;
}

// This thread's write syscalls so far (/proc/thread-self/io "syscw"); -1 without task I/O accounting.
int64_t thread_syscw() {
  std::ifstream in("/proc/thread-self/io");
  std::string key;
  int64_t v = 0;
  while (in >> key >> v)
    if (key == "syscw:") return v;
  return -1;
}

int64_t scalar(conn& c, const std::string& sql) {
  auto& st = c.stmt(sql);
  REQUIRE(st.step());
  const int64_t v = st.col_int(0);
  c.reset_all();
  return v;
}

std::string integrity(conn& c) {
  auto& st = c.stmt("PRAGMA integrity_check");
  REQUIRE(st.step());
  std::string v = st.col_text(0);
  c.reset_all();
  return v;
}

// "aq-sync-check": unix's files with xSync counting the syncs that find bytes still held by the
// WAL-buffering VFS above it (the unix file's own methods, copied with xSync replaced).
struct sync_checker {
  static inline std::map<const sqlite3_io_methods*, sqlite3_io_methods> copies;          // unix's -> ours
  static inline std::map<const sqlite3_io_methods*, const sqlite3_io_methods*> unix_of;  // ours -> unix's
  static inline int64_t n_syncs = 0, n_syncs_with_held = 0;

  static int x_sync(sqlite3_file* f, int flags) {
    ++n_syncs;
    if (wal_buffer_vfs_stats().n_held_bytes != 0) ++n_syncs_with_held;
    return unix_of.at(f->pMethods)->xSync(f, flags);
  }
  static int x_open(sqlite3_vfs*, sqlite3_filename name, sqlite3_file* f, int flags, int* out_flags) {
    sqlite3_vfs* unix_vfs = sqlite3_vfs_find("unix");
    const int rc = unix_vfs->xOpen(unix_vfs, name, f, flags, out_flags);
    if (rc != SQLITE_OK || !f->pMethods) return rc;
    auto [it, fresh] = copies.try_emplace(f->pMethods, *f->pMethods);
    if (fresh) {
      it->second.xSync = x_sync;
      unix_of[&it->second] = it->first;
    }
    f->pMethods = &it->second;
    return rc;
  }
  static const char* install() {
    static sqlite3_vfs vfs = [] {
      sqlite3_vfs v = *sqlite3_vfs_find("unix");
      v.zName = "aq-sync-check";
      v.pNext = nullptr;
      v.xOpen = x_open;
      return v;
    }();
    static const bool ok = sqlite3_vfs_register(&vfs, 0) == SQLITE_OK;
    return ok ? vfs.zName : nullptr;
  }
};

// n rows of `bytes` random bytes each, in the caller's transaction (or its own).
void insert_rows(conn& c, int n, int bytes) {
  c.db.exec("WITH RECURSIVE r(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM r WHERE i < " + std::to_string(n) +
            ") INSERT INTO t(v) SELECT randomblob(" + std::to_string(bytes) + ") FROM r");
}
}  // namespace

TEST_CASE("wal buffer: a 40-page commit in a few writes, read by another connection at once") {
  REQUIRE(wal_buffer_vfs_name() != nullptr);
  agentq::test::temp_dir dir;
  conn a(dir.file("buffered.db"), 1000, clock0, true);
  conn u(dir.file("plain.db"), 1000, clock0, false);
  for (conn* c : {&a, &u}) c->db.exec("CREATE TABLE t(id INTEGER PRIMARY KEY, v BLOB)");

  const wal_buffer_vfs_counts before = wal_buffer_vfs_stats();
  const int64_t w0 = thread_syscw();
  insert_rows(a, 40, 4000);  // one transaction: ~41 pages, ~170 KB of frames
  const int64_t w1 = thread_syscw();
  const wal_buffer_vfs_counts after = wal_buffer_vfs_stats();
  insert_rows(u, 40, 4000);
  const int64_t w2 = thread_syscw();

  CHECK(after.n_held_bytes == 0);
  CHECK(after.n_writes - before.n_writes >= 1);
  CHECK(after.n_writes - before.n_writes <= 3);  // pieces under 128 KiB
  if (w0 >= 0) {
    INFO("write syscalls: buffered ", w1 - w0, ", unix ", w2 - w1);
    CHECK(w1 - w0 <= 6);
    CHECK(w2 - w1 >= 80);  // unix: two per frame
  }
  conn r(dir.file("buffered.db"), 1000, clock0);
  CHECK(scalar(r, "SELECT COUNT(*) FROM t") == 40);
  CHECK(scalar(r, "SELECT SUM(length(v)) FROM t") == 160000);
}

TEST_CASE("wal buffer: committed frames survive a process that exits without closing") {
  agentq::test::temp_dir dir;
  const std::string path = dir.file("crash.db");
  {
    conn c(path, 1000, clock0, true);
    c.db.exec("CREATE TABLE t(id INTEGER PRIMARY KEY, v BLOB)");
  }
  const pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    // NOTE: no destructors, no close, no checkpoint: what is in the WAL file is all there is.
    auto* c = new conn(path, 1000, clock0, true);
    for (int i = 0; i < 5; ++i) insert_rows(*c, 30, 3000);
    _exit(wal_buffer_vfs_stats().n_held_bytes == 0 ? 0 : 3);
  }
  int status = 0;
  REQUIRE(waitpid(child, &status, 0) == child);
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  conn r(path, 1000, clock0);
  CHECK(scalar(r, "SELECT COUNT(*) FROM t") == 150);
  CHECK(integrity(r) == "ok");
}

TEST_CASE("wal buffer: a spilled transaction rolled back; another connection commits; the buffered one commits after") {
  agentq::test::temp_dir dir;
  const std::string path = dir.file("spill.db");
  conn a(path, 1000, clock0, true);
  conn b(path, 1000, clock0, false);
  a.db.exec("CREATE TABLE t(id INTEGER PRIMARY KEY, v BLOB)");
  a.db.exec("PRAGMA cache_size=10");  // 300 pages spill mid-transaction (frames without a commit)

  a.db.exec("BEGIN");
  insert_rows(a, 300, 3500);
  CHECK(wal_buffer_vfs_stats().n_held_bytes > 0);  // the spills are held
  a.db.exec("ROLLBACK");
  CHECK(wal_buffer_vfs_stats().n_held_bytes == 0);  // flushed before the write lock went

  insert_rows(b, 20, 3500);
  CHECK(scalar(a, "SELECT COUNT(*) FROM t") == 20);
  insert_rows(a, 300, 3500);
  CHECK(wal_buffer_vfs_stats().n_held_bytes == 0);
  CHECK(scalar(b, "SELECT COUNT(*) FROM t") == 320);
  b.db.exec("PRAGMA wal_checkpoint(TRUNCATE)");
  insert_rows(a, 5, 100);  // the first frames of a restarted WAL: its header at offset 0 again
  CHECK(scalar(b, "SELECT COUNT(*) FROM t") == 325);
  CHECK(integrity(b) == "ok");
}

TEST_CASE("wal buffer: random commits, rollbacks, spills and checkpoints from a buffered and a plain connection") {
  agentq::test::temp_dir dir;
  const std::string path = dir.file("mix.db");
  int64_t expected_rows = 0, expected_bytes = 0;
  {
    conn a(path, 1000, clock0, true);
    conn b(path, 1000, clock0, false);
    conn r(path, 1000, clock0, false);
    a.db.exec("CREATE TABLE t(id INTEGER PRIMARY KEY, v BLOB)");
    a.db.exec("PRAGMA cache_size=12");
    std::mt19937 rng(29);
    for (int step = 0; step < 240; ++step) {
      conn& w = rng() % 3 == 0 ? b : a;
      const int n = 1 + int(rng() % (rng() % 4 == 0 ? 120 : 8));
      const int bytes = 50 + int(rng() % 4000);
      switch (rng() % 6) {
        case 0: {  // a transaction rolled back (it spills when large)
          w.db.exec("BEGIN");
          insert_rows(w, n, bytes);
          w.db.exec("ROLLBACK");
          break;
        }
        case 1: {  // a delete and an insert in one transaction
          w.db.exec("BEGIN");
          const int64_t gone = scalar(w, "SELECT COUNT(*) FROM (SELECT id FROM t ORDER BY id LIMIT 3)");
          const int64_t gone_bytes =
              scalar(w, "SELECT COALESCE(SUM(length(v)), 0) FROM (SELECT v FROM t ORDER BY id LIMIT 3)");
          w.db.exec("DELETE FROM t WHERE id IN (SELECT id FROM t ORDER BY id LIMIT 3)");
          insert_rows(w, n, bytes);
          w.db.exec("COMMIT");
          expected_rows += n - gone;
          expected_bytes += int64_t(n) * bytes - gone_bytes;
          break;
        }
        case 2: {  // a checkpoint of some kind, from the plain or the reading connection
          static const char* kinds[] = {"PASSIVE", "FULL", "RESTART", "TRUNCATE"};
          (rng() % 2 ? b : r).db.exec(std::string("PRAGMA wal_checkpoint(") + kinds[rng() % 4] + ")");
          break;
        }
        default:
          insert_rows(w, n, bytes);
          expected_rows += n;
          expected_bytes += int64_t(n) * bytes;
      }
      REQUIRE(wal_buffer_vfs_stats().n_held_bytes == 0);
      REQUIRE(scalar(r, "SELECT COUNT(*) FROM t") == expected_rows);
      REQUIRE(scalar(r, "SELECT COALESCE(SUM(length(v)), 0) FROM t") == expected_bytes);
    }
    CHECK(integrity(r) == "ok");
  }
  conn fresh(path, 1000, clock0);
  CHECK(scalar(fresh, "SELECT COUNT(*) FROM t") == expected_rows);
  CHECK(integrity(fresh) == "ok");
}

TEST_CASE("wal buffer: every sync of the WAL finds nothing held (the commit's flush covers every frame)") {
  REQUIRE(wal_buffer_vfs_name() != nullptr);  // SQLite configured as the store does, before the VFSes
  REQUIRE(sync_checker::install() != nullptr);
  const char* vfs = wal_buffer_vfs_over("aq-sync-check", "aq-walbuf-check");
  REQUIRE(vfs != nullptr);
  agentq::test::temp_dir dir;
  sqlite3* db = nullptr;
  REQUIRE(sqlite3_open_v2(dir.file("sync.db").c_str(), &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, vfs) ==
          SQLITE_OK);
  auto exec = [&](const std::string& sql) {
    REQUIRE(sqlite3_exec(db, sql.c_str(), nullptr, nullptr, nullptr) == SQLITE_OK);
  };
  exec("PRAGMA journal_mode=WAL");
  exec("PRAGMA synchronous=FULL");
  exec("CREATE TABLE t(id INTEGER PRIMARY KEY, v BLOB)");
  const int64_t syncs0 = sync_checker::n_syncs;
  for (int i = 0; i < 20; ++i) {
    exec("WITH RECURSIVE r(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM r WHERE i < " + std::to_string(1 + i * 7) +
         ") INSERT INTO t(v) SELECT randomblob(1500) FROM r");
    if (i % 7 == 6) exec("PRAGMA wal_checkpoint(TRUNCATE)");  // the WAL restarts: its header, then synced
  }
  CHECK(sync_checker::n_syncs - syncs0 >= 20);
  CHECK(sync_checker::n_syncs_with_held == 0);
  CHECK(sqlite3_close(db) == SQLITE_OK);
}
