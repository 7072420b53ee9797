// Crash recovery of the agent loop with real processes: a forked worker dies at a fault point
// (AGENTQ_FAULT -> _exit(137)) or is SIGSTOPped past its lease; a second worker reclaims the entry
// (XAUTOCLAIM), resumes from the last committed turn, and the stale worker's writes are fenced.
#include <doctest/doctest.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>


#include <chrono>
#include <nlohmann/json.hpp>
#include <thread>

#include "queue/queue.h"
#include "redis_server.h"
#include "scripted_engine.h"
#include "sqlite_lock.h"
#include "store/store.h"
#include "temp_dir.h"
#include "tool_server.h"
#include "worker/call_ids.h"
#include "worker/worker.h"

using namespace agentq;
using json = nlohmann::json;
using store::job_status;

namespace {

// Stateless script: call the tool until a tool result is the last message, then answer with it.
turn_result script(const turn_request& req, int32_t) {
  if (req.messages.back().role == role::tool) return test::answer("done: " + req.messages.back().content);
  return test::call_tool("effect", R"({"n":1})");
}

struct parts {
  std::unique_ptr<store::store> db;
  std::unique_ptr<queue::queue> q;
  std::shared_ptr<test::scripted_engine> eng;
  std::unique_ptr<worker::worker> w;

