// End to end over loopback: the real agentqd (embedded redis-server, the tiny model, the
// worker), a loopback webhook receiver, and the REST API: auth, submit -> signed webhook ->
// result, idempotency, cancel, tool outputs, SSE resume, tenant isolation, bad inputs,
// webhook retries with one webhook-id, and loopback latency / throughput figures.
#include <doctest/doctest.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <thread>

#include "http/router.h"
#include "http/server.h"
#include "net/http_client.h"
#include "agentqd_e2e.h"
#include "test_env.h"
#include "webhooks/signing.h"

namespace fs = std::filesystem;
using namespace agentq;
using json = nlohmann::json;
using namespace std::chrono_literals;
using namespace agentq::test::e2e;

TEST_CASE("agentqd end to end") {
  test::require_tiny_model();
  daemon_proc d;
  api admin{d, k_admin_key};
  api anon{d, ""};
  receiver hook;

  SUBCASE("health, readiness, openapi, models, auth") {
    CHECK(anon.get("/healthz").status == 200);
    auto ready = anon.get("/readyz");
    CHECK_MESSAGE(ready.status == 200, ready.raw);
    CHECK(anon.get("/openapi.json").body["openapi"].get<std::string>().starts_with("3."));
    auto m = anon.get("/v1/models");
    CHECK(m.status == 401);
    CHECK(m.body["error"]["type"] == "authentication_error");
    api bad{d, "aq_not_a_real_key_000000"};
    CHECK(bad.get("/v1/models").status == 401);
    auto models = admin.get("/v1/models");
    REQUIRE(models.status == 200);
    CHECK(models.body["data"][0]["id"] == "stories260K");
    CHECK(models.body["data"][0]["chat_family"] == "plain");  // no chat template (#25)
    auto [key, secret] = make_tenant(admin, "t-auth");
    api user{d, key};
    CHECK(user.get("/v1/models").status == 200);
    CHECK(user.post("/v1/keys", {{"tenant", "x"}}).status == 403);
    auto keys = admin.get("/v1/keys").body["data"];
    std::string key_id;
    for (const auto& k : keys)
      if (k["tenant"] == "t-auth") key_id = k["id"];
    REQUIRE(!key_id.empty());
    CHECK(admin.post("/v1/keys/" + key_id + "/revoke", json::object()).status == 200);
    CHECK(user.get("/v1/models").status == 401);  // revoked: the same uniform 401
  }

  SUBCASE("submit -> signed webhook -> result; SSE with Last-Event-ID resume") {
    auto [key, secret] = make_tenant(admin, "t-main");
    api user{d, key};
    json body = simple_job();
    body["webhook"] = {{"url", hook.url()}};
    body["metadata"] = {{"run", "e2e"}};
    auto t0 = std::chrono::steady_clock::now();
    auto r = user.post("/v1/jobs", body);
    double submit_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    REQUIRE_MESSAGE(r.status == 202, r.raw);
    std::string id = r.body["id"];
    CHECK(r.body["status"] == "queued");
    MESSAGE("submit latency (first job): " << submit_ms << " ms");

    // NOTE: the tiny model often runs into max_tokens_per_turn: incomplete is a normal outcome here
    json job = user.wait_status(id, {"completed", "failed", "incomplete"});
    std::string final_status = job.value("status", "");
    REQUIRE_MESSAGE((final_status == "completed" || final_status == "incomplete"), job.dump(2) << "\n" << d.log());
    CHECK(job["usage"]["completion_tokens"].get<int>() > 0);
    CHECK(job["usage"]["total_tokens"].get<int>() ==
          job["usage"]["prompt_tokens"].get<int>() + job["usage"]["completion_tokens"].get<int>());
    CHECK(job["turns"].size() >= 1);
    CHECK(job["transcript"].size() >= 2);
    CHECK(job["metadata"]["run"] == "e2e");
    CHECK_FALSE(job["output"].is_null());

    REQUIRE(hook.wait_for([](const auto& h) { return !h.empty(); }, 10s));
    auto h = hook.snapshot()[0];
    CHECK(webhooks::verify(secret, h.id, h.timestamp, h.body, h.signature, int64_t(time(nullptr))) ==
          webhooks::verify_result::ok);
    json payload = json::parse(h.body);
    CHECK(payload["type"] == "job." + final_status);
    CHECK(payload["data"]["id"] == id);
    CHECK(payload["data"]["status"] == final_status);

    auto deliveries = user.get("/v1/jobs/" + id + "/webhooks").body["data"];
    REQUIRE(deliveries.size() == 1);
    CHECK(deliveries[0]["id"] == h.id);
    // the delivery row may still be settling right after the receiver answered
    for (int i = 0; i < 40 && deliveries[0]["state"] != "succeeded"; ++i) {
      std::this_thread::sleep_for(50ms);
      deliveries = user.get("/v1/jobs/" + id + "/webhooks").body["data"];
    }
    CHECK(deliveries[0]["state"] == "succeeded");

    // events: JSON list, then SSE from the start, then resumed after the first event
    auto events = user.get("/v1/jobs/" + id + "/events").body["data"];
    REQUIRE(events.size() >= 3);
    auto sse = user.call("GET", "/v1/jobs/" + id + "/events", "", {{"Accept", "text/event-stream"}});
    CHECK(sse.status == 200);
    CHECK(sse.res.header("content-type") == "text/event-stream");
    size_t n_frames = 0;
    for (size_t p = 0; (p = sse.raw.find("\nevent: ", p)) != std::string::npos; ++p) ++n_frames;
    CHECK(n_frames == events.size());
    int64_t first = events[0]["id"];
    auto resumed = user.call("GET", "/v1/jobs/" + id + "/events", "",
                             {{"Accept", "text/event-stream"}, {"Last-Event-ID", std::to_string(first)}});
    CHECK(resumed.raw.find("id: " + std::to_string(first) + "\n") == std::string::npos);
    CHECK(resumed.raw.find("id: " + events[1]["id"].dump() + "\n") != std::string::npos);

    // list with metadata filter
    auto list = user.get("/v1/jobs?metadata.run=e2e");
    REQUIRE(list.status == 200);
    CHECK(list.body["data"].size() == 1);
    CHECK(user.get("/v1/jobs?metadata.run=other").body["data"].empty());
    CHECK(user.get("/v1/jobs?status=" + final_status).body["data"].size() == 1);
    CHECK(user.get("/v1/jobs?status=queued").body["data"].empty());
  }

  SUBCASE("list pages: newest first through next_cursor; the same job objects as a filtered list's") {
    // NOTE: an unfiltered page is written as text from each job's (job_json), a metadata-filtered one
    // as a document of job objects: the two must show a job the same.
    auto [key, secret] = make_tenant(admin, "t-pages");
    api user{d, key};
    std::vector<std::string> ids;
    for (int i = 0; i < 5; ++i) {
      json body = simple_job("page " + std::to_string(i));
      body["metadata"] = {{"i", std::to_string(i)}, {"run", "pages"}};
      if (i == 2) body["webhook"] = {{"url", hook.url()}, {"events", {"job.completed"}}};
      auto r = user.post("/v1/jobs", body);
      REQUIRE(r.status == 202);
      ids.push_back(r.body["id"]);
      // NOTE: "newest first" is by the submit's ms; jobs of one ms are ordered by their ids' random
      // half (store/job_id.h), so two submits in one ms (a 1 ms submit, seen in CI) may list in either
      // order. The expected order below needs a ms between them.
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    for (const auto& id : ids) user.wait_status(id, {"completed", "incomplete"});  // objects that stay put
    std::vector<std::string> seen;
    std::string after;
    std::vector<bool> more;
    for (int page = 0; page < 5; ++page) {
      auto r = user.get("/v1/jobs?limit=2" + (after.empty() ? "" : "&after=" + after));
      REQUIRE(r.status == 200);
      CHECK(r.body["object"] == "list");
      for (const auto& j : r.body["data"]) {
        seen.push_back(j["id"]);
        auto one = user.get("/v1/jobs?metadata.run=pages&metadata.i=" + j["metadata"]["i"].get<std::string>());
        REQUIRE(one.body["data"].size() == 1);
        CHECK(one.body["data"][0] == j);
      }
      more.push_back(r.body["has_more"]);
      if (!r.body["has_more"]) {
        CHECK(r.body["next_cursor"].is_null());
        break;
      }
      CHECK(r.body["next_cursor"] == r.body["data"].back()["id"]);
      after = r.body["next_cursor"];
    }
    CHECK(more == std::vector<bool>{true, true, false});
    CHECK(seen == std::vector<std::string>{ids[4], ids[3], ids[2], ids[1], ids[0]});
    auto empty = user.get("/v1/jobs?after=" + ids[0]);
    CHECK(empty.raw == R"({"data":[],"has_more":false,"next_cursor":null,"object":"list"})");
  }

  SUBCASE("idempotency") {
    auto [key, secret] = make_tenant(admin, "t-idem");
    api user{d, key};
    auto a = user.post("/v1/jobs", simple_job(), {{"Idempotency-Key", "k1"}});
    REQUIRE(a.status == 202);
    auto b = user.post("/v1/jobs", simple_job(), {{"Idempotency-Key", "k1"}});
    CHECK(b.status == 200);
    CHECK(b.body["id"] == a.body["id"]);
    auto c = user.post("/v1/jobs", simple_job("A different story"), {{"Idempotency-Key", "k1"}});
    CHECK(c.status == 409);
    CHECK(c.body["error"]["param"] == "Idempotency-Key");
    auto other = user.post("/v1/jobs", simple_job(), {{"Idempotency-Key", "k2"}});
    CHECK(other.body["id"] != a.body["id"]);
  }

  SUBCASE("client tools: requires_action webhook, tool outputs, cancel") {
    auto [key, secret] = make_tenant(admin, "t-tools");
    api user{d, key};
    json body = simple_job();
    body["tools"] = {{{"type", "function"},
                      {"function",
                       {{"name", "lookup"},
                        {"parameters",
                         {{"type", "object"},
                          {"properties", {{"q", {{"type", "string"}, {"enum", {"alpha", "beta"}}}}}},
                          {"required", {"q"}}}}}}}};
    body["tool_choice"] = "required";
    body["max_tokens_per_turn"] = 256;  // room for the whole forced tool call
    body["webhook"] = {{"url", hook.url()}, {"events", {"job.requires_action", "job.cancelled"}}};
    auto r = user.post("/v1/jobs", body);
    REQUIRE_MESSAGE(r.status == 202, r.raw);
    std::string id = r.body["id"];
    json job = user.wait_status(id, {"requires_action", "completed", "failed", "incomplete"});
    REQUIRE_MESSAGE(job["status"] == "requires_action", job.dump(2));
    auto calls = job["required_action"]["tool_calls"];
    REQUIRE(calls.size() >= 1);
    // a wrong call id is rejected, naming the field
    auto bad = user.post("/v1/jobs/" + id + "/tool_outputs",
                         {{"tool_outputs", {{{"tool_call_id", "call_nope"}, {"output", "x"}}}}});
    CHECK(bad.status == 400);
    CHECK(bad.body["error"]["param"] == "tool_outputs");
    json outs = json::array();
    for (const auto& c : calls) outs.push_back({{"tool_call_id", c["id"]}, {"output", "42"}});
    auto ok = user.post("/v1/jobs/" + id + "/tool_outputs", {{"tool_outputs", outs}});
    CHECK_MESSAGE(ok.status == 200, ok.raw);
    // the job runs on (tool_choice required applies to the first turn) and stops again or ends
    job = user.wait_status(id, {"requires_action", "completed", "failed", "incomplete"});
    CHECK(job["transcript"].dump().find("\"42\"") != std::string::npos);

    // a second job: cancel while it waits on the client
    auto r2 = user.post("/v1/jobs", body);
    std::string id2 = r2.body["id"];
    REQUIRE(user.wait_status(id2, {"requires_action"})["status"] == "requires_action");
    // live SSE: a stream opened while the job waits gets the cancellation as it happens, then ends
    auto before = user.get("/v1/jobs/" + id2 + "/events").body["data"];
    std::string last_id = before.back()["id"].dump();
    reply live;
    std::thread sse_reader([&] {
      live = user.call("GET", "/v1/jobs/" + id2 + "/events", "", {{"Accept", "text/event-stream"}, {"Last-Event-ID", last_id}});
    });
    std::this_thread::sleep_for(300ms);
    auto c = user.post("/v1/jobs/" + id2 + "/cancel", json::object());
    sse_reader.join();
    CHECK(live.status == 200);
    CHECK(live.raw.find("\"cancelled\"") != std::string::npos);
    CHECK(live.raw.find("id: " + last_id + "\n") == std::string::npos);
    CHECK(c.status == 200);
    CHECK(c.body["status"] == "cancelled");
    auto again = user.post("/v1/jobs/" + id2 + "/cancel", json::object());
    CHECK(again.status == 409);
    CHECK(hook.wait_for(
        [&](const auto& hits) {
          int n = 0;
          for (const auto& h : hits) n += h.body.find("job.cancelled") != std::string::npos;
          return n >= 1;
        },
        10s));
    bool saw_requires_action = false;
    for (const auto& h : hook.snapshot()) saw_requires_action |= h.body.find("job.requires_action") != std::string::npos;
    CHECK(saw_requires_action);
  }

  SUBCASE("tenant isolation") {
    auto [ka, sa] = make_tenant(admin, "t-a");
    auto [kb, sb] = make_tenant(admin, "t-b");
    api a{d, ka}, b{d, kb};
    auto r = a.post("/v1/jobs", simple_job());
    REQUIRE(r.status == 202);
    std::string id = r.body["id"];
    CHECK(b.get("/v1/jobs/" + id).status == 404);
    CHECK(b.get("/v1/jobs/" + id + "/events").status == 404);
    CHECK(b.post("/v1/jobs/" + id + "/cancel", json::object()).status == 404);
    CHECK(b.get("/v1/jobs").body["data"].empty());
    CHECK(a.get("/v1/jobs/" + id).status == 200);
    CHECK(a.get("/v1/jobs/job_doesnotexist").status == 404);
  }

  SUBCASE("each class of bad input gets its 4xx") {
    auto [key, secret] = make_tenant(admin, "t-bad");
    api user{d, key};
    auto check = [&](const std::string& what, const reply& r, int status, const std::string& param) {
      INFO(what << ": " << r.raw);
      CHECK(r.status == status);
      CHECK(r.body.is_object());
      CHECK(r.body["error"]["type"].is_string());
      CHECK(r.body["error"]["message"].is_string());
      if (!param.empty()) CHECK(r.body["error"]["param"] == param);
    };
    check("malformed JSON", user.call("POST", "/v1/jobs", "{\"model\":"), 400, "");
    check("bad UTF-8", user.call("POST", "/v1/jobs", "{\"model\":\"\xff\"}"), 400, "");
    json j = simple_job();
    j["model"] = 7;
    check("wrong type", user.post("/v1/jobs", j), 400, "model");
    j = simple_job();
    j["model"] = "nope";
    check("unknown model", user.post("/v1/jobs", j), 400, "model");
    j = simple_job();
    j["tools"] = json::array();
    for (int i = 0; i < 65; ++i) j["tools"].push_back({{"type", "function"}, {"function", {{"name", "t" + std::to_string(i)}}}});
    check("too many tools", user.post("/v1/jobs", j), 400, "tools");
    j = simple_job();
    j["tools"] = {{{"type", "function"}, {"function", {{"name", "t"}, {"description", std::string(40000, 'x')}}}}};
    check("tool too large", user.post("/v1/jobs", j), 400, "tools[0]");
    j = simple_job();
    j["response_format"] = {{"type", "json_schema"}, {"json_schema", {{"schema", {{"type", "no-such-type"}}}}}};
    auto schema = user.post("/v1/jobs", j);
    CHECK_MESSAGE(schema.status == 400, schema.raw);
    j = simple_job(std::string(20000, 'a'));
    check("prompt over context", user.post("/v1/jobs", j), 400, "messages");
    j = simple_job();
    j["webhook"] = {{"url", "http://169.254.169.254/latest/meta-data"}};
    check("SSRF webhook", user.post("/v1/jobs", j), 400, "webhook.url");
    j["webhook"] = {{"url", "http://0x7f.0.0.1:80/"}};
    check("hex IP webhook", user.post("/v1/jobs", j), 400, "webhook.url");
    check("unknown route", user.get("/v1/nope"), 404, "");
    check("wrong method", user.call("DELETE", "/v1/jobs"), 405, "");
    check("bad list limit", user.get("/v1/jobs?limit=0"), 400, "limit");
    check("bad status filter", user.get("/v1/jobs?status=sleeping"), 400, "status");
    // #24 item 10: accepted before
    auto dup = user.call("POST", "/v1/jobs", R"({"model":"stories260K","model":"x","messages":[{"role":"user","content":"hi"}]})");
    check("duplicate key", dup, 400, "");
    CHECK(dup.body["error"]["message"].get<std::string>().find("appears twice") != std::string::npos);
    check("text/plain body", user.call("POST", "/v1/jobs", simple_job().dump(), {{"Content-Type", "text/plain"}}), 400,
          "Content-Type");
    check("bad list cursor", user.get("/v1/jobs?after=zzz"), 400, "after");
    j = simple_job();
    j["messages"].push_back({{"role", "tool"}, {"tool_call_id", "call_nope"}, {"content", "42"}});
    check("tool message answering no call", user.post("/v1/jobs", j), 400, "messages[1].tool_call_id");
    auto bad_json = user.call("POST", "/v1/jobs", "{\"model\": tru}");
    std::string msg = bad_json.body["error"]["message"].get<std::string>();
    CHECK_MESSAGE(msg.starts_with("invalid JSON at byte "), msg);
    CHECK_MESSAGE(msg.find("json.exception") == std::string::npos, msg);
  }

  SUBCASE("webhook receiver failing with 500, then recovering, gets each event with one webhook-id") {
    auto [key, secret] = make_tenant(admin, "t-retry");
    api user{d, key};
    {
      std::lock_guard lock(hook.mu);
      hook.n_fail = 2;
    }
    json body = simple_job();
    body["webhook"] = {{"url", hook.url()}};
    auto r = user.post("/v1/jobs", body);
    REQUIRE(r.status == 202);
    std::string id = r.body["id"];
    REQUIRE(hook.wait_for([](const auto& h) { return h.size() >= 3 && h.back().status == 200; }, 30s));
    auto hits = hook.snapshot();
    CHECK(hits[0].status == 500);
    CHECK(hits[1].status == 500);
    CHECK(hits[0].id == hits[1].id);
    CHECK(hits[1].id == hits[2].id);
    CHECK(hits[0].body == hits[2].body);
    CHECK(webhooks::verify(secret, hits[2].id, hits[2].timestamp, hits[2].body, hits[2].signature,
                           int64_t(time(nullptr))) == webhooks::verify_result::ok);
    json deliveries;
    for (int i = 0; i < 40; ++i) {
      deliveries = user.get("/v1/jobs/" + id + "/webhooks").body["data"];
      if (!deliveries.empty() && deliveries[0]["state"] == "succeeded") break;
      std::this_thread::sleep_for(50ms);
    }
    REQUIRE(deliveries.size() == 1);
    CHECK(deliveries[0]["state"] == "succeeded");
    CHECK(deliveries[0]["attempts"].size() == 3);
    CHECK(deliveries[0]["attempts"][0]["status_code"] == 500);
    CHECK(deliveries[0]["attempts"][2]["status_code"] == 200);
  }

  SUBCASE("loopback figures: submit latency and requests/s") {
    auto [key, secret] = make_tenant(admin, "t-bench");
    api user{d, key};
    std::vector<double> ms;
    for (int i = 0; i < 50; ++i) {
      auto t0 = std::chrono::steady_clock::now();
      auto r = user.post("/v1/jobs", simple_job());
      ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
      CHECK(r.status == 202);
    }
    std::sort(ms.begin(), ms.end());
    MESSAGE("POST /v1/jobs latency over 50: p50 " << ms[25] << " ms, p90 " << ms[45] << " ms");
    const int n = 400, n_threads = 4;
    auto t0 = std::chrono::steady_clock::now();
    std::vector<std::thread> ts;
    std::atomic<int> n_ok{0};
    for (int t = 0; t < n_threads; ++t)
      ts.emplace_back([&] {
        for (int i = 0; i < n / n_threads; ++i) n_ok += user.get("/v1/models").status == 200;
      });
    for (auto& t : ts) t.join();
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    CHECK(n_ok == n);
    MESSAGE("GET /v1/models: " << n / s << " requests/s (4 clients, new connection per request)");
  }
}

TEST_CASE("rate limit: 429 with Retry-After") {
  test::require_tiny_model();
  daemon_proc d({"--rate-limit", "1", "--rate-burst", "3"});
  api admin{d, k_admin_key};
  int n_429 = 0;
  std::string retry_after;
  for (int i = 0; i < 6; ++i) {
    auto r = admin.get("/v1/models");
    if (r.status == 429) {
      ++n_429;
      retry_after = r.res.header("retry-after");
      CHECK(r.body["error"]["type"] == "rate_limit_error");
    }
  }
  CHECK(n_429 >= 2);
  CHECK(retry_after == "1");
}

TEST_CASE("--chat-family after --model sets that model's family, shown by GET /v1/models (#25)") {
  test::require_tiny_model();
  // daemon_proc passes "--model <tiny>" first, so this flag is per model, not the default.
  daemon_proc d({"--chat-family", "deepseek-r1"});
  api admin{d, k_admin_key};
  auto models = admin.get("/v1/models");
  REQUIRE(models.status == 200);
  CHECK(models.body["data"][0]["chat_family"] == "deepseek-r1");
  // The start-up log names the family and where it came from.
  CHECK_MESSAGE(d.log().find("chat family: deepseek-r1 (--chat-family)") != std::string::npos, d.log());
}
