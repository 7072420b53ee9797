// Online backup of the job store with SQLite's backup API (see backup.h).
#include "ops/backup.h"

#include <fcntl.h>
#include <sqlite3.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>

namespace agentq::ops {

namespace fs = std::filesystem;

namespace {
bool fsync_path(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) return false;
  bool ok = ::fsync(fd) == 0;
  ::close(fd);
  return ok;
}
}  // namespace

backup_result backup_database(const std::string& db_path, const std::string& to_path) {
  backup_result r;
  auto t0 = std::chrono::steady_clock::now();
  std::error_code ec;
  if (!fs::exists(db_path, ec)) {
    r.error = "no database at " + db_path;
    return r;
  }
  const std::string tmp = to_path + ".tmp";
  fs::remove(tmp, ec);
  sqlite3 *src = nullptr, *dst = nullptr;
  auto close_all = [&] {
    sqlite3_close_v2(src);
    sqlite3_close_v2(dst);
  };
  if (sqlite3_open_v2(db_path.c_str(), &src, SQLITE_OPEN_READONLY, nullptr) != SQLITE_OK ||
      sqlite3_open_v2(tmp.c_str(), &dst, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, nullptr) != SQLITE_OK) {
    r.error = std::string("open: ") + (dst ? sqlite3_errmsg(dst) : src ? sqlite3_errmsg(src) : "out of memory");
    close_all();
    return r;
  }
  sqlite3_busy_timeout(src, 5000);
  sqlite3_backup* b = sqlite3_backup_init(dst, "main", src, "main");
  if (!b) {
    r.error = std::string("backup: ") + sqlite3_errmsg(dst);
    close_all();
    return r;
  }
  // NOTE: all pages in one step = one read snapshot. Small steps would restart from the first page
  // whenever another process commits (the backup API only follows writes made through its own
  // connection), so under a steady submit load a stepped copy might never finish.
  int rc = sqlite3_backup_step(b, -1);
  for (int tries = 0; (rc == SQLITE_BUSY || rc == SQLITE_LOCKED) && tries < 100; ++tries) {
    sqlite3_sleep(50);
    rc = sqlite3_backup_step(b, -1);
  }
  r.n_pages = sqlite3_backup_pagecount(b);
  sqlite3_backup_finish(b);
  if (rc != SQLITE_DONE) {
    r.error = std::string("backup: ") + sqlite3_errstr(rc);
    close_all();
    fs::remove(tmp, ec);
    return r;
  }
  // The copy is a standalone file: rollback journal, not the source's WAL.
  sqlite3_exec(dst, "PRAGMA journal_mode=DELETE", nullptr, nullptr, nullptr);
  sqlite3_stmt* st = nullptr;
  if (sqlite3_prepare_v2(dst, "PRAGMA quick_check", -1, &st, nullptr) == SQLITE_OK && sqlite3_step(st) == SQLITE_ROW)
    r.integrity = reinterpret_cast<const char*>(sqlite3_column_text(st, 0));
  sqlite3_finalize(st);
  close_all();
  if (r.integrity != "ok") {
    r.error = "the copy failed PRAGMA quick_check: " + r.integrity;
    fs::remove(tmp, ec);
    return r;
  }
  if (!fsync_path(tmp)) {
    r.error = "fsync " + tmp + " failed";
    return r;
  }
  fs::rename(tmp, to_path, ec);
  if (ec) {
    r.error = "rename to " + to_path + ": " + ec.message();
    return r;
  }
  fsync_path(fs::absolute(to_path).parent_path().string());
  r.n_bytes = int64_t(fs::file_size(to_path, ec));
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  r.ok = true;
  return r;
}

int backup_main(int argc, char** argv) {
  const char* usage = "usage: agentqd backup --data-dir DIR --to FILE\n";
  std::string data_dir, to;
  for (int i = 0; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&](std::string* out) {
      if (size_t eq = a.find('='); eq != std::string::npos) {
        *out = a.substr(eq + 1);
        return true;
      }
      if (i + 1 >= argc) return false;
      *out = argv[++i];
      return true;
    };
    bool ok = true;
    if (a == "--help" || a == "-h") {
      std::fputs(usage, stdout);
      return 0;
    } else if (a.starts_with("--data-dir")) {
      ok = value(&data_dir);
    } else if (a.starts_with("--to")) {
      ok = value(&to);
    } else {
      std::fprintf(stderr, "agentqd backup: unexpected argument '%s'\n%s", a.c_str(), usage);
      return 2;
    }
    if (!ok) {
      std::fprintf(stderr, "agentqd backup: %s needs a value\n%s", a.c_str(), usage);
      return 2;
    }
  }
  if (data_dir.empty() || to.empty()) {
    std::fprintf(stderr, "agentqd backup: --data-dir and --to are required\n%s", usage);
    return 2;
  }
  auto r = backup_database((fs::path(data_dir) / "agentq.db").string(), to);
  if (!r.ok) {
    std::fprintf(stderr, "agentqd backup: %s\n", r.error.c_str());
    return 1;
  }
  std::printf("agentqd backup: %s: %lld bytes (%lld pages) in %.3f s, quick_check %s\n", to.c_str(),
              static_cast<long long>(r.n_bytes), static_cast<long long>(r.n_pages), r.seconds, r.integrity.c_str());
  return 0;
}

}  // namespace agentq::ops
