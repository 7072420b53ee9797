// Stable worker identity (#28), real processes: a worker killed inside a tool call and restarted
// with its id fences the leases its previous run held and takes its job back at once (no wait for
// the lease or the reclaim idle time); GET /v1/workers (admin) lists what each worker serves; the
// default id comes from the host and data dir, is kept in DATA_DIR/worker-id across restarts, and
// a worker that stops heartbeating drops out of the list.
#include <doctest/doctest.h>

#include <fstream>

#include "cluster.h"
#include "history_check.h"

using namespace agentq;
using namespace std::chrono_literals;

namespace {

test::json workers(test::cluster& c) {
  test::client_driver admin(c.api_url(), test::cluster::k_admin_key);
  auto x = admin.call("GET", "/v1/workers");
  REQUIRE_MESSAGE(x.status == 200, x.status << " " << x.response << x.error);
  return test::json::parse(x.response)["data"];
}

std::set<std::string> ids_of(const test::json& ws) {
  std::set<std::string> out;
  for (auto& w : ws) out.insert(w.value("id", ""));
  return out;
}

std::string read_line(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::string s;
  std::getline(in, s);
  return s;
}

}  // namespace

TEST_CASE("a worker restarted with its id fences its old lease and finishes its job without waiting the lease out") {
  test::cluster_options o;
  o.n_workers = 1;
  o.lease_ms = 20000;         // a lease expiry would take 20 s ...
  o.reclaim_idle_ms = 20000;  // ... and so would a reclaim by idle time
  test::cluster c(o);
  auto n_calls = c.slow_tools(3s, 1);  // the first call hangs inside the worker that gets killed
  auto id = c.client().submit(test::tool_job(c.tool_url(), c.webhook_url(), "identity-restart"));
  REQUIRE(id);
  for (int i = 0; i < 500 && n_calls->load() == 0; ++i) std::this_thread::sleep_for(20ms);
  REQUIRE_MESSAGE(n_calls->load() == 1, c.logs_tail());

  // What the worker advertises while it holds the job. NOTE: the advert is written on the
  // worker's heartbeat tick, which can precede the claim: wait for the first one after it.
  auto ws = workers(c);
  for (int i = 0; i < 100 && !(ws.size() == 1 && ws[0].value("running_jobs", 0) == 1); ++i) {
    std::this_thread::sleep_for(50ms);
    ws = workers(c);
  }
  REQUIRE(ws.size() == 1);
  auto& w = ws[0];
  CHECK(w["id"] == c.worker_id(0));
  CHECK(w["object"] == "worker");
  CHECK(w["protocol"] == 1);
  CHECK_FALSE(w.value("version", "").empty());
  CHECK_FALSE(w.value("host", "").empty());
  CHECK(w["device"] == "cpu");
  REQUIRE(w["models"].size() == 1);
  CHECK(w["models"][0]["name"] == "stories260K");
  CHECK(w["models"][0]["context_length"].get<int>() > 0);
  CHECK(w["models"][0].contains("chat_family"));
  CHECK(w["kv"]["blocks_total"].get<int64_t>() > 0);
  CHECK(w["running_jobs"] == 1);
  CHECK(w["running_job_ids"][0] == *id);
  CHECK(w["free_slots"] == o.max_jobs - 1);
  CHECK(w["heartbeat_age_ms"].get<int64_t>() < 5000);
  auto epoch_before = test::query_db(c, "SELECT lease_epoch, lease_owner FROM jobs WHERE id=?", {*id});
  CHECK(epoch_before[0][1] == c.worker_id(0));

  // A tenant key (the cluster client's) may not list workers.
  CHECK(c.client().call("GET", "/v1/workers").status == 403);

  auto t0 = std::chrono::steady_clock::now();
  c.restart_worker(0);  // kill -9, then the same command line: the same --worker-id
  REQUIRE_MESSAGE(c.wait_terminal({*id}, 15s), c.logs_tail());
  double recover_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  auto row = test::query_db(c, "SELECT lease_epoch, lease_owner, status, attempts FROM jobs WHERE id=?", {*id});
  MESSAGE("restart to terminal: " << recover_s << " s (lease " << o.lease_ms << " ms); epoch " << epoch_before[0][0]
                                  << " -> " << row[0][0] << ", status " << row[0][2]);
  CHECK(recover_s < 12);  // well inside the 20 s lease
  CHECK(std::stoi(row[0][0]) == std::stoi(epoch_before[0][0]) + 2);  // the fence, then the new claim
  CHECK(row[0][1] == c.worker_id(0));
  CHECK(c.worker(0).log_text().find("fenced 1 lease(s) held by its previous run") != std::string::npos);

  bool drained = c.drain(30s);
  auto r = test::check_history(c, "worker-identity-restart");
  MESSAGE(r.summary());
  CHECK_MESSAGE(drained, c.logs_tail());
  CHECK(r.ok());
  CHECK(r.n_lost == 0);
  CHECK(r.n_tool_duplicates <= 1);  // the killed run's call, re-sent under the same call id
  // Still one worker listed: the restart is the same worker, not a second one.
  CHECK(ids_of(workers(c)) == std::set<std::string>{c.worker_id(0)});
}

TEST_CASE("the default id: host + data dir, kept in DATA_DIR/worker-id across restarts; dead workers drop out") {
  test::cluster_options o;
  o.n_workers = 2;
  o.worker_args = {"--worker-id", ""};  // empty: derive (the agentqd default)
  test::cluster c(o);
  std::string id0 = read_line(c.data_dir() / "worker-id"), id1 = read_line(c.data_dir() / "worker-id.1");
  REQUIRE_FALSE(id0.empty());
  CHECK(id1 == id0 + "-1");  // the second worker on this data dir took the next slot
  std::set<std::string> both = {id0, id1};
  std::set<std::string> listed;
  for (int i = 0; i < 50 && listed != both; ++i) {
    listed = ids_of(workers(c));
    std::this_thread::sleep_for(100ms);
  }
  CHECK(listed == both);

  c.restart_worker(0);  // kill -9 + start: takes the freed slot, so the same id
  c.restart_worker(1);
  CHECK(ids_of(workers(c)) == both);
  CHECK(read_line(c.data_dir() / "worker-id") == id0);

  auto id = c.client().submit(test::text_job(c.webhook_url(), "identity-default"));
  REQUIRE(id);
  REQUIRE_MESSAGE(c.wait_terminal({*id}, 30s), c.logs_tail());

  c.worker(1).kill9();  // no restart: its advert expires with its heartbeat (5 x 200 ms)
  std::set<std::string> after;
  for (int i = 0; i < 50; ++i) {
    after = ids_of(workers(c));
    if (after.size() == 1) break;
    std::this_thread::sleep_for(100ms);
  }
  CHECK(after.size() == 1);
  bool drained = c.drain(30s);
  auto r = test::check_history(c, "worker-identity-default");
  CHECK_MESSAGE(drained, c.logs_tail());
  CHECK(r.ok());
}
