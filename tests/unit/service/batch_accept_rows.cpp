// A Batch chunk's acceptance writes (issue 29): accept_chunk inserts each table's rows in multi-row
// statements (32 rows a statement, then one a statement for the rest). Read back over a plain SQLite
// connection, every line of chunks that fill groups, end in a rest, or hold only a rest has its rows
// and only those: a job (queued, the batch's tenant and priority, its request and store flag), one
// `queued` status event in line order, its key row, and its batch_jobs row (refused lines: the error,
// no job). A chunk whose lines collide with an existing job rolls back whole.
#include <doctest/doctest.h>

#include <set>
#include <string>
#include <vector>

#include "store/batch_store.h"
#include "store/sqlite.h"
#include "store/store.h"
#include "accepted_batch.h"
#include "temp_dir.h"

using namespace agentq;

namespace {

struct fixture {
  test::temp_dir dir;
  std::string path = dir.file("jobs.db");
  std::unique_ptr<store::store> db;
  std::unique_ptr<store::batch_store> batches;

  fixture() {
    std::string err;
    store::store_options so;
    so.path = path;
    db = store::store::open(so, &err);
    REQUIRE_MESSAGE(db, err);
    batches = store::batch_store::open(path, &err);
    REQUIRE_MESSAGE(batches, err);
  }
  store::batch_row batch(const std::string& tenant) { return test::created_batch(*batches, tenant); }
};

// Lines [first, first + n) of a batch; refused when line % 7 == 3; store_content false on odd lines.
std::vector<store::batch_line> lines_of(int64_t first, int64_t n) {
  std::vector<store::batch_line> out;
  for (int64_t i = first; i < first + n; ++i) {
    store::batch_line l;
    l.line_idx = i;
    l.custom_id = "req \"" + std::to_string(i) + "\"";
    if (i % 7 == 3)
      l.error_json = R"({"code":"invalid_request","message":"line )" + std::to_string(i) + R"("})";
    else
      l.request_json = R"({"model":"tiny","n":)" + std::to_string(i) + "}";
    l.store_content = i % 2 == 0;
    out.push_back(std::move(l));
  }
  return out;
}

// Every row accept_chunk wrote for lines [0, n) of b, checked against lines_of.
void check_rows(const std::string& path, const store::batch_row& b, int64_t n) {
  store::sqlite_db c(path, 5000);
  auto count = [&](const std::string& sql) {
    auto s = c.prepare(sql);
    s.bind(1, b.id);
    REQUIRE(s.step());
    return s.col_int(0);
  };
  auto s = c.prepare(
      "SELECT bj.line_idx, bj.custom_id, bj.job_id, bj.error_json, j.tenant, j.status, j.priority, j.request_json, "
      "j.store_content, k.key_id, (SELECT COUNT(*) FROM job_events e WHERE e.job_id=bj.job_id AND e.type='status' "
      "AND e.data_json='{\"status\":\"queued\"}' AND e.tenant=j.tenant) "
      "FROM batch_jobs bj LEFT JOIN jobs j ON j.id=bj.job_id LEFT JOIN job_keys k ON k.job_id=bj.job_id "
      "WHERE bj.batch_id=? ORDER BY bj.line_idx");
  s.bind(1, b.id);
  auto want = lines_of(0, n);
  int64_t i = 0, n_jobs = 0;
  std::set<std::string> ids;
  while (s.step()) {
    REQUIRE(i < n);
    const auto& l = want[size_t(i)];
    INFO("line " << i);
    CHECK(s.col_int(0) == i);
    CHECK(s.col_text(1) == l.custom_id);
    CHECK(s.col_text(3) == l.error_json);
    if (l.request_json.empty()) {
      CHECK(s.col_text(2).empty());
      CHECK(s.col_null(4));
    } else {
      ++n_jobs;
      CHECK(ids.insert(s.col_text(2)).second);
      CHECK(s.col_text(4) == b.tenant);
      CHECK(s.col_text(5) == "queued");
      CHECK(s.col_int(6) == int64_t(store::job_priority::batch));
      CHECK(s.col_text(7) == l.request_json);
      CHECK(s.col_int(8) == int64_t(l.store_content));
      CHECK(s.col_text(9) == b.key_id);
      CHECK(s.col_int(10) == 1);
    }
    ++i;
  }
  CHECK(i == n);
  CHECK(count("SELECT COUNT(*) FROM jobs WHERE tenant=(SELECT tenant FROM batches WHERE id=?1)") == n_jobs);
  CHECK(count("SELECT COUNT(*) FROM job_events WHERE tenant=(SELECT tenant FROM batches WHERE id=?1)") == n_jobs);
  // The status events are in line order (their ids are what the webhook scan and SSE resume by).
  auto ev = c.prepare(
      "SELECT bj.line_idx FROM job_events e JOIN batch_jobs bj ON bj.job_id=e.job_id AND bj.batch_id=? ORDER BY e.id");
  ev.bind(1, b.id);
  int64_t last = -1;
  while (ev.step()) {
    CHECK(ev.col_int(0) > last);
    last = ev.col_int(0);
  }
}

}  // namespace

TEST_CASE("batch acceptance: every line's rows across multi-row groups and the rest, chunk after chunk") {
  fixture f;
  // 70 = two groups of 32 and a rest of 6; 20: only a rest; 64: groups only; 1: one line.
  auto b = f.batch("tenant-a");
  int64_t at = 0;
  for (int64_t n : {70, 20, 64, 1}) {
    auto lines = lines_of(at, n);
    REQUIRE(f.batches->accept_chunk(b, lines, at + n, store::job_priority::batch));
    for (const auto& l : lines) CHECK(l.job_id.empty() == l.request_json.empty());
    at += n;
    check_rows(f.path, b, at);
  }
  CHECK(f.batches->get_batch(b.id, "")->n_accepted == at);
  // Another tenant's batch in the same file: its rows are its own.
  auto other = f.batch("tenant-b");
  auto lines = lines_of(0, 40);
  REQUIRE(f.batches->accept_chunk(other, lines, 40, store::job_priority::batch));
  check_rows(f.path, other, 40);
  check_rows(f.path, b, at);
}

TEST_CASE("batch acceptance: a chunk with a line that collides rolls back whole") {
  fixture f;
  auto b = f.batch("tenant-a");
  auto first = lines_of(0, 40);
  REQUIRE(f.batches->accept_chunk(b, first, 40, store::job_priority::batch));
  // The next chunk's 50th line reuses a job id that exists: a constraint failure inside a group.
  auto next = lines_of(40, 60);
  next[50].job_id = first[5].job_id;
  REQUIRE(!next[50].request_json.empty());
  CHECK_FALSE(f.batches->accept_chunk(b, next, 100, store::job_priority::batch));
  for (const auto& l : next) CHECK(l.job_id.empty());  // ids are made again when the chunk is retried
  check_rows(f.path, b, 40);
  CHECK(f.batches->get_batch(b.id, "")->n_accepted == 40);
  auto retry = lines_of(40, 60);
  REQUIRE(f.batches->accept_chunk(b, retry, 100, store::job_priority::batch));
  check_rows(f.path, b, 100);
}
