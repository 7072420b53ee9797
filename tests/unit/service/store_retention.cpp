// Retention and deletion of the job store (issue 33) on a real SQLite file with a fake clock:
// exactly the expired jobs go (never running or waiting ones, nor those within their period or a
// key's override), tombstones keep id/tenant/status/times and refuse change, store:false jobs go
// once delivered, a deleted job's marker is in no file after a checkpoint, space comes back.
#include <doctest/doctest.h>

#include <sqlite3.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>

#include "auth/keys.h"
#include "metrics/registry.h"
#include "ops/retention.h"
#include "store/store.h"
#include "temp_dir.h"

using namespace agentq::store;

namespace {

constexpr int64_t k_day = 86400000;
constexpr int64_t k_t0 = 1'700'000'000'000;

struct fake_clock {
  std::shared_ptr<std::atomic<int64_t>> t = std::make_shared<std::atomic<int64_t>>(k_t0);
  void set(int64_t ms) { *t = ms; }
  std::function<int64_t()> fn() const {
    return [t = t] { return t->load(); };
  }
};

std::unique_ptr<store> open_store(const std::string& path, const fake_clock& clock) {
  std::string err;
  store_options o;
  o.path = path;
  o.clock = clock.fn();
  auto s = store::open(o, &err);
  REQUIRE_MESSAGE(s, err);
  return s;
}

std::string make_job(store& s, const std::string& body = R"({"messages":[{"role":"user","content":"hi"}]})",
                     bool store_content = true, const std::string& idem = "") {
  new_job nj;
  nj.tenant = "t1";
  nj.request_json = body;
  nj.store_content = store_content;
  nj.idempotency_key = idem;
  nj.request_hash = idem.empty() ? "" : "h";
  auto r = s.create_job(nj).get();
  REQUIRE(r.outcome == create_outcome::created);
  return r.job.id;
}

int64_t claim(store& s, const std::string& id) {
  auto r = s.claim_job(id, "w1", 30000, 5).get();
  REQUIRE(r.outcome == claim_outcome::claimed);
  return r.won->epoch;
}

std::string result_of(const std::string& content) { return "{\"content\":\"" + content + "\"}"; }

void complete(store& s, const std::string& id, const std::string& content = "done") {
  int64_t e = claim(s, id);
  transcript_row u;
  u.role = "user";
  u.content = "hi";
  REQUIRE(s.init_transcript(id, e, {u}).get() == write_status::ok);
  turn_commit t;
  t.content = content;
  REQUIRE(s.commit_turn(id, e, t).get() == write_status::ok);
  REQUIRE(s.finish_job(id, e, job_status::completed, result_of(content), "", {}).get() == write_status::ok);
}

int64_t count(const std::string& path, const std::string& sql) {
  sqlite3* db = nullptr;
  sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READONLY, nullptr);
  sqlite3_stmt* st = nullptr;
  int64_t n = -1;
  if (sqlite3_prepare_v2(db, sql.c_str(), -1, &st, nullptr) == SQLITE_OK && sqlite3_step(st) == SQLITE_ROW)
    n = sqlite3_column_int64(st, 0);
  sqlite3_finalize(st);
  sqlite3_close(db);
  return n;
}

int exec(const std::string& path, const std::string& sql) {
  sqlite3* db = nullptr;
  sqlite3_open(path.c_str(), &db);
  int rc = sqlite3_exec(db, sql.c_str(), nullptr, nullptr, nullptr);
  sqlite3_close(db);
  return rc;
}

// Rows of every table that hangs off a job.
int64_t n_children(const std::string& path, const std::string& id) {
  int64_t n = 0;
  for (const char* t : {"transcript", "tool_results", "job_events", "job_timeline", "webhook_deliveries", "outbox",
                        "job_keys"})
    n += count(path, std::string("SELECT count(*) FROM ") + t + " WHERE job_id='" + id + "'");
  return n;
}

}  // namespace

