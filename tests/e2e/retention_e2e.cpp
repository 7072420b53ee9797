// Deletion, tenant deletion, backup and restore against a real agentqd (issue 33): a deleted job's
// marker string is in no file of the data directory nor the log after a checkpoint; every route
// then answers 404; a backup taken under a continuous submit load passes integrity_check, holds
// every job acknowledged before it began, and a restore (stop, replace, start) finishes them.
#include <doctest/doctest.h>
#include <sqlite3.h>

#include <atomic>
#include <set>

#include "agentqd_e2e.h"

using namespace agentq;
using namespace agentq::test::e2e;

namespace {

// Every regular file under dir whose bytes hold needle.
std::vector<std::string> files_holding(const fs::path& dir, const std::string& needle) {
  std::vector<std::string> out;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(dir, ec); it != fs::recursive_directory_iterator(); ++it) {
    if (!it->is_regular_file(ec)) continue;
    std::ifstream f(it->path(), std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    if (bytes.find(needle) != std::string::npos) out.push_back(it->path().string());
  }
  return out;
}

std::string query_one(const std::string& db_path, const std::string& sql) {
  sqlite3* db = nullptr;
  std::string out;
  if (sqlite3_open_v2(db_path.c_str(), &db, SQLITE_OPEN_READONLY, nullptr) == SQLITE_OK) {
    sqlite3_stmt* st = nullptr;
    if (sqlite3_prepare_v2(db, sql.c_str(), -1, &st, nullptr) == SQLITE_OK && sqlite3_step(st) == SQLITE_ROW &&
        sqlite3_column_text(st, 0))
      out = reinterpret_cast<const char*>(sqlite3_column_text(st, 0));
    sqlite3_finalize(st);
  }
  sqlite3_close(db);
  return out;
}

void stop(pid_t pid) {
  kill(pid, SIGTERM);
  int status = 0;
  waitpid(pid, &status, 0);
}

}  // namespace

TEST_CASE("DELETE /v1/jobs/{id}: content gone from every file and the log; every route 404s") {
  test::require_tiny_model();
  daemon_proc d;
  api admin{d, k_admin_key};
  receiver hook;
  auto [key, secret] = make_tenant(admin, "t-del");
  api user{d, key};
  const std::string marker = "ZQXMARKER" + std::to_string(::getpid()) + "PRIVATE";

  // a finished job carrying the marker in its prompt, metadata (so in the webhook payload) and events
  json body = simple_job(marker + " once upon a time");
  body["metadata"] = {{"secret", marker}};
  body["webhook"] = {{"url", hook.url()}};
  auto r = user.post("/v1/jobs", body);
  REQUIRE_MESSAGE(r.status == 202, r.raw);
  std::string done_id = r.body["id"];
  json job = user.wait_status(done_id, {"completed", "failed", "incomplete"});
  REQUIRE(hook.wait_for([](const auto& hits) { return !hits.empty(); }, 20s));
  CHECK(hook.snapshot()[0].body.find(marker) != std::string::npos);
  // a job waiting on a client tool: cancelled first, then deleted
  json waiting = simple_job(marker + " waits");
  waiting["tools"] = {{{"type", "function"},
                       {"function",
                        {{"name", "lookup"},
                         {"parameters",
                          {{"type", "object"},
                           {"properties", {{"q", {{"type", "string"}, {"enum", {"alpha", "beta"}}}}}},
                           {"required", {"q"}}}}}}}};
  waiting["tool_choice"] = "required";
  waiting["max_tokens_per_turn"] = 256;
  r = user.post("/v1/jobs", waiting);
  REQUIRE_MESSAGE(r.status == 202, r.raw);
  std::string waiting_id = r.body["id"];
  json w = user.wait_status(waiting_id, {"requires_action", "completed", "failed", "incomplete"});
  REQUIRE_MESSAGE(w["status"] == "requires_action", w.dump(2));

  auto [other_key, other_secret] = make_tenant(admin, "t-other");
  api other{d, other_key};
  CHECK(other.call("DELETE", "/v1/jobs/" + done_id).status == 404);  // another tenant's job
  for (const auto& id : {done_id, waiting_id}) {
    auto del = user.call("DELETE", "/v1/jobs/" + id);
    REQUIRE_MESSAGE(del.status == 200, del.raw);
    CHECK(del.body["object"] == "job.deleted");
    CHECK(del.body["deleted"] == true);
    for (const char* suffix : {"", "/events", "/webhooks", "/timeline"})
      CHECK_MESSAGE(user.get("/v1/jobs/" + id + suffix).status == 404, suffix);
    CHECK(user.post("/v1/jobs/" + id + "/cancel", json::object()).status == 404);
    CHECK(user.call("DELETE", "/v1/jobs/" + id).status == 404);
  }
  for (const auto& j : user.get("/v1/jobs?limit=100").body["data"]) CHECK(j["id"] != done_id);
  std::string db = (d.dir / "data" / "agentq.db").string();
  CHECK(query_one(db, "SELECT status FROM jobs WHERE id='" + done_id + "' AND deleted_ms>0") ==
        job["status"].get<std::string>());
  CHECK(query_one(db, "SELECT status FROM jobs WHERE id='" + waiting_id + "' AND deleted_ms>0") == "cancelled");

  // live: the sweeper checkpoints after a deletion; the marker leaves the data directory
  std::vector<std::string> holding;
  for (int i = 0; i < 100; ++i) {
    holding = files_holding(d.dir, marker);
    if (holding.empty()) break;
    std::this_thread::sleep_for(100ms);
  }
  for (auto& f : holding) MESSAGE("still holds the marker: " << f);
  CHECK(holding.empty());
  // and after a clean stop (the last connection checkpoints)
  stop(d.pid);
  d.pid = -1;
  CHECK(files_holding(d.dir, marker).empty());
}

