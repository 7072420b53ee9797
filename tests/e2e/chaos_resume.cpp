// Client-side tools across workers (issue 7; docs/RELIABILITY.md, "Worker faults"): a job waiting
// in requires_action resumes, after the client's tool outputs, on the worker that holds its KV and
// computes only the new tokens (usage.cached_tokens); with that worker killed while the job waits,
// another worker re-prefills from the transcript and finishes it.
#include <doctest/doctest.h>

#include "cluster.h"
#include "history_check.h"

using namespace agentq;
using namespace std::chrono_literals;
using json = nlohmann::json;

namespace {

struct resumed {
  std::string id, owner_before, owner_after;
  json turn2_usage;
  std::string status;
};

// Submit a client-side tool job, wait for requires_action, optionally kill its worker, answer the
// call, wait for the end.
resumed run_client_tool_job(test::cluster& c, const std::string& marker, bool kill_owner) {
  json body = test::tool_job(c.tool_url(), c.webhook_url(), marker);
  body["tools"][0].erase("execution");  // client-side: the job waits for the client's output
  auto id = c.client().submit(body);
  REQUIRE(id);
  resumed out;
  out.id = *id;
  json job;
  for (int i = 0; i < 300; ++i) {
    job = c.client().get_job(*id);
    if (job.value("status", "") == "requires_action" || test::is_terminal_status(job.value("status", ""))) break;
    std::this_thread::sleep_for(100ms);
  }
  REQUIRE_MESSAGE(job.value("status", "") == "requires_action", job.dump() << c.logs_tail());
  std::string call_id = job["required_action"]["tool_calls"][0]["id"];
  out.owner_before = test::query_db(c, "SELECT lease_owner FROM jobs WHERE id=?", {*id})[0][0];
  if (kill_owner)
    for (size_t i = 0; i < c.n_workers(); ++i)
      if (out.owner_before == c.worker_id(i))
        c.worker(i).kill9();
  auto x = c.client().call("POST", "/v1/jobs/" + *id + "/tool_outputs",
                           json{{"tool_outputs", {{{"tool_call_id", call_id}, {"output", "sunny, 21 C"}}}}}.dump());
  REQUIRE_MESSAGE(x.status / 100 == 2, x.response);
  REQUIRE_MESSAGE(c.wait_terminal({*id}, 30s), c.logs_tail());
  job = c.client().get_job(*id);
  out.status = job.value("status", "");
  out.owner_after = test::query_db(c, "SELECT lease_owner FROM jobs WHERE id=?", {*id})[0][0];
  REQUIRE(job["turns"].size() >= 2);
  out.turn2_usage = job["turns"][1]["usage"];
  return out;
}

}  // namespace

TEST_CASE("requires_action -> tool outputs -> resumes on the same worker with only new tokens computed") {
  test::cluster_options o;
  o.n_workers = 2;
  test::cluster c(o);
  auto r1 = run_client_tool_job(c, "resume-same-worker", false);
  bool drained = c.drain(30s);
  auto r = test::check_history(c, "requires-action-same-worker");
  MESSAGE(r.summary() << "\n  turn 2 usage " << r1.turn2_usage.dump() << " on " << r1.owner_after);
  CHECK(test::is_terminal_status(r1.status));
  CHECK(r1.owner_after == r1.owner_before);
  CHECK(r1.turn2_usage["cached_tokens"].get<int>() > 0);
  CHECK(r1.turn2_usage["cached_tokens"].get<int>() < r1.turn2_usage["prompt_tokens"].get<int>());
  CHECK(drained);
  CHECK(r.ok());
}

TEST_CASE("requires_action with its worker killed: another worker re-prefills and finishes") {
  test::cluster_options o;
  o.n_workers = 2;
  test::cluster c(o);
  auto r2 = run_client_tool_job(c, "resume-other-worker", true);
  bool drained = c.drain(30s);
  auto r = test::check_history(c, "requires-action-worker-killed");
  MESSAGE(r.summary() << "\n  turn 2 usage " << r2.turn2_usage.dump() << " on " << r2.owner_after << " (was "
                      << r2.owner_before << ")");
  CHECK(test::is_terminal_status(r2.status));
  CHECK(r2.owner_after != r2.owner_before);
  CHECK(drained);
  CHECK(r.ok());
}
