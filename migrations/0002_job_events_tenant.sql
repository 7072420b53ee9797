-- 0002_job_events_tenant: events carry the job's tenant (tenant-scoped tailing without a join).
ALTER TABLE job_events ADD COLUMN tenant TEXT NOT NULL DEFAULT '';
UPDATE job_events SET tenant = (SELECT tenant FROM jobs WHERE jobs.id = job_events.job_id);
