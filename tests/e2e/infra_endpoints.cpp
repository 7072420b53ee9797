// Fault scenarios (docs/RELIABILITY.md, "Infrastructure faults"): the endpoints agentq calls out
// to misbehave. A webhook receiver that hangs (the attempt times out and is retried under the same
// webhook-id until it answers); a tool server that hangs (the tool's timeout_ms ends the call and
// the model gets an error result) or answers garbage (non-JSON, invalid UTF-8: passed on as text).
#include <doctest/doctest.h>

#include <atomic>

#include "cluster.h"
#include "history_check.h"
#include "infra_faults.h"

using namespace agentq;
using namespace std::chrono_literals;
using json = nlohmann::json;

TEST_CASE("webhook receiver hanging: attempts time out, are retried with one webhook-id, then delivered") {
  test::cluster_options o;
  o.api_args = {"--webhook-timeout-ms", "300"};
  test::cluster c(o);
  std::atomic<int> n_hung{0};
  c.webhooks().set_handler([&n_hung](const test::tool_server::request&) {
    if (n_hung++ < 4) std::this_thread::sleep_for(1500ms);  // the sender gives up after 300 ms
    return std::pair{200, std::string("{}")};
  });
  auto ids = test::submit_tiny(c, 4, "hook-hang");
  bool drained = c.drain(40s);
  // NOTE: the receiver records a request on arrival, so drain() can return on the hung attempts:
  // wait for every delivery to succeed before the history is checked.
  int n_timeouts = 0;
  for (auto& id : ids) {
    json d;
    test::eventually(
        [&] {
          d = c.client().call_json("GET", "/v1/jobs/" + id + "/webhooks")["data"];
          return d.size() == 1 && d[0]["state"] == "succeeded";
        },
        10s, 100ms);
    REQUIRE(d.size() == 1);
    CHECK(d[0]["state"] == "succeeded");
    for (auto& a : d[0]["attempts"])
      n_timeouts += a["status_code"].is_null() && a["error"].get<std::string>().find("timeout") != std::string::npos;
  }
  auto r = test::check_history(c, "webhook-receiver-hanging");
  CHECK_MESSAGE(drained, c.logs_tail());
  test::expect_no_loss(r, 4);
  MESSAGE("webhook attempts that timed out: " << n_timeouts);
  CHECK(n_timeouts >= 4);
  CHECK(r.n_webhook_duplicates >= 4);  // the hung attempts, re-sent under the same webhook-id
}

TEST_CASE("tool server hanging or answering garbage: the call ends, the model gets the result, the job ends") {
  test::cluster c;
  c.tools().set_handler([](const test::tool_server::request& q) {
    if (q.path == "/hang") {
      std::this_thread::sleep_for(1500ms);  // past timeout_ms (400)
      return std::pair{200, std::string(R"({"output":"too late"})")};
    }
    return std::pair{200, std::string("\xff\xfe<html>not json \x01\x02 {\"output\":", 30)};
  });
  auto job_for = [&](const std::string& path, const std::string& marker) {
    auto j = test::tool_job(c.tools().url(path), c.webhook_url(), marker);
    j["tools"][0]["execution"]["timeout_ms"] = 400;
    j["tools"][0]["execution"]["max_retries"] = 1;
    return j;
  };
  auto hang = c.client().submit(job_for("/hang", "tool-hang"));
  auto garbage = c.client().submit(job_for("/garbage", "tool-garbage"));
  REQUIRE(hang);
  REQUIRE(garbage);
  bool drained = c.drain(40s);
  auto r = test::check_history(c, "tool-server-hanging-or-garbage");
  CHECK_MESSAGE(drained, c.logs_tail());
  test::expect_no_loss(r, 2);
  auto tool_message = [&](const std::string& id) {
    auto job = c.client().get_job(id);
    for (auto& m : job["transcript"])
      if (m.value("role", "") == "tool") return m.value("content", "");
    return std::string("<no tool message>");
  };
  std::string hung = tool_message(*hang), junk = tool_message(*garbage);
  MESSAGE("hanging tool -> " << hung << "\ngarbage tool -> " << junk);
  CHECK(hung.starts_with("error: timeout"));
  CHECK(junk.find("not json") != std::string::npos);
  int n_hang_requests = 0;
  for (auto& q : c.tools().requests()) n_hang_requests += q.path == "/hang";
  CHECK(n_hang_requests == 2);  // the call and its one retry, then the error result
}
