// The API's own tables (api_keys, webhook_deliveries, webhook_attempts, webhook_endpoints,
// job_keys, service_cursors) live on the job store's SQLite file; migrations/0003_api.sql creates them.
#pragma once

#include <string>

namespace agentq::store {
class sqlite_db;
}

namespace agentq::api {

// Bring the database to the latest schema (all migrations, the API's included) before the key
// store or the webhook sender uses it on its own connection. false with *error on failure,
// including a database newer than this binary.
bool ensure_api_schema(store::sqlite_db& db, std::string* error);

}  // namespace agentq::api
