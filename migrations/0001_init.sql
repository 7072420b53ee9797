-- 0001_init: jobs, transcript, job_events, outbox (agentq job store schema v1).
-- Migrations are forward-only; each file runs in one transaction. 0001-0009: job store; 0010+: API.
CREATE TABLE jobs (
  id               TEXT PRIMARY KEY,
  tenant           TEXT NOT NULL,
  status           TEXT NOT NULL CHECK (status IN ('queued','running','requires_action','completed','failed','cancelled','incomplete')),
  priority         INTEGER NOT NULL DEFAULT 1,          -- 0 high, 1 normal, 2 low
  request_json     TEXT NOT NULL,
  result_json      TEXT NOT NULL DEFAULT '',
  error            TEXT NOT NULL DEFAULT '',
  usage_json       TEXT NOT NULL DEFAULT '',
  pending_json     TEXT NOT NULL DEFAULT '',
  attempts         INTEGER NOT NULL DEFAULT 0,
  lease_epoch      INTEGER NOT NULL DEFAULT 0,
  lease_owner      TEXT NOT NULL DEFAULT '',
  lease_expires_ms INTEGER NOT NULL DEFAULT 0,
  idempotency_key  TEXT,
  request_hash     TEXT NOT NULL DEFAULT '',
  created_ms       INTEGER NOT NULL,
  started_ms       INTEGER NOT NULL DEFAULT 0,
  finished_ms      INTEGER NOT NULL DEFAULT 0,
  updated_ms       INTEGER NOT NULL,
  deadline_ms      INTEGER NOT NULL DEFAULT 0
);
CREATE UNIQUE INDEX jobs_idempotency ON jobs(tenant, idempotency_key) WHERE idempotency_key IS NOT NULL;
CREATE INDEX jobs_tenant_created ON jobs(tenant, created_ms);
CREATE INDEX jobs_status ON jobs(status, updated_ms);

-- Terminal immutability, enforced below the application too.
CREATE TRIGGER jobs_terminal_immutable BEFORE UPDATE OF status, result_json, error, usage_json, lease_epoch ON jobs
WHEN OLD.status IN ('completed','failed','cancelled','incomplete')
BEGIN
  SELECT RAISE(ABORT, 'job is terminal');
END;

CREATE TABLE transcript (
  job_id          TEXT NOT NULL,
  seq             INTEGER NOT NULL,
  turn_idx        INTEGER NOT NULL,                     -- -1 = input message
  role            TEXT NOT NULL,
  content         TEXT NOT NULL DEFAULT '',
  tool_calls_json TEXT NOT NULL DEFAULT '',
  tool_call_id    TEXT NOT NULL DEFAULT '',
  name            TEXT NOT NULL DEFAULT '',
  usage_json      TEXT NOT NULL DEFAULT '',
  created_ms      INTEGER NOT NULL,
  PRIMARY KEY (job_id, seq)
);
CREATE UNIQUE INDEX transcript_turn ON transcript(job_id, turn_idx) WHERE role = 'assistant';

CREATE TABLE tool_results (
  job_id     TEXT NOT NULL,
  call_id    TEXT NOT NULL,
  name       TEXT NOT NULL DEFAULT '',
  output     TEXT NOT NULL,
  is_error   INTEGER NOT NULL DEFAULT 0,
  created_ms INTEGER NOT NULL,
  PRIMARY KEY (job_id, call_id)
);

CREATE TABLE job_events (
  id         INTEGER PRIMARY KEY AUTOINCREMENT,         -- AUTOINCREMENT: never reused (SSE ids)
  job_id     TEXT NOT NULL,
  type       TEXT NOT NULL,
  data_json  TEXT NOT NULL DEFAULT '{}',
  created_ms INTEGER NOT NULL
);
CREATE INDEX job_events_job ON job_events(job_id, id);

CREATE TABLE outbox (
  id              INTEGER PRIMARY KEY AUTOINCREMENT,
  kind            TEXT NOT NULL,                         -- publish | continue | terminal
  job_id          TEXT NOT NULL,
  payload_json    TEXT NOT NULL DEFAULT '{}',
  target          TEXT NOT NULL DEFAULT '',
  attempts        INTEGER NOT NULL DEFAULT 0,
  next_attempt_ms INTEGER NOT NULL DEFAULT 0,
  created_ms      INTEGER NOT NULL
);
CREATE INDEX outbox_kind ON outbox(kind, next_attempt_ms, id);
