// The store connection's statement cache (store/conn.h): a literal is found by its address, other
// text by its content, both the same statement; a buffer reused with other SQL gets that SQL; and
// reset_all ends exactly the statements used since the last call (no read snapshot left behind).
// Also: SQLite's memory statistics are off (sqlite.cpp).
#include <doctest/doctest.h>

#include <sqlite3.h>

#include <cstring>
#include <string>

#include "store/conn.h"
#include "temp_dir.h"

using namespace agentq::store;

namespace {
int64_t clock0() { return 0; }
void fill(conn& c) {
  c.db.exec("CREATE TABLE IF NOT EXISTS t(id INTEGER PRIMARY KEY, v TEXT)");
  c.db.exec("INSERT INTO t(v) VALUES ('a'), ('b'), ('c')");
}
}  // namespace

TEST_CASE("statement cache: literal and text share a statement; a reused buffer gets its own SQL") {
  agentq::test::temp_dir dir;
  conn c(dir.file("db"), 1000, clock0);
  fill(c);
  auto& a = c.stmt("SELECT v FROM t WHERE id=?");
  auto& b = c.stmt(std::string("SELECT v FROM t WHERE id=?"));
  CHECK(&a == &b);
  CHECK(&c.stmt("SELECT v FROM t WHERE id=?") == &a);  // the address path again
  // A char array (not a literal) whose text changes between calls: checked against the cached text.
  char buf[64];
  std::strcpy(buf, "SELECT COUNT(*) FROM t");
  auto& n = c.stmt(buf);
  REQUIRE(n.step());
  CHECK(n.col_int(0) == 3);
  std::strcpy(buf, "SELECT MAX(id) FROM t");
  auto& m = c.stmt(buf);
  CHECK(&m != &n);
  REQUIRE(m.step());
  CHECK(m.col_int(0) == 3);
  std::strcpy(buf, "SELECT COUNT(*) FROM t");
  CHECK(&c.stmt(buf) == &n);
}

TEST_CASE("statement cache: reset_all ends the statements used since the last call, and only those") {
  agentq::test::temp_dir dir;
  const std::string path = dir.file("db");
  conn c(path, 1000, clock0);
  fill(c);
  c.reset_all();
  CHECK(c.n_used() == 0);
  auto& s = c.stmt("SELECT v FROM t ORDER BY id");
  REQUIRE(s.step());  // mid-scan: the connection holds a read snapshot
  auto& s2 = c.stmt("SELECT v FROM t ORDER BY id");  // fetched again: still one entry
  CHECK(&s2 == &s);
  REQUIRE(s.step());
  c.stmt("SELECT COUNT(*) FROM t").step();
  CHECK(c.n_used() == 2);
  // The snapshot is ended: another connection's write then a checkpoint that must copy every
  // frame (TRUNCATE) succeeds only when no reader of this connection still pins the old WAL.
  c.reset_all();
  CHECK(c.n_used() == 0);
  conn w(path, 1000, clock0);
  w.db.exec("INSERT INTO t(v) VALUES ('d')");
  auto& ck = w.stmt("PRAGMA wal_checkpoint(TRUNCATE)");
  REQUIRE(ck.step());
  CHECK(ck.col_int(0) == 0);  // 0: not blocked by a reader
  // Used again after the reset: counted again, and reads the new row.
  auto& cnt = c.stmt("SELECT COUNT(*) FROM t");
  REQUIRE(cnt.step());
  CHECK(cnt.col_int(0) == 4);
  CHECK(c.n_used() == 1);
}

TEST_CASE("SQLite's memory statistics are off (their global mutex on every allocation)") {
  // The first connection of this process configured SQLite before it initialized (sqlite.cpp).
  agentq::test::temp_dir dir;
  conn c(dir.file("db"), 1000, clock0);
  fill(c);
  auto& s = c.stmt("SELECT COUNT(*) FROM t");
  REQUIRE(s.step());
  CHECK(sqlite3_memory_used() == 0);  // counted only with SQLITE_CONFIG_MEMSTATUS on
}
