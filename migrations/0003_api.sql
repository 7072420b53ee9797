-- API tables: keys (hashed), webhook deliveries and attempts, endpoints disabled by 410,
-- which key submitted each job (webhook signing), and the webhook sender's event cursor.
CREATE TABLE IF NOT EXISTS api_keys (
  id             TEXT PRIMARY KEY,                 -- "key_<token>"
  tenant         TEXT NOT NULL,
  key_hash       TEXT NOT NULL UNIQUE,             -- sha256 hex of the bearer key
  key_prefix     TEXT NOT NULL,                    -- first characters, for listings
  is_admin       INTEGER NOT NULL DEFAULT 0,
  webhook_secret TEXT NOT NULL,                    -- whsec_...; signs this key's webhooks
  created_ms     INTEGER NOT NULL,
  revoked_ms     INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS api_keys_tenant ON api_keys(tenant);
CREATE TABLE IF NOT EXISTS webhook_deliveries (
  id              TEXT PRIMARY KEY,                -- webhook-id ("msg_<token>"), same across retries
  event_id        INTEGER NOT NULL UNIQUE,         -- job_events.id that caused it
  job_id          TEXT NOT NULL,
  tenant          TEXT NOT NULL,
  event_type      TEXT NOT NULL,                   -- job.completed, ...
  url             TEXT NOT NULL,
  payload_json    TEXT NOT NULL,                   -- body, fixed at enqueue (same bytes on every retry)
  state           TEXT NOT NULL DEFAULT 'pending', -- pending|succeeded|failed|disabled
  n_attempts      INTEGER NOT NULL DEFAULT 0,
  next_attempt_ms INTEGER NOT NULL DEFAULT 0,
  created_ms      INTEGER NOT NULL,
  updated_ms      INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS webhook_deliveries_due ON webhook_deliveries(state, next_attempt_ms);
CREATE INDEX IF NOT EXISTS webhook_deliveries_job ON webhook_deliveries(job_id);
CREATE TABLE IF NOT EXISTS webhook_attempts (
  id          INTEGER PRIMARY KEY AUTOINCREMENT,
  delivery_id TEXT NOT NULL,
  attempt_idx INTEGER NOT NULL,                    -- 1..
  status_code INTEGER NOT NULL DEFAULT 0,          -- 0 = no response
  error       TEXT NOT NULL DEFAULT '',
  duration_ms INTEGER NOT NULL DEFAULT 0,
  created_ms  INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS webhook_attempts_delivery ON webhook_attempts(delivery_id, attempt_idx);
CREATE TABLE IF NOT EXISTS webhook_endpoints (
  tenant      TEXT NOT NULL,
  url         TEXT NOT NULL,
  disabled_ms INTEGER NOT NULL DEFAULT 0,          -- set when the endpoint answered 410 Gone
  reason      TEXT NOT NULL DEFAULT '',
  PRIMARY KEY (tenant, url)
);
CREATE TABLE IF NOT EXISTS job_keys (
  job_id TEXT PRIMARY KEY,                         -- the API key that submitted the job (webhook signing)
  key_id TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS service_cursors (
  name  TEXT PRIMARY KEY,                          -- "webhooks": last job_events.id scanned
  value INTEGER NOT NULL
);
