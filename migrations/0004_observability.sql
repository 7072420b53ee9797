-- 0004_observability (issue 9): per-worker engine samples and metrics for /metrics and
-- /v1/engine/stats, and per-job timeline rows (spans and marks) for /v1/jobs/{id}/timeline.

-- One row per worker about every second while busy (less often when idle); the API serves
-- the recent series. Pruned to the last hour by the writer (service/obs/obs_store.cpp).
CREATE TABLE engine_samples (
  worker_id TEXT NOT NULL,
  at_ms     INTEGER NOT NULL,
  stats     TEXT NOT NULL,   -- JSON: tokens_per_s, batch_size, kv_blocks_*, ... (see obs_store.h)
  PRIMARY KEY (worker_id, at_ms)
) WITHOUT ROWID;
CREATE INDEX engine_samples_at ON engine_samples(at_ms);

-- The latest metric families of each worker process (its /metrics share), replaced in place.
CREATE TABLE worker_metrics (
  worker_id TEXT PRIMARY KEY,
  at_ms     INTEGER NOT NULL,
  families  TEXT NOT NULL    -- JSON array of metric families (service/metrics/exposition.h)
);

-- Timeline entries the worker records (fenced on the job's lease epoch): tool calls, KV parking.
-- Queue waits, claims, turns and webhooks are derived from jobs/job_events/transcript/webhook rows.
CREATE TABLE job_timeline (
  id       INTEGER PRIMARY KEY AUTOINCREMENT,
  job_id   TEXT NOT NULL,
  is_mark  INTEGER NOT NULL DEFAULT 0,   -- 1 = a mark at start_ms (end_ms unused)
  kind     TEXT NOT NULL,                -- tool | parked | ...
  start_ms INTEGER NOT NULL,
  end_ms   INTEGER,                      -- NULL while the span is open
  turn     INTEGER,
  label    TEXT NOT NULL DEFAULT '',
  attrs    TEXT NOT NULL DEFAULT '{}'
);
CREATE INDEX job_timeline_job ON job_timeline(job_id, start_ms);
