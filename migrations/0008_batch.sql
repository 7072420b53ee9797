-- 0008_batch (issue 29): the Batch API. files: uploaded JSONL inputs and the output / error files a
-- batch writes (the bytes live under DATA_DIR/files; the row is the index). batches: one per
-- POST /v1/batches, its status, counts and timestamps. batch_jobs: the jobs a batch's lines became.
CREATE TABLE IF NOT EXISTS files (
  id          TEXT PRIMARY KEY,                    -- "file-<hex>"
  tenant      TEXT NOT NULL,
  purpose     TEXT NOT NULL,                       -- batch | batch_output
  filename    TEXT NOT NULL,
  bytes       INTEGER NOT NULL,
  n_lines     INTEGER NOT NULL DEFAULT 0,          -- requests (purpose batch)
  endpoints   TEXT NOT NULL DEFAULT '',            -- the urls its lines name, comma-separated (purpose batch)
  path        TEXT NOT NULL,                       -- on disk, relative to DATA_DIR/files
  created_ms  INTEGER NOT NULL,
  deleted_ms  INTEGER NOT NULL DEFAULT 0           -- > 0: deleted (bytes removed; the row answers 404)
);
CREATE INDEX IF NOT EXISTS files_tenant ON files(tenant, created_ms);
CREATE TABLE IF NOT EXISTS batches (
  seq               INTEGER PRIMARY KEY AUTOINCREMENT, -- order of creation (list cursor, webhook ids)
  id                TEXT NOT NULL UNIQUE,              -- "batch_<hex>"
  tenant            TEXT NOT NULL,
  key_id            TEXT NOT NULL,                     -- the key that created it (its jobs' key; webhook signing)
  endpoint          TEXT NOT NULL,
  input_file_id     TEXT NOT NULL,
  completion_window TEXT NOT NULL,
  metadata_json     TEXT NOT NULL DEFAULT 'null',
  status            TEXT NOT NULL CHECK (status IN ('validating','in_progress','finalizing','completed','expired',
                                                     'cancelling','cancelled','failed')),
  errors_json       TEXT NOT NULL DEFAULT '',          -- failed: {"object":"list","data":[...]}
  output_file_id    TEXT NOT NULL DEFAULT '',
  error_file_id     TEXT NOT NULL DEFAULT '',
  n_total           INTEGER NOT NULL DEFAULT 0,
  n_accepted        INTEGER NOT NULL DEFAULT 0,        -- input lines turned into jobs (resume point after a crash)
  n_completed       INTEGER NOT NULL DEFAULT 0,
  n_failed          INTEGER NOT NULL DEFAULT 0,
  created_ms        INTEGER NOT NULL,
  expires_ms        INTEGER NOT NULL,
  in_progress_ms    INTEGER NOT NULL DEFAULT 0,
  finalizing_ms     INTEGER NOT NULL DEFAULT 0,
  completed_ms      INTEGER NOT NULL DEFAULT 0,
  failed_ms         INTEGER NOT NULL DEFAULT 0,
  expired_ms        INTEGER NOT NULL DEFAULT 0,
  cancelling_ms     INTEGER NOT NULL DEFAULT 0,
  cancelled_ms      INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS batches_tenant ON batches(tenant, seq);
CREATE INDEX IF NOT EXISTS batches_open ON batches(status) WHERE status IN ('validating','in_progress','finalizing','cancelling');
CREATE TABLE IF NOT EXISTS batch_jobs (
  batch_id   TEXT NOT NULL,
  line_idx   INTEGER NOT NULL,                     -- 0-based request line in the input file
  custom_id  TEXT NOT NULL,
  job_id     TEXT NOT NULL,                        -- '' when the line was refused at acceptance (error file)
  error_json TEXT NOT NULL DEFAULT '',             -- that refusal: {"code","message","param"}
  PRIMARY KEY (batch_id, line_idx)
) WITHOUT ROWID;
-- Back-pressure (--max-queue-depth): queued jobs per tenant, counted often.
CREATE INDEX IF NOT EXISTS jobs_queued_tenant ON jobs(tenant) WHERE status = 'queued';
