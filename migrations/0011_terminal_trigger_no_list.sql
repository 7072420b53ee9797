-- 0011_terminal_trigger_no_list (#29, session 23): jobs_terminal_immutable restated with its status test
-- as equalities joined by OR instead of an IN list. Same rule (0006_retention). NOTE: SQLite builds an
-- IN list's values into an ephemeral table each time the trigger's WHEN runs (open, create, insert 4
-- keys, close: ~6 % of the store writer's CPU), and the trigger runs on every UPDATE of those columns:
-- a claim, a turn's usage, a job's end. The OR form compares in place.
DROP TRIGGER IF EXISTS jobs_terminal_immutable;
CREATE TRIGGER jobs_terminal_immutable
BEFORE UPDATE OF status, result_json, error, usage_json, lease_epoch, request_json, deleted_ms ON jobs
WHEN (OLD.status = 'completed' OR OLD.status = 'failed' OR OLD.status = 'cancelled' OR OLD.status = 'incomplete')
  AND NOT (OLD.deleted_ms = 0 AND NEW.deleted_ms > 0 AND NEW.status = OLD.status
           AND NEW.lease_epoch = OLD.lease_epoch AND NEW.result_json = '' AND NEW.error = ''
           AND NEW.request_json = '')
BEGIN
  SELECT RAISE(ABORT, 'job is terminal');
END;
