// Fault scenario (docs/RELIABILITY.md, "Worker faults"): the API process (which sends webhooks)
// dies right after a receiver accepted a delivery and before the attempt was recorded
// (AGENTQ_FAULT=mid_webhook); restarted, it sends that delivery again under the same webhook-id.
#include <doctest/doctest.h>

#include "cluster.h"
#include "history_check.h"

using namespace agentq;
using namespace std::chrono_literals;

TEST_CASE("API killed mid-webhook: the delivery is repeated under the same webhook-id") {
  test::cluster_options o;
  o.n_workers = 1;
  // Only the last job's delivery kills the API: a crash on an earlier one would race the submits
  // still to come (a fast worker finishes job 0 before job 3 is posted).
  o.api_env = {{"AGENTQ_FAULT", "mid_webhook"}, {"AGENTQ_FAULT_MATCH", "\"chaos\":\"hook-3\""}};
  o.api_args = {"--webhook-timeout-ms", "3000"};  // a killed attempt is retried after timeout + 5 s
  test::cluster c(o);
  for (int i = 0; i < 4; ++i) REQUIRE(c.client().submit(test::text_job(c.webhook_url(), "hook-" + std::to_string(i))));
  CHECK_MESSAGE(c.api().wait_exit(30s) == 137, c.logs_tail());
  c.restart_api();
  bool drained = c.drain(30s);
  // The delivery the receiver accepted just before the crash is pending again: it comes a second time.
  for (int i = 0; i < 200 && c.webhooks().requests().size() <= 4; ++i) std::this_thread::sleep_for(100ms);
  auto r = test::check_history(c, "api-killed-mid-webhook");
  MESSAGE(r.summary());
  CHECK_MESSAGE(drained, c.logs_tail());
  CHECK(r.ok());
  CHECK(r.n_lost == 0);
  CHECK(r.n_acked == 4);
  CHECK(r.n_webhook_duplicates >= 1);
}
