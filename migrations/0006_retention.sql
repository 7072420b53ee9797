-- 0006_retention (issue 33): deleted jobs become tombstones (id, tenant, final status and timestamps
-- stay; content goes), per-key retention, per-job store:false. Terminal immutability is restated:
-- a terminal job never changes until it is deleted, and a tombstone never changes at all.
ALTER TABLE jobs ADD COLUMN deleted_ms INTEGER NOT NULL DEFAULT 0;     -- > 0: a tombstone since then
ALTER TABLE jobs ADD COLUMN store_content INTEGER NOT NULL DEFAULT 1;  -- 0: store:false (content deleted once delivered)
ALTER TABLE api_keys ADD COLUMN retention_days INTEGER;                -- NULL: the server's --retention-days

DROP TRIGGER IF EXISTS jobs_terminal_immutable;
-- The one change a terminal row accepts: becoming a tombstone (same status and epoch, content emptied).
CREATE TRIGGER jobs_terminal_immutable
BEFORE UPDATE OF status, result_json, error, usage_json, lease_epoch, request_json, deleted_ms ON jobs
WHEN OLD.status IN ('completed','failed','cancelled','incomplete')
  AND NOT (OLD.deleted_ms = 0 AND NEW.deleted_ms > 0 AND NEW.status = OLD.status
           AND NEW.lease_epoch = OLD.lease_epoch AND NEW.result_json = '' AND NEW.error = ''
           AND NEW.request_json = '')
BEGIN
  SELECT RAISE(ABORT, 'job is terminal');
END;
CREATE TRIGGER jobs_tombstone_immutable BEFORE UPDATE ON jobs
WHEN OLD.deleted_ms > 0
BEGIN
  SELECT RAISE(ABORT, 'job is deleted');
END;

-- Retention's scan: live terminal jobs by finish time, and store:false jobs awaiting their deletion.
CREATE INDEX jobs_retention ON jobs(finished_ms) WHERE deleted_ms = 0 AND finished_ms > 0;
CREATE INDEX jobs_unstored ON jobs(finished_ms) WHERE deleted_ms = 0 AND store_content = 0;
-- A tenant's jobs (deletion of everything of a tenant) use jobs_tenant_created.
CREATE INDEX IF NOT EXISTS outbox_job ON outbox(job_id);
