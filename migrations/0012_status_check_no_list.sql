-- 0012_status_check_no_list (#29, session 25): the jobs table's CHECK on status restated as equalities
-- joined by OR instead of an IN list (same rule, 0001_init). NOTE: SQLite builds an IN list's values
-- into an ephemeral table (open, create, insert 7 keys, close) each time the CHECK runs: every INSERT
-- of a job (a submit) and every UPDATE that sets status (a claim, a job's end), ~9 % of the writer's
-- instructions per submit (docs/queue_perf.md "Session 25 (branch `queue11b`)"); 0011 did the same
-- for the terminal trigger. A CHECK's text changes nothing on disk, so it is edited in place
-- (https://www.sqlite.org/lang_altertable.html, "making other kinds of table schema changes"); the
-- runner bumps schema_version after a migration that sets writable_schema, so every connection
-- reloads the schema, and lifts SQLite's defensive mode (which refuses such edits) for it. A database whose CHECK text differs is left as it is (the replace matches nothing).
PRAGMA writable_schema = ON;
UPDATE sqlite_master
SET sql = replace(sql,
  'CHECK (status IN (''queued'',''running'',''requires_action'',''completed'',''failed'',''cancelled'',''incomplete''))',
  'CHECK (status = ''queued'' OR status = ''running'' OR status = ''requires_action'' OR status = ''completed'' OR status = ''failed'' OR status = ''cancelled'' OR status = ''incomplete'')')
WHERE type = 'table' AND name = 'jobs';
PRAGMA writable_schema = OFF;
