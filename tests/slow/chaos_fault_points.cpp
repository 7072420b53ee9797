// Slow sweep (docs/RELIABILITY.md, "Worker faults"): the worker-crash scenario at every worker fault
// point of util/fault.h, each with its own cluster and history check. ~1 minute:
//   ctest -L slow -R chaos_fault_points --output-on-failure
#include <doctest/doctest.h>

#include "worker_faults.h"

using namespace agentq;

TEST_CASE("worker kill at every fault point") {
  for (const char* fault : {"after_claim", "mid_decode", "after_turn_commit", "after_tool_effect", "before_xack"}) {
    CAPTURE(fault);
    auto r = test::kill_at_fault_point(fault, std::string("kill-") + fault);
    CHECK(r.ok());
    CHECK(r.n_lost == 0);
    CHECK(r.n_acked == 10);
  }
}
