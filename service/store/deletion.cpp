// Tombstones, retention scans and space reclaim for the job store (see deletion.h, store.h).
#include "store/deletion.h"

#include <spdlog/spdlog.h>

namespace agentq::store::deletion {

namespace {
constexpr int64_t k_day_ms = 86400000;
}

bool tombstone(conn& c, const std::string& job_id, int64_t now) {
  // NOTE: the row update comes first: it is the check (terminal, live) and the trigger
  // jobs_terminal_immutable admits exactly this change of a terminal row (migrations/0006).
  c.stmt("UPDATE jobs SET request_json='', result_json='', error='', pending_json='', idempotency_key=NULL, "
         "request_hash='', lease_owner='', deleted_ms=?1 WHERE id=?2 AND deleted_ms=0 AND "
         "status IN ('completed','failed','cancelled','incomplete')")
      .bind_all(now, job_id)
      .run();
  if (c.db.changes() == 0) return false;
  static const char* const k_children[] = {
      "DELETE FROM transcript WHERE job_id=?",
      "DELETE FROM tool_results WHERE job_id=?",
      "DELETE FROM job_events WHERE job_id=?",
      "DELETE FROM job_timeline WHERE job_id=?",
      "DELETE FROM webhook_attempts WHERE delivery_id IN (SELECT id FROM webhook_deliveries WHERE job_id=?)",
      "DELETE FROM webhook_deliveries WHERE job_id=?",
      "DELETE FROM outbox WHERE job_id=?",
      "DELETE FROM job_keys WHERE job_id=?",
  };
  for (const char* sql : k_children) c.stmt(sql).bind(1, job_id).run();
  return true;
}

std::vector<std::string> select_expired(conn& c, int64_t now, int64_t default_retention_ms, int32_t limit) {
  // NOTE: the scan walks jobs_retention (oldest finish first) only up to the shortest retention in
  // force, so jobs kept longer by a key's override are re-read at most up to that horizon. The unary
  // + on status keeps the planner off jobs_status (which would scan every terminal job and tombstone).
  auto& s = c.stmt(
      "SELECT j.id FROM jobs j LEFT JOIN job_keys jk ON jk.job_id=j.id LEFT JOIN api_keys k ON k.id=jk.key_id "
      "WHERE j.deleted_ms=0 AND j.finished_ms>0 AND +j.status IN ('completed','failed','cancelled','incomplete') "
      "AND j.finished_ms < ?1 - MIN(?2, COALESCE((SELECT MIN(retention_days) FROM api_keys "
      "                                            WHERE retention_days IS NOT NULL) * ?3, ?2)) "
      "AND j.finished_ms < ?1 - COALESCE(k.retention_days * ?3, ?2) "
      "ORDER BY j.finished_ms LIMIT ?4");
  s.bind_all(now, default_retention_ms, k_day_ms, int64_t(limit));
  std::vector<std::string> out;
  while (s.step()) out.push_back(s.col_text(0));
  return out;
}

std::vector<std::string> select_unstored_done(conn& c, int32_t limit) {
  // Done = no delivery still pending, and either no webhook wants the terminal event or a delivery
  // of it exists (succeeded, failed or disabled: retrying is over).
  auto& s = c.stmt(
      "SELECT j.id FROM jobs j WHERE j.deleted_ms=0 AND j.store_content=0 AND j.finished_ms>0 "
      "AND +j.status IN ('completed','failed','cancelled','incomplete') "
      "AND NOT EXISTS (SELECT 1 FROM webhook_deliveries d WHERE d.job_id=j.id AND d.state='pending') "
      "AND (json_extract(j.request_json, '$.webhook.url') IS NULL "
      "  OR (json_type(j.request_json, '$.webhook.events') = 'array' AND NOT EXISTS ("
      "      SELECT 1 FROM json_each(j.request_json, '$.webhook.events') e WHERE e.value = 'job.' || j.status)) "
      "  OR EXISTS (SELECT 1 FROM webhook_deliveries d WHERE d.job_id=j.id AND d.event_type = 'job.' || j.status)) "
      "ORDER BY j.finished_ms LIMIT ?1");
  s.bind(1, int64_t(limit));
  std::vector<std::string> out;
  while (s.step()) out.push_back(s.col_text(0));
  return out;
}

int64_t incremental_vacuum(conn& c, int32_t max_pages) {
  auto& f = c.stmt("PRAGMA freelist_count");
  int64_t n_before = f.step() ? f.col_int(0) : 0;
  f.reset();
  auto& v = c.stmt("PRAGMA incremental_vacuum(" + std::to_string(max_pages) + ")");
  while (v.step()) {
  }
  auto& g = c.stmt("PRAGMA freelist_count");
  int64_t n_after = g.step() ? g.col_int(0) : 0;
  return n_before - n_after;
}

bool ensure_incremental_vacuum(sqlite_db& db, std::string* error) {
  auto scalar = [&db](const char* sql) {
    auto s = db.prepare(sql);  // finalized at the end of this scope: VACUUM needs no statement running
    return s.step() ? s.col_int(0) : int64_t{-1};
  };
  if (scalar("PRAGMA auto_vacuum") == 2) return true;
  bool empty = scalar("SELECT count(*) FROM sqlite_master") == 0;
  try {
    db.exec("PRAGMA auto_vacuum=INCREMENTAL");
    // NOTE: auto_vacuum of an existing database changes only through VACUUM, which rewrites the
    // file once (exclusive; seconds per GB): done at the first open by a version with 0006. A new
    // file needs it too once WAL mode has written its header (instant: nothing to copy).
    if (!empty) spdlog::info("store: converting the database to incremental auto-vacuum (one VACUUM)");
    db.exec("VACUUM");
  } catch (const sqlite_error& e) {
    if (error) *error = e.what();
    return false;
  }
  return true;
}

}  // namespace agentq::store::deletion
