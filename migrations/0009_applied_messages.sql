-- 0009_applied_messages (#28): remote workers' messages the control plane applied, by msg_id
-- ("<worker_id>:<incarnation>:<seq>"), with the reply it gave: a retried message (a lost reply, a
-- worker resending its batch) gets the same reply and is not applied twice (events and timeline
-- rows have no natural key; turns, tool results and terminal states are idempotent by key anyway).
-- Pruned by age (api/worker_protocol.cpp).
CREATE TABLE IF NOT EXISTS applied_messages (
  msg_id     TEXT PRIMARY KEY,
  job_id     TEXT NOT NULL,
  reply      TEXT NOT NULL,        -- the reply JSON {msg_id, status, result}
  created_ms INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS applied_messages_created ON applied_messages(created_ms);
