// Fault scenario (docs/RELIABILITY.md, "Runaway models"): a model that would call tools forever or
// emit oversized tool calls is ended by the job's limits (max_turns, max_output_tokens,
// deadline_seconds, max_tokens_per_turn) with `incomplete` and a reason; the fleet keeps serving.
#include <doctest/doctest.h>

#include "cluster.h"
#include "history_check.h"

using namespace agentq;
using namespace std::chrono_literals;
using json = nlohmann::json;

namespace {

// A tool job that forces a tool call on every turn: without limits it never ends.
json looping_job(test::cluster& c, const std::string& marker) {
  json j = test::tool_job(c.tool_url(), c.webhook_url(), marker);
  j["tool_choice_every_turn"] = true;
  j["max_turns"] = 256;
  j["max_output_tokens"] = 100000;
  return j;
}

}  // namespace

TEST_CASE("runaway models are ended by their limits") {
  test::cluster_options o;
  o.n_workers = 2;
  test::cluster c(o);
  c.slow_tools(300ms);

  json turns = looping_job(c, "loop-max-turns");
  turns["max_turns"] = 3;
  json tokens = looping_job(c, "loop-max-output-tokens");
  tokens["max_output_tokens"] = 30;
  json deadline = looping_job(c, "loop-deadline");
  deadline["deadline_seconds"] = 2;
  // An oversized tool call: a free-form string argument the model fills until max_tokens_per_turn.
  json oversized = test::tool_job(c.tool_url(), c.webhook_url(), "oversized-call");
  oversized["tools"][0]["function"]["parameters"]["properties"]["city"] = {{"type", "string"}};
  oversized["max_tokens_per_turn"] = 12;
  oversized["stop"] = json::array();

  struct expect {
    json body;
    std::string status, reason;  // reason: a substring of error.message ("" = any)
  };
  std::vector<expect> cases = {{turns, "incomplete", "max_turns"},
                               {tokens, "incomplete", "max_output_tokens"},
                               {deadline, "incomplete", "deadline"},
                               {oversized, "", ""}};
  std::vector<std::string> ids;
  for (auto& e : cases) {
    auto id = c.client().submit(e.body);
    REQUIRE_MESSAGE(id, c.client().log().back().response);
    ids.push_back(*id);
  }
  for (int i = 0; i < 3; ++i)
    REQUIRE(c.client().submit(test::text_job(c.webhook_url(), "bystander-" + std::to_string(i))));
  bool drained = c.drain(40s);
  std::string detail;
  for (size_t i = 0; i < cases.size(); ++i) {
    json j = c.client().get_job(ids[i]);
    std::string st = j.value("status", "");
    std::string err = j["error"].is_object() ? j["error"].value("message", "") : "";
    detail += "\n  " + cases[i].body["metadata"]["chaos"].get<std::string>() + ": " + st + " after " +
              std::to_string(j.value("n_turns", 0)) + " turns, " +
              std::to_string(j["usage"].value("completion_tokens", 0)) + " completion tokens" +
              (err.empty() ? "" : " (" + err + ")");
    CHECK(test::is_terminal_status(st));
    if (!cases[i].status.empty()) CHECK(st == cases[i].status);
    if (!cases[i].reason.empty()) CHECK_MESSAGE(err.find(cases[i].reason) != std::string::npos, err);
  }
  auto r = test::check_history(c, "runaway-limits");
  MESSAGE(r.summary() << detail);
  CHECK_MESSAGE(drained, c.logs_tail());
  CHECK(r.ok());
  CHECK(r.n_lost == 0);
}
