// Online backup of the job store: a consistent copy of the SQLite file taken while agentqd runs
// (`agentqd backup --data-dir D --to FILE`), and its command-line entry point.
#pragma once

#include <cstdint>
#include <string>

namespace agentq::ops {

struct backup_result {
  bool ok = false;
  std::string error;
  int64_t n_bytes = 0;       // the copy's size
  int64_t n_pages = 0;
  double seconds = 0;
  std::string integrity;     // PRAGMA quick_check of the copy ("ok")
};

// Copy the database at db_path to to_path (written as to_path.tmp, fsynced, then renamed).
// NOTE: one read transaction on the source (SQLite's backup API, all pages in one step): in WAL
// mode a reader never blocks writers, so the server keeps committing while the copy runs, and the
// copy is the database as of the moment the read began.
backup_result backup_database(const std::string& db_path, const std::string& to_path);

// `agentqd backup --data-dir DIR --to FILE`: argv after "backup". Exit status: 0 ok, 1 failure, 2 usage.
int backup_main(int argc, char** argv);

}  // namespace agentq::ops
