// The API's tables come from migrations/0003_api.sql; this runs the store's migrations on a
// connection opened by the key store or the webhook sender (e.g. `agentq keys create --data-dir`).
#include "api/schema.h"

#include <exception>

#include "store/migrations.h"
#include "store/sqlite.h"
#include "store/store.h"

namespace agentq::api {

bool ensure_api_schema(store::sqlite_db& db, std::string* error) {
  try {
    return store::migrate(db, store::store::latest_schema_version(), error);
  } catch (const std::exception& e) {
    if (error) *error = std::string("migrating the database failed: ") + e.what();
    return false;
  }
}

}  // namespace agentq::api
