// The control plane's side of the remote-worker protocol on a real SQLite store: the worker token
// (never an API key) authenticates; a claim hands over the spec, transcript, tool results and the
// key's secret; writes are fenced on the lease epoch; a repeated msg_id gets its first reply and is
// not applied twice; protocol versions outside own-1..own+1 and unknown kinds are invalid.
#include "api/worker_protocol.h"

#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include "auth/keys.h"
#include "store_obs_fixture.h"

using namespace agentq;
using json = nlohmann::json;

namespace {

struct fixture : test::store_obs_fixture {
  std::unique_ptr<auth::key_store> keys;
  std::unique_ptr<api::worker_protocol> wp;
  int seq = 0;
  fixture() {
    std::string err;
    keys = auth::key_store::open(db_path, &err);
    REQUIRE_MESSAGE(keys, err);
    api::worker_protocol_options wo;
    wo.token = "wt_secret_token";
    wo.version = 2;
    wp = api::worker_protocol::open(wo, *st, obs.get(), *keys, db_path, &err);
    REQUIRE_MESSAGE(wp, err);
  }
  std::string job(const std::string& tenant = "t1") { return new_job(tenant).id; }
  json msg(const std::string& kind, const std::string& job_id, int64_t epoch, json body, int v = 2,
           std::string msg_id = {}) {
    return {{"v", v},
            {"msg_id", msg_id.empty() ? "w1:i1:" + std::to_string(++seq) : msg_id},
            {"worker_id", "w1"},
            {"incarnation", "i1"},
            {"job_id", job_id},
            {"epoch", epoch},
            {"kind", kind},
            {"body", body}};
  }
  http::response post(const std::string& bearer, const json& body) {
    http::request req;
    req.method = "POST";
    req.path = "/v1/worker/messages";
    if (!bearer.empty()) req.headers.push_back({"authorization", "Bearer " + bearer});
    req.body = body.dump();
    return wp->handle(req);
  }
};

}  // namespace

TEST_CASE("only the worker token is a worker credential") {
  fixture f;
  std::string err;
  auto admin = f.keys->create("admin", true, &err);
  REQUIRE(admin);
  json batch = {{"messages", json::array({f.msg("job", "job_x", 0, json::object())})}};
  CHECK(f.post("", batch).status == 401);
  CHECK(f.post("wrong", batch).status == 401);
  CHECK(f.post(admin->key, batch).status == 401);
  auto ok = f.post("wt_secret_token", batch);
  CHECK(ok.status == 200);
  CHECK(json::parse(ok.body)["replies"][0]["status"] == "not_found");
  CHECK(f.post("wt_secret_token", json{{"nope", 1}}).status == 400);
}

TEST_CASE("a claim hands over what the job needs; stale epochs are fenced") {
  fixture f;
  std::string err;
  auto key = f.keys->create("t1", false, &err);
  REQUIRE(key);
  const std::string id = f.job("t1");
  f.keys->link_job(id, key->info.id);
  json c = f.wp->apply(f.msg("claim", id, 0, {{"lease_ms", 30000}, {"max_attempts", 5}}));
  REQUIRE(c["status"] == "ok");
  CHECK(c["result"]["outcome"] == "claimed");
  const int64_t epoch = c["result"]["epoch"].get<int64_t>();
  CHECK(c["result"]["job"]["request_json"].get<std::string>().find("hi") != std::string::npos);
  CHECK(c["result"]["secret"] == key->info.webhook_secret);
  CHECK(c["result"]["transcript"].empty());

  json rows = json::array({{{"role", "user"}, {"content", "hi"}}});
  CHECK(f.wp->apply(f.msg("init_transcript", id, epoch, {{"rows", rows}}))["status"] == "ok");
  json turn = {{"turn_idx", 0}, {"content", "hello"}};
  CHECK(f.wp->apply(f.msg("commit_turn", id, epoch, turn))["status"] == "ok");
  CHECK(f.wp->apply(f.msg("commit_turn", id, epoch - 1, {{"turn_idx", 1}, {"content", "late"}}))["status"] == "fenced");
  CHECK(f.wp->apply(f.msg("event", id, epoch - 1, {{"type", "note"}, {"data", "{}"}}))["status"] == "fenced");
  CHECK(f.wp->apply(f.msg("timeline", id, epoch - 1, {{"entry", {{"kind", "tool"}, {"start_ms", 1}}}}))["status"] ==
        "fenced");
  CHECK(f.st->read_transcript(id).size() == 2);

  // the same message again: its first reply, applied once
  json ev = f.msg("event", id, epoch, {{"type", "note"}, {"data", "{\"n\":1}"}});
  const size_t n_before = f.st->read_events(id, 0, 1000).size();
  CHECK(f.wp->apply(ev)["status"] == "ok");
  CHECK(f.wp->apply(ev)["status"] == "ok");
  CHECK(f.st->read_events(id, 0, 1000).size() == n_before + 1);

  json fin = f.msg("finish", id, epoch, {{"status", "completed"}, {"result", "{\"content\":\"hello\"}"}, {"error", ""},
                                         {"usage", ""}});
  CHECK(f.wp->apply(fin)["status"] == "ok");
  CHECK(f.wp->apply(fin)["status"] == "ok");  // a lost reply resent: not "fenced"
  CHECK(f.st->get_job(id)->status == store::job_status::completed);
  CHECK(f.wp->apply(f.msg("release", id, epoch, json::object()))["status"] == "fenced");
  // a replayed claim gets the secret again (it is not kept in applied_messages)
  CHECK(f.wp->apply(f.msg("claim", id, 0, {{"lease_ms", 30000}, {"max_attempts", 5}}, 2, "w1:i1:1"))["result"]["secret"] ==
        key->info.webhook_secret);
}

TEST_CASE("protocol versions and malformed messages") {
  fixture f;
  const std::string id = f.job();
  CHECK(f.wp->apply(f.msg("job", id, 0, json::object(), 1))["status"] == "ok");
  CHECK(f.wp->apply(f.msg("job", id, 0, json::object(), 3))["status"] == "ok");
  json r = f.wp->apply(f.msg("job", id, 0, json::object(), 4));
  CHECK(r["status"] == "invalid");
  CHECK(r["result"]["reason"] == "protocol");
  CHECK(f.wp->apply(f.msg("job", id, 0, json::object(), 0))["status"] == "invalid");
  CHECK(f.wp->apply(f.msg("drop_tables", id, 0, json::object()))["status"] == "invalid");
  CHECK(f.wp->apply(json::array())["status"] == "invalid");
  CHECK(f.wp->apply(f.msg("commit_turn", id, 1, {{"turn_idx", "x"}}))["status"] == "invalid");
  CHECK(f.wp->apply(f.msg("finish", id, 1, {{"status", "running"}}))["status"] == "invalid");
}