TEST_CASE("retention deletes exactly the expired jobs, never running or waiting ones") {
  agentq::test::temp_dir dir;
  std::string path = dir.file("agentq.db");
  fake_clock clock;
  auto s = open_store(path, clock);
  std::string err;
  auto keys = agentq::auth::key_store::open(path, &err);
  REQUIRE_MESSAGE(keys, err);
  auto long_key = keys->create("t1", false, &err), short_key = keys->create("t1", false, &err);
  REQUIRE(long_key);
  REQUIRE(short_key);
  REQUIRE(keys->set_retention_days(long_key->info.id, 60));
  REQUIRE(keys->set_retention_days(short_key->info.id, 1));

  // at t0: finished, failed, cancelled-while-queued; running; queued; waiting on a client
  std::string done_old = make_job(*s), failed_old = make_job(*s), cancelled_old = make_job(*s);
  complete(*s, done_old);
  REQUIRE(s->fail_job(failed_old, "boom").get() == write_status::ok);
  REQUIRE(s->cancel_job(cancelled_old).get() == write_status::ok);
  std::string running = make_job(*s), queued = make_job(*s), waiting = make_job(*s);
  claim(*s, running);
  int64_t we = claim(*s, waiting);
  REQUIRE(s->require_action(waiting, we, R"([{"id":"c1","name":"ask","arguments":"{}"}])").get() == write_status::ok);
  std::string kept_by_key = make_job(*s);
  keys->link_job(kept_by_key, long_key->info.id);
  complete(*s, kept_by_key);
  // at t0 + 20 days: one within the period, one whose key keeps it a single day
  clock.set(k_t0 + 20 * k_day);
  std::string recent = make_job(*s), short_lived = make_job(*s);
  keys->link_job(short_lived, short_key->info.id);
  complete(*s, recent);
  complete(*s, short_lived);

  clock.set(k_t0 + 31 * k_day);
  auto expired = s->list_expired(30 * k_day, 100);
  std::set<std::string> got(expired.begin(), expired.end());
  CHECK(got == std::set<std::string>{done_old, failed_old, cancelled_old, short_lived});

  agentq::metrics::registry reg;
  agentq::ops::retention_options ro;
  ro.retention_ms = 30 * k_day;
  ro.batch_jobs = 2;  // several batches
  ro.batch_pause = std::chrono::milliseconds(0);
  agentq::ops::retention sweeper(ro, *s, reg);
  CHECK(sweeper.sweep_once() == 4);
  CHECK(sweeper.sweep_once() == 0);
  for (const auto& id : {done_old, failed_old, cancelled_old, short_lived}) {
    CHECK_FALSE(s->get_job(id));
    CHECK(n_children(path, id) == 0);
    CHECK(count(path, "SELECT count(*) FROM jobs WHERE id='" + id + "' AND deleted_ms>0 AND request_json='' AND "
                      "result_json='' AND created_ms>0 AND finished_ms>0") == 1);
  }
  CHECK(count(path, "SELECT count(*) FROM jobs WHERE id='" + failed_old + "' AND status='failed'") == 1);
  CHECK(s->get_job(running)->status == job_status::running);
  CHECK(s->get_job(queued)->status == job_status::queued);
  CHECK(s->get_job(waiting)->status == job_status::requires_action);
  CHECK(s->get_job(kept_by_key));
  CHECK(s->get_job(recent));
  CHECK(s->read_transcript(recent).size() == 2);
  CHECK(s->list_jobs("t1", std::nullopt, 100).size() == 5);
  // the key's 60 days pass; then the server's 30 for `recent`
  clock.set(k_t0 + 61 * k_day);
  CHECK(sweeper.sweep_once() == 2);
  CHECK(s->get_job(running));
  CHECK(s->get_job(queued));
  CHECK(s->get_job(waiting));
  // metrics: deletions counted, space figures exported
  bool saw_db_bytes = false;
  for (const auto& f : reg.collect())
    if (f.name == "agentq_db_bytes") saw_db_bytes = f.samples.at(0).value > 0;
  CHECK(saw_db_bytes);
}