  parts(const std::string& path, int redis_port, const std::string& worker_id, int64_t lease_ms) {
    std::string err;
    store::store_options so;
    so.path = path;
    db = store::store::open(so, &err);
    if (!db) throw std::runtime_error(err);
    queue::queue_options qo;
    qo.redis.port = redis_port;
    qo.reclaim_idle_ms = 300;
    qo.reconcile_grace_ms = 1000;
    q = std::make_unique<queue::queue>(qo, *db);
    eng = std::make_shared<test::scripted_engine>(script);
    worker::worker_options wo;
    wo.worker_id = worker_id;
    wo.lease_ms = lease_ms;
    wo.heartbeat_ms = 100;
    wo.reclaim_interval_ms = 100;
    wo.cancel_poll_ms = 20;
    wo.tool_allow_cidrs = "127.0.0.0/8";
    w = std::make_unique<worker::worker>(wo, eng, *db, *q);
  }
};

std::string create_job(const std::string& path, int redis_port, const std::string& tool_url) {
  std::string err;
  store::store_options so;
  so.path = path;
  auto db = store::store::open(so, &err);
  REQUIRE_MESSAGE(db, err);
  queue::queue_options qo;
  qo.redis.port = redis_port;
  queue::queue q(qo, *db);
  json req = {{"messages", {{{"role", "user"}, {"content", "go"}}}},
              {"tools",
               {{{"type", "function"},
                 {"function", {{"name", "effect"}, {"parameters", {{"type", "object"}}}}},
                 {"execution", {{"type", "http"}, {"url", tool_url}, {"timeout_ms", 5000}, {"max_retries", 0}}}}}}};
  store::new_job nj;
  nj.tenant = "t";
  nj.request_json = req.dump();
  auto id = db->create_job(nj).get().job.id;
  REQUIRE(q.relay_once() == 1);
  return id;
}

// Fork a worker process; it exits 137 at the fault point (or 0 after run_ms).
pid_t spawn_worker(const std::string& path, int redis_port, const char* fault, int64_t lease_ms, int run_ms) {
  pid_t pid = ::fork();
  if (pid != 0) return pid;
  if (fault) ::setenv("AGENTQ_FAULT", fault, 1);
  try {
    parts p(path, redis_port, "child", lease_ms);
    p.w->start();
    std::this_thread::sleep_for(std::chrono::milliseconds(run_ms));
  } catch (...) {
    ::_exit(3);
  }
  ::_exit(0);  // NOTE: no destructors: as abrupt as a crash for everything but the fault itself
}

int wait_exit(pid_t pid) {
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

store::job_row wait_terminal(store::store& db, const std::string& id, int timeout_ms = 20000) {
  auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  for (;;) {
    auto j = db.get_job(id);
    REQUIRE(j);
    if (store::is_terminal(j->status) || std::chrono::steady_clock::now() > until) return *j;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

int count_calls(test::tool_server& tools, const std::string& call_id) {
  int n = 0;
  for (auto& r : tools.requests())
    if (json::parse(r.body)["call_id"] == call_id) n++;
  return n;
}

int count_rows(store::store& db, const std::string& id, const std::string& role) {
  int n = 0;
  for (auto& r : db.read_transcript(id)) n += r.role == role;
  return n;
}

}  // namespace

TEST_CASE("kill at a fault point, resume on another worker from the last committed turn") {
  struct scenario {
    const char* fault;
    int tool_calls;          // HTTP calls the tool server sees in total
    size_t resumed_turns;    // model turns the second worker generates
  };
  for (scenario sc : {scenario{"after_turn_commit", 1, 1}, scenario{"after_tool_effect", 2, 1},
                      scenario{"before_xack", 1, 0}}) {
    CAPTURE(sc.fault);
    test::temp_dir dir;
    test::redis_server redis;
    test::tool_server tools([](const test::tool_server::request&) { return std::pair{200, std::string(R"({"output":"7"})")}; });
    std::string path = dir.file("jobs.db");
    std::string id = create_job(path, redis.port(), tools.url());

    pid_t child = spawn_worker(path, redis.port(), sc.fault, 800, 10000);
    CHECK(wait_exit(child) == 137);

    parts p(path, redis.port(), "survivor", 30000);
    p.q->start_relay();
    p.w->start();
    auto j = wait_terminal(*p.db, id);
    for (int i = 0; i < 250 && redis.command({"XLEN", "agentq:jobs:normal"}) != ":0"; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(20));  // the stale entry is reclaimed and acked
    p.w->stop();
    p.q->stop_relay();
    CHECK(j.status == job_status::completed);
    CHECK(json::parse(j.result_json)["content"] == "done: 7");
    CHECK(count_calls(tools, worker::make_call_id(id, 0, 0)) == sc.tool_calls);  // same stable call id on a re-run
    CHECK(count_rows(*p.db, id, "assistant") == 2);            // no turn generated twice
    CHECK(count_rows(*p.db, id, "tool") == 1);
    CHECK(p.eng->requests().size() == sc.resumed_turns);
    if (sc.resumed_turns == 1) CHECK(p.eng->requests()[0].messages.size() == 3);  // user, assistant, tool
    CHECK(store::usage_totals::from_json(j.usage_json).turns == 2);
    CHECK(redis.command({"XLEN", "agentq:jobs:normal"}) == ":0");
  }
}

TEST_CASE("batch-class job ends in a group: killed after the group's commit, before its acks; each job ends once") {
  test::temp_dir dir;
  test::redis_server redis;
  test::tool_server tools([](const test::tool_server::request&) { return std::pair{200, std::string(R"({"output":"7"})")}; });
  std::string path = dir.file("jobs.db");
  std::vector<std::string> ids;
  {
    std::string err;
    store::store_options so;
    so.path = path;
    auto db = store::store::open(so, &err);
    REQUIRE_MESSAGE(db, err);
    queue::queue_options qo;
    qo.redis.port = redis.port();
    queue::queue q(qo, *db);
    for (int i = 0; i < 6; ++i) {
      json req = {{"messages", {{{"role", "user"}, {"content", "go " + std::to_string(i)}}}},
                  {"tools",
                   {{{"type", "function"},
                     {"function", {{"name", "effect"}, {"parameters", {{"type", "object"}}}}},
                     {"execution", {{"type", "http"}, {"url", tools.url()}, {"timeout_ms", 5000}, {"max_retries", 0}}}}}}};
      store::new_job nj;
      nj.tenant = "t";
      nj.request_json = req.dump();
      nj.priority = store::job_priority::batch;
      ids.push_back(db->create_job(nj).get().job.id);
    }
    while (q.relay_once() > 0) {
    }
  }
  // NOTE: the child dies at the first job's ack of its first group of ends (worker/end_batcher):
  // that group is committed, none of it acked.
  pid_t child = spawn_worker(path, redis.port(), "before_xack", 800, 10000);
  CHECK(wait_exit(child) == 137);

  parts p(path, redis.port(), "survivor", 30000);
  p.q->start_relay();
  p.w->start();
  std::vector<store::job_row> rows;
  for (auto& id : ids) rows.push_back(wait_terminal(*p.db, id));
  for (int i = 0; i < 250 && redis.command({"XLEN", "agentq:jobs:batch"}) != ":0"; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));  // the stale entries are reclaimed and acked
  p.w->stop();
  p.q->stop_relay();
  for (size_t i = 0; i < ids.size(); ++i) {
    CAPTURE(i);
    CHECK(rows[i].status == job_status::completed);
    CHECK(json::parse(rows[i].result_json)["content"] == "done: 7");
    CHECK(count_rows(*p.db, ids[i], "assistant") == 2);  // no turn generated twice
    CHECK(count_rows(*p.db, ids[i], "user") == 1);       // input written once
    CHECK(count_calls(tools, worker::make_call_id(ids[i], 0, 0)) == 1);
  }
  CHECK(p.eng->requests().size() < 2 * ids.size());  // the group the child committed is not run again
  CHECK(redis.command({"XLEN", "agentq:jobs:batch"}) == ":0");
}

TEST_CASE("SIGSTOP past the lease: the new owner finishes, the paused worker's writes are fenced") {
  test::temp_dir dir;
  test::redis_server redis;
  std::atomic<int> n{0};
  test::tool_server tools([&](const test::tool_server::request&) {
    if (++n == 1) std::this_thread::sleep_for(std::chrono::milliseconds(1500));  // the paused worker's call
    return std::pair{200, std::string(R"({"output":"7"})")};
  });
  std::string path = dir.file("jobs.db");
  std::string id = create_job(path, redis.port(), tools.url());

  pid_t child = spawn_worker(path, redis.port(), nullptr, 600, 20000);
  for (int i = 0; i < 300 && n.load() == 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  REQUIRE(n.load() == 1);  // the child is inside the tool call
  // NOTE: paused while it holds no SQLite write lock (that would block every writer; not this test's point)
  REQUIRE(test::pause_outside_write(
      path, [child] { ::kill(child, SIGSTOP); }, [child] { ::kill(child, SIGCONT); }));

  parts p(path, redis.port(), "survivor", 30000);
  p.q->start_relay();
  p.w->start();
  auto j = wait_terminal(*p.db, id);
  CHECK(j.status == job_status::completed);
  CHECK(j.lease_owner == "survivor");
  int64_t epoch = j.lease_epoch;
  ::kill(child, SIGCONT);  // its tool call returns; its record_tool_result is fenced
  std::this_thread::sleep_for(std::chrono::milliseconds(1000));
  ::kill(child, SIGKILL);
  wait_exit(child);
  p.w->stop();
  p.q->stop_relay();
  auto after = p.db->get_job(id);
  CHECK(after->status == job_status::completed);
  CHECK(after->lease_epoch == epoch);
  CHECK(count_rows(*p.db, id, "assistant") == 2);
  CHECK(count_rows(*p.db, id, "tool") == 1);
}

TEST_CASE("Redis restarted mid-run (kill -9, AOF): jobs still finish") {
  test::temp_dir dir;
  test::redis_server redis;
  test::tool_server tools([](const test::tool_server::request&) { return std::pair{200, std::string(R"({"output":"7"})")}; });
  std::string path = dir.file("jobs.db");
  parts p(path, redis.port(), "w", 30000);
  p.q->start_relay();
  p.eng->turn_delay_ms = 200;
  p.w->start();
  std::vector<std::string> ids;
  for (int i = 0; i < 5; ++i) {
    json req = {{"messages", {{{"role", "user"}, {"content", "go"}}}},
                {"tools",
                 {{{"type", "function"},
                   {"function", {{"name", "effect"}, {"parameters", {{"type", "object"}}}}},
                   {"execution", {{"type", "http"}, {"url", tools.url()}, {"timeout_ms", 5000}}}}}}};
    store::new_job nj;
    nj.tenant = "t";
    nj.request_json = req.dump();
    ids.push_back(p.db->create_job(nj).get().job.id);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(150));
  redis.kill9();
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  redis.start();
  for (auto& id : ids) {
    auto j = wait_terminal(*p.db, id, 20000);
    CHECK(j.status == job_status::completed);
  }
  p.w->stop();
  p.q->stop_relay();
}
