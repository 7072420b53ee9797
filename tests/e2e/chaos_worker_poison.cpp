// Fault scenario (docs/RELIABILITY.md, "Worker faults"): a job that crashes every worker that
// claims it (AGENTQ_FAULT=after_claim matched to the job) is dead-lettered after max_deliveries
// and fails with a reason, while the other jobs complete; crashed workers are restarted.
#include <doctest/doctest.h>

#include "cluster.h"
#include "history_check.h"

using namespace agentq;
using namespace std::chrono_literals;
using json = nlohmann::json;

TEST_CASE("a job that crashes every worker is dead-lettered; the others are not stalled") {
  test::cluster_options o;
  o.n_workers = 2;
  o.max_deliveries = 3;
  o.worker_env = {{"AGENTQ_FAULT", "after_claim"}, {"AGENTQ_FAULT_MATCH", "poison-pill"}};
  test::cluster c(o);
  auto poison = c.client().submit(test::text_job(c.webhook_url(), "poison-pill"));
  REQUIRE(poison);
  std::vector<std::string> others;
  for (int i = 0; i < 6; ++i) {
    auto id = c.client().submit(test::text_job(c.webhook_url(), "healthy-" + std::to_string(i)));
    REQUIRE(id);
    others.push_back(*id);
  }
  // Supervise: restart crashed workers (with the same fault armed) until the poison job ends.
  int n_crashes = 0;
  auto end = std::chrono::steady_clock::now() + 40s;
  std::string status;
  while (std::chrono::steady_clock::now() < end) {
    for (size_t i = 0; i < c.n_workers(); ++i)
      if (!c.worker(i).running()) {
        CHECK(c.worker(i).last_exit() == 137);
        n_crashes++;
        c.restart_worker(i, o.worker_env);
      }
    status = c.client().get_job(*poison).value("status", "");
    if (test::is_terminal_status(status)) break;
    std::this_thread::sleep_for(100ms);
  }
  CHECK_MESSAGE(status == "failed", c.logs_tail());
  json job = c.client().get_job(*poison);
  CHECK(job["error"]["message"].get<std::string>().find("deliver") != std::string::npos);

  bool drained = c.drain(30s);
  auto r = test::check_history(c, "poison-job");
  MESSAGE(r.summary() << "\n  worker crashes: " << n_crashes);
  CHECK_MESSAGE(drained, c.logs_tail());
  CHECK(r.ok());
  CHECK(r.n_lost == 0);
  CHECK(r.n_failed == 1);
  CHECK(r.n_completed + r.n_incomplete == 6);
  CHECK(r.n_dead_lettered == 1);
  CHECK(n_crashes >= o.max_deliveries - 1);
}