TEST_CASE("tombstones: terminal until deleted, then immutable; delete needs a terminal job") {
  agentq::test::temp_dir dir;
  std::string path = dir.file("agentq.db");
  fake_clock clock;
  auto s = open_store(path, clock);
  std::string live = make_job(*s);
  claim(*s, live);
  CHECK(s->delete_job(live).get() == write_status::fenced);
  CHECK(s->delete_job("job_nope").get() == write_status::not_found);
  std::string done = make_job(*s, R"({"m":1})", true, "idem-1");
  complete(*s, done);
  CHECK(s->delete_job(done, "other-tenant").get() == write_status::not_found);
  // a terminal row still refuses a change of status or result (the trigger), before and after deletion
  CHECK(exec(path, "UPDATE jobs SET status='failed' WHERE id='" + done + "'") != SQLITE_OK);
  CHECK(s->delete_job(done, "t1").get() == write_status::ok);
  CHECK(s->delete_job(done).get() == write_status::not_found);  // already a tombstone
  CHECK_FALSE(s->get_job(done));
  CHECK(exec(path, "UPDATE jobs SET status='failed' WHERE id='" + done + "'") != SQLITE_OK);
  CHECK(exec(path, "UPDATE jobs SET updated_ms=1 WHERE id='" + done + "'") != SQLITE_OK);
  CHECK(exec(path, "UPDATE jobs SET deleted_ms=0 WHERE id='" + done + "'") != SQLITE_OK);
  // a non-deletion change of a terminal row's content is refused even with deleted_ms set
  std::string other = make_job(*s);
  complete(*s, other);
  CHECK(exec(path, "UPDATE jobs SET deleted_ms=5, result_json='x', request_json='' WHERE id='" + other + "'") !=
        SQLITE_OK);
  // the idempotency key is free again
  new_job nj;
  nj.tenant = "t1";
  nj.request_json = R"({"m":2})";
  nj.idempotency_key = "idem-1";
  nj.request_hash = "h2";
  CHECK(s->create_job(nj).get().outcome == create_outcome::created);
}

