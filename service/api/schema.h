// The API's own tables (api_keys, webhook_deliveries, webhook_attempts, webhook_endpoints,
// job_keys, service_cursors) on the job store's SQLite file. The DDL is migrations/0010_api.sql's.
#pragma once

#include <string>

namespace agentq::store {
class sqlite_db;
}

namespace agentq::api {

// The DDL (idempotent: CREATE ... IF NOT EXISTS).
const char* api_schema_sql();
// Create the API tables if missing. NOTE: also run at start-up so the API works on a
// database whose job-store migrations stop short of 0010. false with *error on failure.
bool ensure_api_schema(store::sqlite_db& db, std::string* error);

}  // namespace agentq::api
