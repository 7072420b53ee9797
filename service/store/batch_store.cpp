// Files, batches and bulk job acceptance on the job store's file (see batch_store.h).
#include "store/batch_store.h"

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "store/conn.h"
#include "util/crypto.h"

namespace agentq::store {

using json = nlohmann::json;

namespace {

const char* k_batch_statuses[] = {"validating", "in_progress", "finalizing", "completed",
                                  "expired",    "cancelling",  "cancelled",  "failed"};

const char* k_file_cols = "id, tenant, purpose, filename, bytes, n_lines, endpoints, path, created_ms";
const char* k_batch_cols =
    "seq, id, tenant, key_id, endpoint, input_file_id, completion_window, metadata_json, status, errors_json, "
    "output_file_id, error_file_id, n_total, n_accepted, n_completed, n_failed, created_ms, expires_ms, "
    "in_progress_ms, finalizing_ms, completed_ms, failed_ms, expired_ms, cancelling_ms, cancelled_ms";

file_row read_file_row(const sqlite_stmt& s) {
  return {s.col_text(0), s.col_text(1), s.col_text(2), s.col_text(3), s.col_int(4),
          s.col_int(5),  s.col_text(6), s.col_text(7), s.col_int(8)};
}

batch_row read_batch(const sqlite_stmt& s) {
  batch_row b;
  b.seq = s.col_int(0);
  b.id = s.col_text(1);
  b.tenant = s.col_text(2);
  b.key_id = s.col_text(3);
  b.endpoint = s.col_text(4);
  b.input_file_id = s.col_text(5);
  b.completion_window = s.col_text(6);
  b.metadata_json = s.col_text(7);
  b.status = parse_batch_status(s.col_text(8)).value_or(batch_status::failed);
  b.errors_json = s.col_text(9);
  b.output_file_id = s.col_text(10);
  b.error_file_id = s.col_text(11);
  b.n_total = s.col_int(12);
  b.n_accepted = s.col_int(13);
  b.n_completed = s.col_int(14);
  b.n_failed = s.col_int(15);
  b.created_ms = s.col_int(16);
  b.expires_ms = s.col_int(17);
  b.in_progress_ms = s.col_int(18);
  b.finalizing_ms = s.col_int(19);
  b.completed_ms = s.col_int(20);
  b.failed_ms = s.col_int(21);
  b.expired_ms = s.col_int(22);
  b.cancelling_ms = s.col_int(23);
  b.cancelled_ms = s.col_int(24);
  return b;
}

// Run fn in a write transaction; false (rolled back) if it throws.
template <class F>
bool in_tx(conn& c, const char* what, F fn) {
  try {
    c.db.exec("BEGIN IMMEDIATE");
    fn();
    c.reset_all();
    c.db.exec("COMMIT");
    return true;
  } catch (const std::exception& e) {
    spdlog::error("batch_store: {}: {}", what, e.what());
    c.reset_all();
    try {
      c.db.exec("ROLLBACK");
    } catch (...) {
    }
    return false;
  }
}

// Rows of one INSERT: a row's values are `row` with each '#' its next own parameter; ?1..?shared are
// the values every row shares (bound once a statement).
struct row_insert {
  const char* head;  // "INSERT ... VALUES "
  const char* row;   // "(#,?1,...)"
  int shared;
  int own;           // '#'s in row
};

// NOTE: OR FAIL, not the default ABORT, for the tables whose rows cannot conflict: a multi-row
// statement that may ABORT needs a statement journal (to undo its earlier rows), FAIL keeps them, and
// any failure throws and rolls the whole chunk back anyway (in_tx). OR IGNORE / OR REPLACE as before.
const row_insert k_insert_jobs{
    "INSERT OR FAIL INTO jobs(id, tenant, status, priority, request_json, created_ms, updated_ms, store_content) "
    "VALUES ",
    "(#,?1,'queued',?2,#,?3,?3,#)", 3, 3};
const row_insert k_insert_status_events{
    "INSERT OR FAIL INTO job_events(job_id, tenant, type, data_json, created_ms) VALUES ", "(#,?1,'status',?2,?3)", 3,
    1};
const row_insert k_insert_job_keys{"INSERT OR IGNORE INTO job_keys(job_id, key_id) VALUES ", "(#,?1)", 1, 1};
const row_insert k_insert_batch_jobs{
    "INSERT OR REPLACE INTO batch_jobs(batch_id, line_idx, custom_id, job_id, error_json) VALUES ", "(?1,#,#,#,#)",
    1, 4};

// Rows per multi-row INSERT: the one size measured (docs/queue_perf.md "Session 37": the writer's CPU
// on 100,000 lines -43 %); at most 129 parameters a statement (batch_jobs), under SQLite's floor of 999.
constexpr size_t k_rows_per_insert = 32;

std::string insert_sql(const row_insert& ri, size_t rows) {
  std::string sql = ri.head;
  int next = ri.shared;
  for (size_t r = 0; r < rows; ++r) {
    if (r) sql += ',';
    for (const char* p = ri.row; *p; ++p) {
      if (*p != '#') {
        sql += *p;
        continue;
      }
      sql += '?';
      sql += std::to_string(++next);
    }
  }
  return sql;
}

// n rows of ri, k_rows_per_insert a statement and the rest one a statement. bind_shared(stmt) binds
// ?1..?shared; bind_row(stmt, p, i) binds row i's own values from ?p on.
template <class Shared, class Row>
void insert_rows(conn& c, const row_insert& ri, size_t n, Shared bind_shared, Row bind_row) {
  auto run = [&](sqlite_stmt& s, size_t first, size_t rows) {
    s.reset();
    bind_shared(s);
    for (size_t r = 0; r < rows; ++r) bind_row(s, ri.shared + 1 + int(r) * ri.own, first + r);
    s.run();
  };
  size_t i = 0;
  if (n >= k_rows_per_insert) {
    sqlite_stmt& many = c.stmt(insert_sql(ri, k_rows_per_insert));
    for (; i + k_rows_per_insert <= n; i += k_rows_per_insert) run(many, i, k_rows_per_insert);
  }
  if (i < n) {
    sqlite_stmt& one = c.stmt(insert_sql(ri, 1));
    for (; i < n; ++i) run(one, i, 1);
  }
}

}  // namespace

const char* to_string(batch_status s) { return k_batch_statuses[static_cast<int>(s)]; }

std::optional<batch_status> parse_batch_status(std::string_view s) {
  for (int i = 0; i < 8; ++i)
    if (s == k_batch_statuses[i]) return static_cast<batch_status>(i);
  return std::nullopt;
}

bool is_final(batch_status s) {
  return s == batch_status::completed || s == batch_status::expired || s == batch_status::cancelled ||
         s == batch_status::failed;
}

batch_store::batch_store(std::unique_ptr<conn> c) : c_(std::move(c)) {}
batch_store::~batch_store() = default;

std::unique_ptr<batch_store> batch_store::open(const std::string& db_path, std::string* error) {
  try {
    auto c = std::make_unique<conn>(db_path, 10000, [] { return now_ms(); });
    // NOTE: accepting a large batch touches the jobs, events and outbox B-trees all over: with
    // SQLite's default 2 MiB page cache every insert re-read pages (pread was a third of the time)
    // and the cache spilled into the WAL mid-transaction. 64 MiB of cache and a mapped file keep
    // the pages; the memory is bounded by these settings, not by the batch's size.
    c->db.exec("PRAGMA cache_size=-65536");
    c->db.exec("PRAGMA mmap_size=268435456");
    return std::unique_ptr<batch_store>(new batch_store(std::move(c)));
  } catch (const std::exception& e) {
    if (error) *error = std::string("opening the batch store: ") + e.what();
    return nullptr;
  }
}

int64_t batch_store::now() const { return c_->now(); }

// --- files -------------------------------------------------------------------

bool batch_store::add_file(const file_row& f) {
  std::lock_guard lock(mu_);
  return in_tx(*c_, "add_file", [&] {
    c_->stmt("INSERT OR REPLACE INTO files(id, tenant, purpose, filename, bytes, n_lines, endpoints, path, created_ms) "
             "VALUES (?,?,?,?,?,?,?,?,?)")
        .bind_all(f.id, f.tenant, f.purpose, f.filename, f.bytes, f.n_lines, f.endpoints, f.path, f.created_ms)
        .run();
  });
}

std::optional<file_row> batch_store::get_file(const std::string& id, const std::string& tenant) {
  std::lock_guard lock(mu_);
  try {
    auto& s = c_->stmt(std::string("SELECT ") + k_file_cols +
                       " FROM files WHERE id=?1 AND deleted_ms=0 AND (?2='' OR tenant=?2)");
    s.bind_all(id, tenant);
    std::optional<file_row> out;
    if (s.step()) out = read_file_row(s);
    c_->reset_all();
    return out;
  } catch (const std::exception& e) {
    spdlog::error("batch_store: get_file: {}", e.what());
    c_->reset_all();
    return std::nullopt;
  }
}

std::vector<file_row> batch_store::list_files(const std::string& tenant, int32_t limit) {
  std::lock_guard lock(mu_);
  std::vector<file_row> out;
  try {
    auto& s = c_->stmt(std::string("SELECT ") + k_file_cols +
                       " FROM files WHERE tenant=? AND deleted_ms=0 ORDER BY created_ms DESC, id LIMIT ?");
    s.bind_all(tenant, int64_t(limit));
    while (s.step()) out.push_back(read_file_row(s));
  } catch (const std::exception& e) {
    spdlog::error("batch_store: list_files: {}", e.what());
  }
  c_->reset_all();
  return out;
}

std::optional<std::string> batch_store::delete_file(const std::string& id, const std::string& tenant) {
  std::lock_guard lock(mu_);
  std::optional<std::string> path;
  bool ok = in_tx(*c_, "delete_file", [&] {
    auto& s = c_->stmt("SELECT path FROM files WHERE id=?1 AND deleted_ms=0 AND (?2='' OR tenant=?2)");
    s.bind_all(id, tenant);
    if (!s.step()) return;
    path = s.col_text(0);
    s.reset();
    c_->stmt("UPDATE files SET deleted_ms=? WHERE id=?").bind_all(c_->now(), id).run();
  });
  return ok ? path : std::nullopt;
}

// --- batches -----------------------------------------------------------------

std::optional<batch_row> batch_store::create_batch(batch_row b) {
  std::lock_guard lock(mu_);
  b.id = "batch_" + crypto::to_hex(crypto::random_bytes(12));
  b.created_ms = c_->now();
  bool ok = in_tx(*c_, "create_batch", [&] {
    c_->stmt("INSERT INTO batches(id, tenant, key_id, endpoint, input_file_id, completion_window, metadata_json, "
             "status, n_total, created_ms, expires_ms) VALUES (?,?,?,?,?,?,?,?,?,?,?)")
        .bind_all(b.id, b.tenant, b.key_id, b.endpoint, b.input_file_id, b.completion_window, b.metadata_json,
                  std::string(to_string(b.status)), b.n_total, b.created_ms, b.expires_ms)
        .run();
    b.seq = c_->db.last_insert_rowid();
    // the batch's webhooks are signed with its key's secret (key_store::webhook_secret_for)
    c_->stmt("INSERT OR IGNORE INTO job_keys(job_id, key_id) VALUES (?,?)").bind_all(b.id, b.key_id).run();
  });
  if (!ok) return std::nullopt;
  return b;
}

std::optional<batch_row> batch_store::get_batch(const std::string& id, const std::string& tenant) {
  std::lock_guard lock(mu_);
  std::optional<batch_row> out;
  try {
    auto& s = c_->stmt(std::string("SELECT ") + k_batch_cols + " FROM batches WHERE id=?1 AND (?2='' OR tenant=?2)");
    s.bind_all(id, tenant);
    if (s.step()) out = read_batch(s);
  } catch (const std::exception& e) {
    spdlog::error("batch_store: get_batch: {}", e.what());
  }
  c_->reset_all();
  return out;
}

std::vector<batch_row> batch_store::list_batches(const std::string& tenant, const std::string& after, int32_t limit) {
  std::lock_guard lock(mu_);
  std::vector<batch_row> out;
  try {
    auto& s = c_->stmt(std::string("SELECT ") + k_batch_cols +
                       " FROM batches WHERE tenant=?1 AND (?2='' OR seq < (SELECT seq FROM batches WHERE id=?2)) "
                       "ORDER BY seq DESC LIMIT ?3");
    s.bind_all(tenant, after, int64_t(limit));
    while (s.step()) out.push_back(read_batch(s));
  } catch (const std::exception& e) {
    spdlog::error("batch_store: list_batches: {}", e.what());
  }
  c_->reset_all();
  return out;
}

std::vector<batch_row> batch_store::list_open() {
  std::lock_guard lock(mu_);
  std::vector<batch_row> out;
  try {
    auto& s = c_->stmt(std::string("SELECT ") + k_batch_cols +
                       " FROM batches WHERE status IN ('validating','in_progress','finalizing','cancelling') "
                       "ORDER BY seq");
    while (s.step()) out.push_back(read_batch(s));
  } catch (const std::exception& e) {
    spdlog::error("batch_store: list_open: {}", e.what());
  }
  c_->reset_all();
  return out;
}

std::vector<batch_row> batch_store::list_all(const std::string& tenant) {
  std::lock_guard lock(mu_);
  std::vector<batch_row> out;
  try {
    auto& s = c_->stmt(std::string("SELECT ") + k_batch_cols + " FROM batches WHERE tenant=? ORDER BY seq");
    s.bind(1, tenant);
    while (s.step()) out.push_back(read_batch(s));
  } catch (const std::exception& e) {
    spdlog::error("batch_store: list_all: {}", e.what());
  }
  c_->reset_all();
  return out;
}

bool batch_store::transition(const std::string& id, batch_status from, batch_status to,
                             const std::vector<std::pair<std::string, std::string>>& text_cols,
                             const std::vector<std::pair<std::string, int64_t>>& int_cols) {
  std::lock_guard lock(mu_);
  // NOTE: column names come from this process (batch_runner), never from a request.
  std::string sql = "UPDATE batches SET status=?1, " + std::string(to_string(to)) + "_ms=?2";
  int idx = 4;
  for (auto& [col, _] : text_cols) sql += ", " + col + "=?" + std::to_string(idx++);
  for (auto& [col, _] : int_cols) sql += ", " + col + "=?" + std::to_string(idx++);
  sql += " WHERE id=?3 AND status=?" + std::to_string(idx);
  bool changed = false;
  bool ok = in_tx(*c_, "transition", [&] {
    auto& s = c_->stmt(sql);
    s.bind(1, to_string(to)).bind(2, c_->now()).bind(3, id);
    int i = 4;
    for (auto& [_, v] : text_cols) s.bind(i++, v);
    for (auto& [_, v] : int_cols) s.bind(i++, v);
    s.bind(i, to_string(from));
    s.run();
    changed = c_->db.changes() > 0;
    if (changed && is_final(to))
      c_->stmt("DELETE FROM service_cursors WHERE name=?").bind(1, "batch_feed:" + id).run();
  });
  return ok && changed;
}

bool batch_store::set_counts(const std::string& id, int64_t n_completed, int64_t n_failed) {
  std::lock_guard lock(mu_);
  return in_tx(*c_, "set_counts", [&] {
    c_->stmt("UPDATE batches SET n_completed=?, n_failed=? WHERE id=?").bind_all(n_completed, n_failed, id).run();
  });
}

bool batch_store::accept_chunk(const batch_row& b, std::vector<batch_line>& lines, int64_t next_line,
                               job_priority priority) {
  std::lock_guard lock(mu_);
  int64_t now = c_->now();
  std::string status_data = json{{"status", "queued"}}.dump();
  // NOTE: the chunk's job ids share one random 64-bit prefix and end in the line's index, so they sort
  // together: the inserts into the jobs, job_keys and job_events(job_id) B-trees append to a few pages
  // instead of touching a random page per job (the ids stay as unguessable as one random id per job
  // between tenants; within a batch, which is the tenant's own, they are sequential).
  std::string id_prefix = "job_" + crypto::to_hex(crypto::random_bytes(8));
  bool moved_on = false;
  bool ok = in_tx(*c_, "accept_chunk", [&] {
    // NOTE: the resume point moves in the same transaction as the jobs: after a crash, acceptance
    // restarts at n_accepted and no line becomes two jobs.
    auto& guard = c_->stmt("UPDATE batches SET n_accepted=? WHERE id=? AND status IN ('validating','in_progress')");
    guard.bind_all(next_line, b.id).run();
    if (c_->db.changes() == 0) {
      moved_on = true;
      throw std::runtime_error("batch " + b.id + " is no longer accepting lines");
    }
    // NOTE: the lines that became jobs get their ids first; then each table's rows go in as
    // multi-row INSERTs (insert_rows): a statement's fixed cost (step, a cursor per index opened and
    // closed, reset, the halt) is paid once per k_rows_per_insert rows instead of once a row.
    std::vector<const batch_line*> jobs;
    jobs.reserve(lines.size());
    char hex[16];
    for (auto& l : lines) {
      if (l.request_json.empty()) continue;
      if (l.job_id.empty()) {
        snprintf(hex, sizeof hex, "%08llx", static_cast<unsigned long long>(l.line_idx) & 0xffffffffULL);
        l.job_id = id_prefix + hex;
      }
      jobs.push_back(&l);
    }
    // NOTE: texts bound without copies (SQLITE_STATIC: a line's request may be long); the lines and
    // these locals outlive every step of this transaction.
    const int64_t prio = static_cast<int64_t>(priority);
    insert_rows(*c_, k_insert_jobs, jobs.size(), [&](sqlite_stmt& s) { s.bind_all_static(b.tenant, prio, now); },
                [&](sqlite_stmt& s, int p, size_t i) {
                  s.bind_static(p, jobs[i]->job_id).bind_static(p + 1, jobs[i]->request_json);
                  s.bind(p + 2, int64_t(jobs[i]->store_content));
                });
    insert_rows(*c_, k_insert_status_events, jobs.size(),
                [&](sqlite_stmt& s) { s.bind_all_static(b.tenant, status_data, now); },
                [&](sqlite_stmt& s, int p, size_t i) { s.bind_static(p, jobs[i]->job_id); });
    insert_rows(*c_, k_insert_job_keys, jobs.size(), [&](sqlite_stmt& s) { s.bind_static(1, b.key_id); },
                [&](sqlite_stmt& s, int p, size_t i) { s.bind_static(p, jobs[i]->job_id); });
    insert_rows(*c_, k_insert_batch_jobs, lines.size(), [&](sqlite_stmt& s) { s.bind_static(1, b.id); },
                [&](sqlite_stmt& s, int p, size_t i) {
                  const batch_line& l = lines[i];
                  s.bind(p, l.line_idx).bind_static(p + 1, l.custom_id).bind_static(p + 2, l.job_id);
                  s.bind_static(p + 3, l.error_json);
                });
  });
  if (!ok && !moved_on)
    for (auto& l : lines) l.job_id.clear();
  return ok;
}

int64_t batch_store::feed_cursor(const std::string& batch_id) {
  std::lock_guard lock(mu_);
  int64_t out = 0;
  try {
    auto& s = c_->stmt("SELECT value FROM service_cursors WHERE name=?");
    s.bind(1, "batch_feed:" + batch_id);
    if (s.step()) out = s.col_int(0);
  } catch (const std::exception& e) {
    spdlog::error("batch_store: feed_cursor: {}", e.what());
  }
  c_->reset_all();
  return out;
}

bool batch_store::set_feed_cursor(const std::string& batch_id, int64_t next_line) {
  std::lock_guard lock(mu_);
  return in_tx(*c_, "set_feed_cursor", [&] {
    // NOTE: only while the batch is open: a final batch's cursor was deleted with its transition.
    c_->stmt("INSERT INTO service_cursors(name, value) SELECT ?1, ?2 WHERE EXISTS (SELECT 1 FROM batches WHERE id=?3 "
             "AND status IN ('validating','in_progress','finalizing','cancelling')) "
             "ON CONFLICT(name) DO UPDATE SET value=?2")
        .bind_all("batch_feed:" + batch_id, next_line, batch_id)
        .run();
  });
}

std::vector<std::pair<int64_t, std::string>> batch_store::feed_lines(const std::string& batch_id, int64_t from,
                                                                     int32_t limit) {
  std::lock_guard lock(mu_);
  std::vector<std::pair<int64_t, std::string>> out;
  try {
    auto& s = c_->stmt("SELECT line_idx, job_id FROM batch_jobs WHERE batch_id=? AND line_idx>=? ORDER BY line_idx LIMIT ?");
    s.bind_all(batch_id, from, int64_t(limit));
    while (s.step()) out.emplace_back(s.col_int(0), s.col_text(1));
  } catch (const std::exception& e) {
    spdlog::error("batch_store: feed_lines: {}", e.what());
  }
  c_->reset_all();
  return out;
}

std::vector<std::pair<int64_t, std::string>> batch_store::queued_lines(const std::string& batch_id, int64_t from,
                                                                       int64_t below, int64_t cutoff_ms,
                                                                       int32_t limit) {
  std::lock_guard lock(mu_);
  std::vector<std::pair<int64_t, std::string>> out;
  try {
    auto& s = c_->stmt(
        "SELECT b.line_idx, b.job_id FROM batch_jobs b JOIN jobs j ON j.id=b.job_id WHERE b.batch_id=? "
        "AND b.line_idx>=? AND b.line_idx<? AND j.status='queued' AND j.hold!=1 AND j.updated_ms<? ORDER BY b.line_idx LIMIT ?");
    s.bind_all(batch_id, from, below, cutoff_ms, int64_t(limit));
    while (s.step()) out.emplace_back(s.col_int(0), s.col_text(1));
  } catch (const std::exception& e) {
    spdlog::error("batch_store: queued_lines: {}", e.what());
  }
  c_->reset_all();
  return out;
}

batch_counts batch_store::counts(const std::string& batch_id) {
  std::lock_guard lock(mu_);
  batch_counts n;
  try {
    auto& s = c_->stmt(
        "SELECT COALESCE(j.status, ''), COUNT(*) FROM batch_jobs b LEFT JOIN jobs j ON j.id=b.job_id "
        "WHERE b.batch_id=? GROUP BY 1");
    s.bind(1, batch_id);
    while (s.step()) {
      std::string st = s.col_text(0);
      int64_t k = s.col_int(1);
      n.n_lines += k;
      // NOTE: incomplete (a token limit) is an answer, as OpenAI's 200 with finish_reason "length".
      if (st.empty() || st == "failed" || st == "cancelled") {
        n.n_failed += k;
        n.n_done += k;
      } else if (st == "completed" || st == "incomplete") {
        n.n_completed += k;
        n.n_done += k;
      } else {
        n.n_open += k;
      }
    }
  } catch (const std::exception& e) {
    spdlog::error("batch_store: counts: {}", e.what());
  }
  c_->reset_all();
  return n;
}

std::vector<std::string> batch_store::open_jobs(const std::string& batch_id, int32_t limit) {
  std::lock_guard lock(mu_);
  std::vector<std::string> out;
  try {
    auto& s = c_->stmt(
        "SELECT j.id FROM batch_jobs b JOIN jobs j ON j.id=b.job_id WHERE b.batch_id=? "
        "AND j.status NOT IN ('completed','failed','cancelled','incomplete') LIMIT ?");
    s.bind_all(batch_id, int64_t(limit));
    while (s.step()) out.push_back(s.col_text(0));
  } catch (const std::exception& e) {
    spdlog::error("batch_store: open_jobs: {}", e.what());
  }
  c_->reset_all();
  return out;
}

std::vector<batch_result> batch_store::results(const std::string& batch_id, int64_t from, int32_t limit) {
  std::lock_guard lock(mu_);
  std::vector<batch_result> out;
  try {
    auto& s = c_->stmt(
        "SELECT line_idx, custom_id, job_id, error_json FROM batch_jobs WHERE batch_id=? AND line_idx>=? "
        "ORDER BY line_idx LIMIT ?");
    s.bind_all(batch_id, from, int64_t(limit));
    while (s.step()) out.push_back({s.col_int(0), s.col_text(1), s.col_text(2), s.col_text(3)});
  } catch (const std::exception& e) {
    spdlog::error("batch_store: results: {}", e.what());
  }
  c_->reset_all();
  return out;
}

int32_t batch_store::enqueue_webhooks(const batch_row& b, const std::string& type) {
  std::lock_guard lock(mu_);
  int32_t n = 0;
  in_tx(*c_, "enqueue_webhooks", [&] {
    std::vector<std::string> urls;
    auto& q = c_->stmt("SELECT url, events_json FROM openai_webhook_endpoints WHERE tenant=? ORDER BY id");
    q.bind(1, b.tenant);
    while (q.step()) {
      json ev = json::parse(q.col_text(1), nullptr, false);
      bool wanted = false;
      if (ev.is_array())
        for (const auto& x : ev) wanted = wanted || (x.is_string() && x.get<std::string>() == type);
      if (wanted) urls.push_back(q.col_text(0));
    }
    q.reset();
    int64_t now = c_->now();
    for (size_t k = 0; k < urls.size() && k < 64; ++k) {
      json body = {{"id", "evt_" + crypto::random_token(16)},
                   {"object", "event"},
                   {"created_at", now / 1000},
                   {"type", type},
                   {"data", {{"id", b.id}}}};
      // NOTE: event_id is UNIQUE; batch events take ids below every job event's (which are > 0) and
      // every response endpoint's (-(event_id*64+k+1)), one per (batch, endpoint): never twice.
      int64_t event_id = -(int64_t(1) << 60) - b.seq * 64 - int64_t(k);
      auto& ins = c_->stmt(
          "INSERT OR IGNORE INTO webhook_deliveries(id, event_id, job_id, tenant, event_type, url, payload_json, "
          "state, next_attempt_ms, created_ms, updated_ms) VALUES (?,?,?,?,?,?,?,'pending',?,?,?)");
      ins.bind_all("msg_" + crypto::random_token(16), event_id, b.id, b.tenant, type, urls[k], body.dump(), now, now,
                   now)
          .run();
      n += int32_t(c_->db.changes());
    }
  });
  return n;
}

std::vector<std::string> batch_store::delete_tenant(const std::string& tenant) {
  std::lock_guard lock(mu_);
  std::vector<std::string> paths;
  bool ok = in_tx(*c_, "delete_tenant", [&] {
    auto& f = c_->stmt("SELECT path FROM files WHERE tenant=? AND deleted_ms=0");
    f.bind(1, tenant);
    while (f.step()) paths.push_back(f.col_text(0));
    f.reset();
    c_->stmt("DELETE FROM batch_jobs WHERE batch_id IN (SELECT id FROM batches WHERE tenant=?)").bind(1, tenant).run();
    c_->stmt("DELETE FROM service_cursors WHERE name IN (SELECT 'batch_feed:' || id FROM batches WHERE tenant=?)")
        .bind(1, tenant)
        .run();
    c_->stmt("DELETE FROM job_keys WHERE job_id IN (SELECT id FROM batches WHERE tenant=?)").bind(1, tenant).run();
    c_->stmt("DELETE FROM batches WHERE tenant=?").bind(1, tenant).run();
    c_->stmt("DELETE FROM files WHERE tenant=?").bind(1, tenant).run();
  });
  if (!ok) paths.clear();
  return paths;
}

std::vector<std::string> batch_store::sweep(int64_t cutoff_ms, int32_t limit) {
  std::lock_guard lock(mu_);
  std::vector<std::string> paths;
  bool ok = in_tx(*c_, "sweep", [&] {
    std::vector<std::string> ids;
    auto& q = c_->stmt(
        "SELECT id FROM batches WHERE status IN ('completed','expired','cancelled','failed') AND "
        "MAX(completed_ms, expired_ms, cancelled_ms, failed_ms) < ? LIMIT ?");
    q.bind_all(cutoff_ms, int64_t(limit));
    while (q.step()) ids.push_back(q.col_text(0));
    q.reset();
    for (const auto& id : ids) {
      auto& f = c_->stmt(
          "SELECT path FROM files WHERE deleted_ms=0 AND id IN (SELECT output_file_id FROM batches WHERE id=?1 "
          "UNION SELECT error_file_id FROM batches WHERE id=?1)");
      f.bind(1, id);
      while (f.step()) paths.push_back(f.col_text(0));
      f.reset();
      c_->stmt("DELETE FROM files WHERE id IN (SELECT output_file_id FROM batches WHERE id=?1 "
               "UNION SELECT error_file_id FROM batches WHERE id=?1)")
          .bind(1, id)
          .run();
      c_->stmt("DELETE FROM batch_jobs WHERE batch_id=?").bind(1, id).run();
      c_->stmt("DELETE FROM job_keys WHERE job_id=?").bind(1, id).run();
      c_->stmt("DELETE FROM batches WHERE id=?").bind(1, id).run();
    }
  });
  if (!ok) paths.clear();
  return paths;
}

}  // namespace agentq::store