TEST_CASE("store:false: content goes once the result webhook is delivered or given up") {
  agentq::test::temp_dir dir;
  std::string path = dir.file("agentq.db");
  fake_clock clock;
  auto s = open_store(path, clock);
  std::string plain = make_job(*s, R"({"m":1})", false);
  std::string hooked = make_job(*s, R"({"m":1,"webhook":{"url":"http://127.0.0.1:9/h"}})", false);
  std::string only_waits = make_job(*s, R"({"m":1,"webhook":{"url":"http://x/h","events":["job.requires_action"]}})",
                                    false);
  std::string stored = make_job(*s, R"({"m":1})", true);
  CHECK(s->list_unstored_done(10).empty());  // not terminal yet
  for (const auto& id : {plain, hooked, only_waits, stored}) complete(*s, id);
  auto due = s->list_unstored_done(10);
  CHECK(std::set<std::string>(due.begin(), due.end()) == std::set<std::string>{plain, only_waits});
  auto delivery = [&](const char* state) {
    return exec(path, "INSERT OR REPLACE INTO webhook_deliveries(id, event_id, job_id, tenant, event_type, url, "
                      "payload_json, state, created_ms, updated_ms) VALUES ('msg_1', 1, '" + hooked +
                      "', 't1', 'job.completed', 'u', '{}', '" + state + "', 1, 1)");
  };
  REQUIRE(delivery("pending") == SQLITE_OK);
  CHECK(s->list_unstored_done(10).size() == 2);
  REQUIRE(delivery("succeeded") == SQLITE_OK);
  CHECK(s->list_unstored_done(10).size() == 3);
  agentq::metrics::registry reg;
  agentq::ops::retention_options ro;
  ro.retention_ms = 0;  // keep forever: only store:false goes
  agentq::ops::retention sweeper(ro, *s, reg);
  CHECK(sweeper.sweep_once() == 3);
  CHECK(s->get_job(stored));
  CHECK_FALSE(s->get_job(hooked));
}

TEST_CASE("a deleted job leaves no trace of its content in the data directory after a checkpoint") {
  agentq::test::temp_dir dir;
  std::string path = dir.file("agentq.db");
  fake_clock clock;
  const std::string marker = "MARKER-7f3a9c-SECRET";
  std::string big(20000, 'x');  // overflow pages too
  big.replace(12000, marker.size(), marker);
  {
    auto s = open_store(path, clock);
    for (int i = 0; i < 20; ++i) complete(*s, make_job(*s), "filler " + std::to_string(i));
    std::string id = make_job(*s, R"({"messages":[{"role":"user","content":")" + marker + " " + big + R"("}]})");
    int64_t e = claim(*s, id);
    transcript_row u;
    u.role = "user";
    u.content = marker + big;
    REQUIRE(s->init_transcript(id, e, {u}).get() == write_status::ok);
    turn_commit t;
    t.content = "answer " + marker;
    t.tool_calls_json = R"([{"id":"call_1","name":")" + marker + R"(","arguments":"{}"}])";
    REQUIRE(s->commit_turn(id, e, t).get() == write_status::ok);
    REQUIRE(s->record_tool_result(id, e, {"call_1", marker + " tool output"}, marker).get() == write_status::ok);
    REQUIRE(s->append_event(id, e, "token", R"({"text":")" + marker + R"("})").get() == write_status::ok);
    REQUIRE(s->finish_job(id, e, job_status::completed, R"({"content":")" + marker + R"("})", "", {}).get() ==
            write_status::ok);
    for (int i = 0; i < 20; ++i) complete(*s, make_job(*s), "filler after " + std::to_string(i));
    REQUIRE(s->delete_job(id).get() == write_status::ok);
    while (s->reclaim_space(64).get() > 0) {
    }
    CHECK(s->checkpoint());
    CHECK(s->space().wal_bytes == 0);
    for (const auto& de : std::filesystem::directory_iterator(dir.path())) {
      std::ifstream f(de.path(), std::ios::binary);
      std::string bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
      INFO(de.path().string());
      CHECK(bytes.find(marker) == std::string::npos);
    }
  }
}

TEST_CASE("space comes back: incremental auto-vacuum, also on a database made before it") {
  agentq::test::temp_dir dir;
  fake_clock clock;
  std::string old_path = dir.file("old.db");
  std::string err;
  REQUIRE_MESSAGE(migrate_file(old_path, 5, &err), err);
  CHECK(count(old_path, "PRAGMA auto_vacuum") == 0);
  {
    auto s = open_store(old_path, clock);
    CHECK(count(old_path, "PRAGMA auto_vacuum") == 2);  // incremental, after one VACUUM
  }
  std::string path = dir.file("agentq.db");
  auto s = open_store(path, clock);
  CHECK(count(path, "PRAGMA auto_vacuum") == 2);
  std::vector<std::string> ids;
  for (int i = 0; i < 200; ++i) {
    ids.push_back(make_job(*s, R"({"pad":")" + std::string(4000, 'p') + R"("})"));
    complete(*s, ids.back());
  }
  s->checkpoint();
  int64_t full = s->space().db_bytes;
  CHECK(s->delete_jobs(ids).get() == 200);
  CHECK(s->space().n_free_pages > 100);
  int64_t freed = 0;
  for (int64_t got; (got = s->reclaim_space(128).get()) > 0;) freed += got;
  CHECK(freed > 100);
  CHECK(s->space().n_free_pages == 0);
  s->checkpoint();
  CHECK(s->space().db_bytes < full / 2);
}
