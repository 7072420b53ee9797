// Applying the embedded schema migrations to an open connection (private to store/).
#pragma once

#include <cstdint>
#include <string>

namespace agentq::store {

class sqlite_db;
// Bring db up to target_version; false with *error if a migration fails or the DB is newer
// than this binary knows.
bool migrate(sqlite_db& db, int32_t target_version, std::string* error);

}  // namespace agentq::store
