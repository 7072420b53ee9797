// Fault scenario (docs/RELIABILITY.md, "Worker faults"): a worker is SIGSTOPped inside a tool call
// past its lease; another worker reclaims the job and finishes it; on SIGCONT the paused worker's
// late writes are fenced (lease epoch) and it goes on serving. The history checker finds every
// promise kept.
#include <doctest/doctest.h>

#include <atomic>

#include "cluster.h"
#include "history_check.h"

using namespace agentq;
using namespace std::chrono_literals;

TEST_CASE("worker SIGSTOP past its lease, then SIGCONT: its writes are fenced") {
  test::cluster_options o;
  o.n_workers = 1;
  test::cluster c(o);
  auto n_calls = c.slow_tools(1500ms, 1);  // the first call: the worker is paused inside it
  auto id = c.client().submit(test::tool_job(c.tool_url(), c.webhook_url(), "pause-tool"));
  REQUIRE(id);
  for (int i = 0; i < 500 && n_calls->load() == 0; ++i) std::this_thread::sleep_for(20ms);
  REQUIRE_MESSAGE(n_calls->load() == 1, c.logs_tail());
  REQUIRE(test::pause_outside_write(c, c.worker(0)));
  auto t_pause = std::chrono::steady_clock::now();

  c.add_worker();  // reclaims the idle entry once the paused worker's lease has expired
  for (int i = 0; i < 4; ++i)
    REQUIRE(c.client().submit(test::text_job(c.webhook_url(), "pause-text-" + std::to_string(i))));
  REQUIRE_MESSAGE(c.wait_terminal({*id}, 30s), c.logs_tail());
  double paused_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_pause).count();
  auto owner = test::query_db(c, "SELECT lease_owner, lease_epoch, attempts FROM jobs WHERE id=?", {*id});
  REQUIRE(owner.size() == 1);
  CHECK(owner[0][0] != c.worker_id(0));  // finished by the other worker
  CHECK(std::stoi(owner[0][1]) >= 2);                        // a second claim bumped the epoch

  c.worker(0).resume();  // its tool call returns; recording the result is fenced off
  std::this_thread::sleep_for(2s);
  CHECK_MESSAGE(c.worker(0).running(), c.logs_tail());
  auto after = test::query_db(c, "SELECT lease_owner, lease_epoch, status FROM jobs WHERE id=?", {*id});
  CHECK(after[0][0] == owner[0][0]);
  CHECK(after[0][1] == owner[0][1]);
  for (int i = 0; i < 4; ++i) REQUIRE(c.client().submit(test::text_job(c.webhook_url(), "after-" + std::to_string(i))));

  bool drained = c.drain(30s);
  auto r = test::check_history(c, "sigstop-past-lease");
  MESSAGE(r.summary() << "\n  paused for " << paused_s << " s (lease " << o.lease_ms << " ms)");
  CHECK_MESSAGE(drained, c.logs_tail());
  CHECK(r.ok());
  CHECK(r.n_lost == 0);
  CHECK(r.n_acked == 9);
  CHECK(r.n_tool_duplicates == 1);  // the paused worker's call, sent again by the new owner under its id
}
