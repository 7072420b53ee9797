// Store-private: tombstoning jobs and the scans retention runs (issue 33), as SQL on a conn.
// Called from the store's writer (deletes) and readers (scans); see store.h for the contracts.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "store/conn.h"

namespace agentq::store::deletion {

// Tombstone one live terminal job: content rows deleted, the jobs row emptied (status and times stay).
// false when the job is absent, not terminal or already a tombstone (nothing changed).
bool tombstone(conn& c, const std::string& job_id, int64_t now);
// Live terminal jobs finished before now - (the key's retention_days, else default_retention_ms).
std::vector<std::string> select_expired(conn& c, int64_t now, int64_t default_retention_ms, int32_t limit);
// store:false jobs that are terminal with their terminal webhook (if any) delivered or given up.
std::vector<std::string> select_unstored_done(conn& c, int32_t limit);
// PRAGMA incremental_vacuum(max_pages): the number of pages given back.
int64_t incremental_vacuum(conn& c, int32_t max_pages);
// Make the database incremental-auto-vacuum: set before the first table, or set + VACUUM once on an
// older file (a one-off rewrite; logged). false with *error when VACUUM could not run (retried next open).
bool ensure_incremental_vacuum(sqlite_db& db, std::string* error);

}  // namespace agentq::store::deletion
