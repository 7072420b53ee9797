// Deletion in a fault-injection cluster (docs/RELIABILITY.md P2 restated, issue 33): jobs deleted
// while queued or running (cancelled first) and after they finished; the history checker, which
// knows deletion, finds every promise kept: tombstones hold one terminal state, every read after a
// DELETE answered 200 is a 404, nothing is lost or left pending in Redis.
#include <doctest/doctest.h>

#include "cluster.h"
#include "history_check.h"

using namespace agentq;
using namespace std::chrono_literals;

TEST_CASE("delete live and finished jobs under load: the checker's promises hold") {
  test::cluster_options o;
  o.n_workers = 2;
  test::cluster c(o);
  std::vector<std::string> ids;
  for (int i = 0; i < 4; ++i) {
    auto id = c.client().submit(test::tool_job(c.tool_url(), c.webhook_url(), "del-tool-" + std::to_string(i)));
    REQUIRE(id);
    ids.push_back(*id);
  }
  for (int i = 0; i < 6; ++i) {
    auto id = c.client().submit(test::text_job(c.webhook_url(), "del-text-" + std::to_string(i)));
    REQUIRE(id);
    ids.push_back(*id);
  }
  // two right away (queued or running: cancelled first), then two once they have finished
  for (int i : {0, 4}) CHECK(c.client().call("DELETE", "/v1/jobs/" + ids[size_t(i)]).status == 200);
  for (int i : {0, 4}) CHECK(c.client().call("GET", "/v1/jobs/" + ids[size_t(i)]).status == 404);
  REQUIRE(c.wait_terminal({ids[5], ids[6]}, 40s));
  for (int i : {5, 6}) CHECK(c.client().call("DELETE", "/v1/jobs/" + ids[size_t(i)]).status == 200);
  for (int i : {5, 6}) {
    CHECK(c.client().call("GET", "/v1/jobs/" + ids[size_t(i)]).status == 404);
    CHECK(c.client().call("GET", "/v1/jobs/" + ids[size_t(i)] + "/events").status == 404);
  }
  bool drained = c.drain(60s);
  auto r = test::check_history(c, "delete-under-load");
  MESSAGE(r.summary());
  CHECK_MESSAGE(drained, c.logs_tail());
  CHECK(r.ok());
  CHECK(r.n_lost == 0);
  CHECK(r.n_acked == 10);
  CHECK(r.n_deleted == 4);
}
