-- Observability (issue 9): per-worker engine snapshots for /metrics and /v1/engine/stats,
-- and per-job timeline rows (spans and marks) for /v1/jobs/{id}/timeline.

-- One row per worker per ~1 s while busy; the API process serves the latest per worker
-- and the recent series. Pruned to the last hour by the writer.
CREATE TABLE engine_samples (
  worker_id TEXT NOT NULL,
  at_ms INTEGER NOT NULL,
  stats TEXT NOT NULL,  -- JSON object of the sample's figures (see service/metrics/engine_sample.h)
  PRIMARY KEY (worker_id, at_ms)
) WITHOUT ROWID;
CREATE INDEX engine_samples_at ON engine_samples(at_ms);

-- Timeline entries: a span has end_ms (NULL while open), a mark has end_ms = start_ms and is_mark = 1.
CREATE TABLE job_timeline (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  job_id TEXT NOT NULL,
  is_mark INTEGER NOT NULL DEFAULT 0,
  kind TEXT NOT NULL,
  start_ms INTEGER NOT NULL,
  end_ms INTEGER,
  turn INTEGER,
  label TEXT NOT NULL DEFAULT '',
  attrs TEXT NOT NULL DEFAULT '{}'
);
CREATE INDEX job_timeline_job ON job_timeline(job_id, start_ms);
