// Fault scenario (docs/RELIABILITY.md, "Worker faults"): a worker dies with kill -9 semantics
// (_exit(137) at a fault point) in the middle of a turn, and right after a tool's side effect;
// the other workers reclaim its jobs and the history checker finds every promise kept.
#include <doctest/doctest.h>

#include "worker_faults.h"

using namespace agentq;
using namespace std::chrono_literals;

TEST_CASE("worker kill -9 mid-turn: the job resumes elsewhere, every promise kept") {
  auto r = test::kill_at_fault_point("mid_decode", "kill-mid-decode");
  CHECK(r.ok());
  CHECK(r.n_lost == 0);
  CHECK(r.n_acked == 10);
  CHECK(r.n_completed + r.n_incomplete == 10);
}

TEST_CASE("worker kill -9 after a tool's side effect: the call is re-sent with its id, effect once") {
  auto r = test::kill_at_fault_point("after_tool_effect", "kill-after-tool-effect");
  CHECK(r.ok());
  CHECK(r.n_lost == 0);
  CHECK(r.n_acked == 10);
  CHECK(r.n_completed + r.n_incomplete == 10);
  CHECK(r.n_tool_duplicates >= 1);  // the crashed worker's call, sent again under the same id
}
