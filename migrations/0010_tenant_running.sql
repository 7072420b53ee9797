-- 0010_tenant_running (#29): the per-tenant concurrent running jobs limit (--tenant-max-running).
-- hold: 0 = none; 1 = held (queued, out of Redis: its claim found the tenant at its limit; it waits
-- here until a slot frees); 2 = promoted (a slot freed and a "publish" outbox row sent it back; its
-- claim goes first). Only jobs with a hold are in the index, so jobs of tenants without the limit
-- touch it never (store/running_limit.cpp).
ALTER TABLE jobs ADD COLUMN hold INTEGER NOT NULL DEFAULT 0;
CREATE INDEX IF NOT EXISTS jobs_hold ON jobs(tenant, hold, priority, created_ms) WHERE hold != 0 AND status = 'queued';
