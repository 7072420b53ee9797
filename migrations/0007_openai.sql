-- 0007_openai (issue 27): the OpenAI surface's tables, created until now by
-- service/api/openai_registry.cpp at open (IF NOT EXISTS here too: files that ran that code have them).
-- openai_deleted_responses: responses deleted before DELETE /v1/responses/{id} became a job
-- deletion (store::delete_job, 0006's tombstones); read only, so those stay 404.
CREATE TABLE IF NOT EXISTS openai_deleted_responses (
  job_id TEXT PRIMARY KEY, tenant TEXT NOT NULL, deleted_ms INTEGER NOT NULL);
-- OpenAI-shaped webhook endpoints (POST/GET/DELETE /v1/webhook_endpoints).
CREATE TABLE IF NOT EXISTS openai_webhook_endpoints (
  id TEXT PRIMARY KEY, tenant TEXT NOT NULL, url TEXT NOT NULL,
  events_json TEXT NOT NULL, created_ms INTEGER NOT NULL);
CREATE INDEX IF NOT EXISTS openai_webhook_endpoints_tenant ON openai_webhook_endpoints(tenant);