TEST_CASE("DELETE /v1/tenants/{tenant}: admin only, every job of the tenant") {
  test::require_tiny_model();
  daemon_proc d;
  api admin{d, k_admin_key};
  auto [key, secret] = make_tenant(admin, "t-gone");
  auto [key2, secret2] = make_tenant(admin, "t-stays");
  api user{d, key}, user2{d, key2};
  std::vector<std::string> ids;
  for (int i = 0; i < 5; ++i) ids.push_back(user.post("/v1/jobs", simple_job()).body["id"]);
  std::string kept = user2.post("/v1/jobs", simple_job()).body["id"];
  CHECK(user.call("DELETE", "/v1/tenants/t-gone").status == 403);
  auto r = admin.call("DELETE", "/v1/tenants/t-gone");
  REQUIRE_MESSAGE(r.status == 200, r.raw);
  CHECK(r.body["n_jobs_deleted"] == 5);
  CHECK(user.get("/v1/jobs").body["data"].empty());
  for (const auto& id : ids) CHECK(user.get("/v1/jobs/" + id).status == 404);
  CHECK(user2.get("/v1/jobs/" + kept).status == 200);
}

TEST_CASE("backup under a continuous submit load; restore = stop, replace, start") {
  test::require_tiny_model();
  daemon_proc d;
  api admin{d, k_admin_key};
  auto [key, secret] = make_tenant(admin, "t-backup");
  api user{d, key};
  std::mutex mu;
  std::vector<std::string> acked;
  std::atomic<bool> stop_load{false};
  std::thread load([&] {
    api client{d, key};
    while (!stop_load) {
      auto r = client.post("/v1/jobs", simple_job());
      if (r.status == 202) {
        std::lock_guard lock(mu);
        acked.push_back(r.body["id"]);
      }
    }
  });
  std::this_thread::sleep_for(1500ms);
  std::set<std::string> before;
  {
    std::lock_guard lock(mu);
    before.insert(acked.begin(), acked.end());
  }
  fs::path backup = d.dir / "backup.db";
  std::string cmd = (test::bin_dir() / "agentqd").string() + " backup --data-dir " + (d.dir / "data").string() +
                    " --to " + backup.string() + " > " + (d.dir / "backup.out").string() + " 2>&1";
  int rc = std::system(cmd.c_str());
  std::this_thread::sleep_for(500ms);
  stop_load = true;
  load.join();
  {
    std::ifstream out(d.dir / "backup.out");
    std::stringstream ss;
    ss << out.rdbuf();
    MESSAGE(ss.str());
  }
  REQUIRE(rc == 0);
  MESSAGE("jobs acked before the backup began: " << before.size() << ", in all: " << acked.size());
  REQUIRE(before.size() > 5);
  CHECK(query_one(backup.string(), "PRAGMA integrity_check") == "ok");
  int64_t n_missing = 0;
  for (const auto& id : before)
    if (query_one(backup.string(), "SELECT id FROM jobs WHERE id='" + id + "'") != id) ++n_missing;
  CHECK(n_missing == 0);

  // restore: stop, replace the file (and drop the old WAL), start on the same data directory
  stop(d.pid);
  d.pid = -1;
  fs::path data = d.dir / "data";
  fs::remove(data / "agentq.db-wal");
  fs::remove(data / "agentq.db-shm");
  fs::copy_file(backup, data / "agentq.db", fs::copy_options::overwrite_existing);
  std::vector<std::string> args = {(test::bin_dir() / "agentqd").string(), "--data-dir", data.string(), "--listen",
                                   "127.0.0.1:0", "--port-file", (d.dir / "port2").string(), "--model",
                                   test::tiny_model().string(), "--admin-key", k_admin_key, "--rate-limit", "0",
                                   "--lease-ms", "2000", "--reclaim-idle-ms", "1500"};
  d.pid = spawn_agentqd(args, d.dir / "agentqd.out", true, d.dir / "port2", &d.port);
  REQUIRE_MESSAGE(d.pid > 0, d.log());
  api restored{d, key};
  int64_t n_unfinished = 0;
  for (const auto& id : before) {
    json j = restored.wait_status(id, {"completed", "failed", "incomplete", "cancelled"}, 60s);
    if (j.value("status", "") != "completed" && j.value("status", "") != "incomplete") {
      ++n_unfinished;
      MESSAGE(id << ": " << j.dump());
    }
  }
  CHECK(n_unfinished == 0);
}

