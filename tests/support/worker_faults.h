// A worker-crash scenario shared by tests/e2e/chaos_worker_kill.cpp and tests/slow/chaos_fault_points.cpp:
// one worker armed with a fault point (util/fault.h) takes the first jobs and dies there (_exit 137);
// then a healthy fleet of two (the crashed worker restarted without the fault, plus a second)
// finishes everything, and the history checker reports.
#pragma once

#include <doctest/doctest.h>

#include "cluster.h"
#include "history_check.h"

namespace agentq::test {

// n_tool tool jobs + n_text text jobs; the report of check_history (CHECKs the crash and the drain).
inline history_report kill_at_fault_point(const std::string& fault, const std::string& name, int n_tool = 6,
                                          int n_text = 4) {
  using namespace std::chrono_literals;
  cluster_options o;
  o.n_workers = 1;
  o.worker_env = {{"AGENTQ_FAULT", fault}};
  cluster c(o);
  for (int i = 0; i < n_tool; ++i)
    REQUIRE(c.client().submit(tool_job(c.tool_url(), c.webhook_url(), name + "-tool-" + std::to_string(i))));
  for (int i = 0; i < n_text; ++i)
    REQUIRE(c.client().submit(text_job(c.webhook_url(), name + "-text-" + std::to_string(i))));
  CHECK_MESSAGE(c.worker(0).wait_exit(30s) == 137, c.logs_tail());
  c.restart_worker(0);
  c.add_worker();
  bool drained = c.drain(40s);
  auto r = check_history(c, name);
  MESSAGE(r.summary());
  CHECK_MESSAGE(drained, c.logs_tail());
  return r;
}

}  // namespace agentq::test
