// Observability tables: samples, worker metric families, fenced timeline writes, counts
// (see obs_store.h). The timeline read is in obs/timeline.cpp.
#include "obs/obs_store.h"

#include <spdlog/spdlog.h>

#include "api/schema.h"
#include "store/sqlite.h"
#include "store/store.h"

namespace agentq::obs {

using json = nlohmann::json;

json to_json(const engine_sample& s) {
  return {{"at_ms", s.at_ms},
          {"tokens_per_s", s.tokens_per_s},
          {"prompt_tokens_per_s", s.prompt_tokens_per_s},
          {"batch_size", s.batch_size},
          {"running", s.running},
          {"waiting", s.waiting},
          {"kv_blocks_used", s.kv_blocks_used},
          {"kv_blocks_total", s.kv_blocks_total},
          {"kv_blocks_parked", s.kv_blocks_parked},
          {"kv_blocks_spilled", s.kv_blocks_spilled},
          {"prefix_hit_rate", s.prefix_hit_rate}};
}

obs_store::obs_store(std::unique_ptr<store::sqlite_db> db) : db_(std::move(db)) {}
obs_store::~obs_store() = default;

std::unique_ptr<obs_store> obs_store::open(const std::string& db_path, std::string* error) {
  try {
    auto db = std::make_unique<store::sqlite_db>(db_path, 5000);
    db->exec("PRAGMA journal_mode=WAL");
    // NOTE: observability rows may lose the last moments on power loss; WAL + NORMAL skips an fsync per write.
    db->exec("PRAGMA synchronous=NORMAL");
    if (!api::ensure_api_schema(*db, error)) return nullptr;
    return std::unique_ptr<obs_store>(new obs_store(std::move(db)));
  } catch (const std::exception& e) {
    if (error) *error = std::string("opening the observability tables: ") + e.what();
    return nullptr;
  }
}

bool obs_store::write_sample(const std::string& worker_id, const engine_sample& s, const json& families) {
  json stats = to_json(s);
  stats.erase("at_ms");
  std::lock_guard lock(mu_);
  try {
    db_->exec("BEGIN IMMEDIATE");
    db_->prepare("INSERT OR REPLACE INTO engine_samples(worker_id, at_ms, stats) VALUES (?,?,?)")
        .bind_all(worker_id, s.at_ms, stats.dump())
        .run();
    db_->prepare("INSERT OR REPLACE INTO worker_metrics(worker_id, at_ms, families) VALUES (?,?,?)")
        .bind_all(worker_id, s.at_ms, families.dump())
        .run();
    db_->exec("COMMIT");
    return true;
  } catch (const std::exception& e) {
    try {
      db_->exec("ROLLBACK");
    } catch (...) {
    }
    spdlog::warn("obs: writing an engine sample failed: {}", e.what());
    return false;
  }
}

void obs_store::prune(int64_t before_ms) {
  std::lock_guard lock(mu_);
  try {
    db_->prepare("DELETE FROM engine_samples WHERE at_ms < ?").bind(1, before_ms).run();
    db_->prepare("DELETE FROM worker_metrics WHERE at_ms < ?").bind(1, before_ms).run();
  } catch (const std::exception& e) {
    spdlog::warn("obs: pruning engine samples failed: {}", e.what());
  }
}

bool obs_store::record(const std::string& job_id, int64_t epoch, const timeline_entry& e) {
  std::lock_guard lock(mu_);
  try {
    auto s = db_->prepare(
        "INSERT INTO job_timeline(job_id, is_mark, kind, start_ms, end_ms, turn, label, attrs) "
        "SELECT ?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8 "
        "WHERE EXISTS (SELECT 1 FROM jobs WHERE id=?1 AND lease_epoch=?9 AND deleted_ms=0)");  // not a tombstone
    s.bind_all(job_id, int64_t(e.is_mark ? 1 : 0), e.kind, e.start_ms);
    if (e.end_ms)
      s.bind(5, *e.end_ms);
    else
      s.bind_null(5);
    if (e.turn)
      s.bind(6, *e.turn);
    else
      s.bind_null(6);
    s.bind(7, e.label).bind(8, e.attrs.dump()).bind(9, epoch);
    s.run();
    return db_->changes() > 0;
  } catch (const std::exception& ex) {
    spdlog::warn("obs: timeline write for job {} failed: {}", job_id, ex.what());
    return false;
  }
}

bool obs_store::close_open(const std::string& job_id, int64_t epoch, const std::string& kind, int64_t end_ms) {
  std::lock_guard lock(mu_);
  try {
    // NOTE: read first (issue 29): every job's end calls this, and most jobs have no open span. An
    // UPDATE takes SQLite's write lock even when it changes nothing, and the store's writer then
    // meets a busy lock and sleeps (1, 2, 5 ms ...) with every submit of its group waiting.
    auto open =
        db_->prepare("SELECT 1 FROM job_timeline WHERE job_id=?1 AND kind=?2 AND end_ms IS NULL AND is_mark=0 LIMIT 1");
    open.bind_all(job_id, kind);
    if (!open.step()) return true;
    open.reset();
    db_->prepare(
           "UPDATE job_timeline SET end_ms=?1 WHERE job_id=?2 AND kind=?3 AND end_ms IS NULL AND is_mark=0 "
           "AND EXISTS (SELECT 1 FROM jobs WHERE id=?2 AND lease_epoch=?4 AND deleted_ms=0)")
        .bind_all(end_ms, job_id, kind, epoch)
        .run();
    return true;
  } catch (const std::exception& ex) {
    spdlog::warn("obs: timeline update for job {} failed: {}", job_id, ex.what());
    return false;
  }
}

json obs_store::engine_stats(int64_t since_ms, int64_t now_ms) {
  json workers = json::array();
  std::lock_guard lock(mu_);
  // NOTE: at most an hour is kept (prune); 4000 rows per request bounds the answer anyway.
  auto s = db_->prepare(
      "SELECT worker_id, at_ms, stats FROM engine_samples WHERE at_ms > ? "
      "ORDER BY worker_id, at_ms LIMIT 20000");
  s.bind(1, since_ms);
  while (s.step()) {
    std::string wid = s.col_text(0);
    if (workers.empty() || workers.back()["worker_id"] != wid)
      workers.push_back({{"worker_id", wid}, {"samples", json::array()}});
    json sample = json::parse(s.col_text(2), nullptr, false);
    if (!sample.is_object()) continue;
    json out = {{"at_ms", s.col_int(1)}};
    out.update(sample);
    workers.back()["samples"].push_back(std::move(out));
  }
  return {{"object", "engine.stats"}, {"now_ms", now_ms}, {"workers", workers}};
}

std::vector<worker_families> obs_store::latest_families(int64_t min_at_ms) {
  std::vector<worker_families> out;
  std::lock_guard lock(mu_);
  auto s = db_->prepare("SELECT worker_id, at_ms, families FROM worker_metrics WHERE at_ms >= ? ORDER BY worker_id");
  s.bind(1, min_at_ms);
  while (s.step()) {
    json f = json::parse(s.col_text(2), nullptr, false);
    if (f.is_discarded()) continue;
    out.push_back({s.col_text(0), s.col_int(1), std::move(f)});
  }
  return out;
}

std::vector<job_count> obs_store::job_counts() {
  std::vector<job_count> out;
  std::lock_guard lock(mu_);
  auto s = db_->prepare("SELECT status, priority, COUNT(*), MIN(updated_ms) FROM jobs GROUP BY status, priority");
  while (s.step()) out.push_back({s.col_text(0), int32_t(s.col_int(1)), s.col_int(2), s.col_int(3)});
  return out;
}

int64_t obs_store::n_held_jobs() {
  std::lock_guard lock(mu_);
  auto s = db_->prepare("SELECT COUNT(*) FROM jobs INDEXED BY jobs_hold WHERE hold=1 AND hold != 0 AND status = 'queued'");
  return s.step() ? s.col_int(0) : 0;
}

}  // namespace agentq::obs