TEST_CASE("agentq export --since T --format jsonl: jobs with transcripts, paged through the API") {
  test::require_tiny_model();
  daemon_proc d;
  api admin{d, k_admin_key};
  auto [key, secret] = make_tenant(admin, "t-export");
  api user{d, key};
  std::set<std::string> ids;
  for (int i = 0; i < 3; ++i) ids.insert(user.post("/v1/jobs", simple_job()).body["id"].get<std::string>());
  for (const auto& id : ids) user.wait_status(id, {"completed", "failed", "incomplete"});
  auto run = [&](const std::string& args) {
    std::string cmd = "AGENTQ_URL=http://127.0.0.1:" + std::to_string(d.port) + " AGENTQ_API_KEY=" + key + " " +
                      (test::bin_dir() / "agentq").string() + " export " + args + " 2>&1";
    std::string out;
    FILE* p = popen(cmd.c_str(), "r");
    char buf[4096];
    while (size_t n = fread(buf, 1, sizeof buf, p)) out.append(buf, n);
    CHECK(pclose(p) == 0);
    return out;
  };
  std::string out = run("--since 2020-01-01 --format jsonl");
  std::istringstream lines(out);
  std::set<std::string> seen;
  for (std::string line; std::getline(lines, line);) {
    json j = json::parse(line, nullptr, false);
    REQUIRE_MESSAGE(j.is_object(), line);
    CHECK(j["transcript"].is_array());
    CHECK(!j["transcript"].empty());
    seen.insert(j["id"].get<std::string>());
  }
  CHECK(seen == ids);
  CHECK(run("--since " + std::to_string(time(nullptr) + 3600)).empty());  // nothing that new
}
