// Schema migrations: migrations/NNNN_name.sql embedded at build time (agentq_migrations.inc),
// applied in order, each in its own IMMEDIATE transaction, version kept in PRAGMA user_version.
#include "store/migrations.h"

#include <string_view>

#include <sqlite3.h>

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

namespace {

// SQLite's defensive mode off while it lives (when asked), then back as it was.
class defensive_off {
 public:
  defensive_off(sqlite_db& db, bool on) : db_(on ? &db : nullptr) {
    if (!db_) return;
    sqlite3_db_config(db_->handle(), SQLITE_DBCONFIG_DEFENSIVE, -1, &was_);
    sqlite3_db_config(db_->handle(), SQLITE_DBCONFIG_DEFENSIVE, 0, nullptr);
  }
  ~defensive_off() {
    if (db_) sqlite3_db_config(db_->handle(), SQLITE_DBCONFIG_DEFENSIVE, was_, nullptr);
  }
  defensive_off(const defensive_off&) = delete;
  defensive_off& operator=(const defensive_off&) = delete;

 private:
  sqlite_db* db_;
  int was_ = 0;
};

}  // namespace

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
        const bool edits_schema = std::string_view(m.sql).find("writable_schema") != std::string_view::npos;
        // NOTE: a build or caller with SQLITE_DBCONFIG_DEFENSIVE on ignores writable_schema and refuses
        // the edit and the schema_version write; off for this migration only, then as it was.
        defensive_off guard(db, edits_schema);
        db.exec(m.sql);
        if (edits_schema) {
          // NOTE: an edit of sqlite_master's text (0012): schema_version + 1 makes every connection,
          // this one included, parse the schema again (SQLite's documented procedure).
          int64_t v = 0;
          {
            auto s = db.prepare("PRAGMA schema_version");
            s.step();
            v = s.col_int(0);
          }
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
