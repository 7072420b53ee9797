// Fault scenario (docs/RELIABILITY.md, "Worker faults"): a worker dies with kill -9 semantics
// (_exit(137) at a fault point) in the middle of a turn, and right after a tool's side effect;
// the other workers reclaim its jobs and the history checker finds every promise kept.
#include <doctest/doctest.h>

#include "cluster.h"
#include "history_check.h"

using namespace agentq;
using namespace std::chrono_literals;

namespace {

// One worker armed with `fault` takes the first jobs and dies at it; then a healthy fleet of two
// (the crashed worker restarted without the fault, plus a second) finishes everything.
test::history_report run_kill_scenario(const std::string& fault, const std::string& name) {
  test::cluster_options o;
  o.n_workers = 1;
  o.worker_env = {{"AGENTQ_FAULT", fault}};
  test::cluster c(o);
  std::vector<std::string> ids;
  for (int i = 0; i < 6; ++i) {
    auto id = c.client().submit(test::tool_job(c.tool_url(), c.webhook_url(), name + "-tool-" + std::to_string(i)));
    REQUIRE(id);
    ids.push_back(*id);
  }
  for (int i = 0; i < 4; ++i)
    REQUIRE(c.client().submit(test::text_job(c.webhook_url(), name + "-text-" + std::to_string(i))));
  CHECK_MESSAGE(c.worker(0).wait_exit(30s) == 137, c.logs_tail());
  c.restart_worker(0);
  c.add_worker();
  bool drained = c.drain(40s);
  auto r = test::check_history(c, name);
  MESSAGE(r.summary());
  CHECK_MESSAGE(drained, c.logs_tail());
  return r;
}

}  // namespace

TEST_CASE("worker kill -9 mid-turn: the job resumes elsewhere, every promise kept") {
  auto r = run_kill_scenario("mid_decode", "kill-mid-decode");
  CHECK(r.ok());
  CHECK(r.n_lost == 0);
  CHECK(r.n_acked == 10);
  CHECK(r.n_completed + r.n_incomplete == 10);
}

TEST_CASE("worker kill -9 after a tool's side effect: the call is re-sent with its id, effect once") {
  auto r = run_kill_scenario("after_tool_effect", "kill-after-tool-effect");
  CHECK(r.ok());
  CHECK(r.n_lost == 0);
  CHECK(r.n_acked == 10);
  CHECK(r.n_completed + r.n_incomplete == 10);
  CHECK(r.n_tool_duplicates >= 1);  // the crashed worker's call, sent again under the same id
}
