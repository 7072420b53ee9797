// Fault scenarios (docs/RELIABILITY.md, "Worker faults"): a job that runs longer than the lease is
// held by heartbeats (claimed once, its tool called once); a worker stopped with SIGTERM while a
// tool call is in flight hands its jobs back and exits 0, and the rest of the fleet finishes them
// without repeating the call.
#include <doctest/doctest.h>

#include <atomic>

#include "cluster.h"
#include "history_check.h"

using namespace agentq;
using namespace std::chrono_literals;

TEST_CASE("a job longer than the lease: heartbeats hold it, no second claim") {
  test::cluster_options o;
  o.n_workers = 2;
  o.lease_ms = 1000;
  o.reclaim_idle_ms = 1000;
  test::cluster c(o);
  c.slow_tools(4s);  // 4 leases long
  auto id = c.client().submit(test::tool_job(c.tool_url(), c.webhook_url(), "long-tool"));
  REQUIRE(id);
  for (int i = 0; i < 3; ++i)
    REQUIRE(c.client().submit(test::text_job(c.webhook_url(), "long-text-" + std::to_string(i))));
  bool drained = c.drain(40s);
  auto r = test::check_history(c, "longer-than-lease");
  auto row = test::query_db(c, "SELECT attempts, lease_epoch, status FROM jobs WHERE id=?", {*id});
  MESSAGE(r.summary() << "\n  long job: attempts " << row[0][0] << ", lease epoch " << row[0][1]);
  CHECK_MESSAGE(drained, c.logs_tail());
  CHECK(r.ok());
  CHECK(r.n_lost == 0);
  CHECK(row[0][0] == "1");
  CHECK(row[0][1] == "1");
  CHECK(r.n_tool_requests == 1);
}

TEST_CASE("graceful SIGTERM of a worker mid tool call: jobs handed back, finished elsewhere") {
  test::cluster_options o;
  o.n_workers = 2;
  test::cluster c(o);
  auto n_calls = c.slow_tools(1500ms);
  std::vector<std::string> tool_ids;
  for (int i = 0; i < 2; ++i) {
    auto id = c.client().submit(test::tool_job(c.tool_url(), c.webhook_url(), "term-tool-" + std::to_string(i)));
    REQUIRE(id);
    tool_ids.push_back(*id);
  }
  for (int i = 0; i < 4; ++i)
    REQUIRE(c.client().submit(test::text_job(c.webhook_url(), "term-text-" + std::to_string(i))));
  for (int i = 0; i < 500 && n_calls->load() == 0; ++i) std::this_thread::sleep_for(20ms);
  REQUIRE_MESSAGE(n_calls->load() >= 1, c.logs_tail());
  // SIGTERM the worker that holds a job inside its tool call
  size_t victim = 0;
  for (auto& id : tool_ids) {
    auto row = test::query_db(c, "SELECT lease_owner, status FROM jobs WHERE id=?", {id});
    for (size_t i = 0; i < c.n_workers(); ++i)
      if (row[0][1] == "running" && row[0][0] == c.worker_id(i))
        victim = i;
  }
  auto t0 = std::chrono::steady_clock::now();
  int code = c.worker(victim).terminate(20s);
  double stop_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  CHECK_MESSAGE(code == 0, c.logs_tail());
  CHECK(stop_s < 10);
  bool drained = c.drain(40s);
  auto r = test::check_history(c, "graceful-sigterm");
  MESSAGE(r.summary() << "\n  SIGTERM to exit: " << stop_s << " s");
  CHECK_MESSAGE(drained, c.logs_tail());
  CHECK(r.ok());
  CHECK(r.n_lost == 0);
  CHECK(r.n_acked == 6);
  CHECK(r.n_tool_duplicates == 0);  // the in-flight call finished and was recorded before the hand-back
}
