// Schema migrations: migrations/NNNN_name.sql embedded at build time (agentq_migrations.inc),
// applied in order, each in its own IMMEDIATE transaction, version kept in PRAGMA user_version.
#include "store/migrations.h"

#include <string_view>

#include "store/sqlite.h"
#include "store/store.h"

namespace agentq::store {

const std::vector<migration>& migrations() {
  static const std::vector<migration> all = {
#include "agentq_migrations.inc"
  };
  return all;
}

int32_t store::latest_schema_version() { return static_cast<int32_t>(migrations().size()); }

bool migrate(sqlite_db& db, int32_t target_version, std::string* error) {
  const int32_t latest = store::latest_schema_version();
  try {
    int32_t current = db.user_version();
    if (current > latest) {
      *error = "database schema version " + std::to_string(current) + " is newer than this agentq knows (" +
               std::to_string(latest) + "); upgrade agentq or point it at another database";
      return false;
    }
    if (current > target_version) {
      *error = "database schema version " + std::to_string(current) + " is newer than the requested " +
               std::to_string(target_version);
      return false;
    }
    for (const migration& m : migrations()) {
      if (m.version <= current || m.version > target_version) continue;
      db.exec("BEGIN IMMEDIATE");
      try {
        // NOTE: re-check inside the write lock: another process may have migrated meanwhile.
        if (db.user_version() >= m.version) {
          db.exec("COMMIT");
          continue;
        }
        db.exec(m.sql);
        if (std::string_view(m.sql).find("writable_schema") != std::string_view::npos) {
          // NOTE: an edit of sqlite_schema's text (0012): schema_version + 1 makes every connection,
          // this one included, parse the schema again (SQLite's documented procedure).
          auto s = db.prepare("PRAGMA schema_version");
          s.step();
          const int64_t v = s.col_int(0);
          db.exec("PRAGMA schema_version = " + std::to_string(v + 1));
        }
        db.exec("PRAGMA user_version = " + std::to_string(m.version));
        db.exec("COMMIT");
      } catch (const sqlite_error& e) {
        db.exec("ROLLBACK");
        *error = std::string("migration ") + m.name + " failed: " + e.what();
        return false;
      }
    }
  } catch (const sqlite_error& e) {
    *error = std::string("migrate: ") + e.what();
    return false;
  }
  return true;
}

bool migrate_file(const std::string& path, int32_t target_version, std::string* error) {
  try {
    sqlite_db db(path, 5000);
    db.exec("PRAGMA journal_mode=WAL");
    return migrate(db, target_version, error);
  } catch (const sqlite_error& e) {
    *error = e.what();
    return false;
  }
}

}  // namespace agentq::store
