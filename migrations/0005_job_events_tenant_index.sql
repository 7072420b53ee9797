-- 0005_job_events_tenant_index: tail one tenant's events in id order (GET /v1/events, the dashboard's
-- live stream) without scanning other tenants' events.
CREATE INDEX IF NOT EXISTS job_events_tenant ON job_events(tenant, id);
