// The control plane's side of the remote-worker protocol on a real SQLite store: the worker token
// (never an API key) authenticates; a claim hands over the spec, transcript, tool results and the
// key's secret; writes are fenced on the lease epoch; a repeated msg_id gets its first reply and is
// not applied twice; protocol versions outside own-1..own+1 and unknown kinds are invalid; a job's
// content (row, transcript, tool results, the secret of a replayed claim) is read only under the
// reader's current lease (the read fence).
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
    wo.version = 3;
    wp = api::worker_protocol::open(wo, *st, obs.get(), *keys, db_path, &err);
    REQUIRE_MESSAGE(wp, err);
  }
  std::string job(const std::string& tenant = "t1") { return new_job(tenant).id; }
  json msg(const std::string& kind, const std::string& job_id, int64_t epoch, json body, int v = 3,
           std::string msg_id = {}, const std::string& worker_id = "w1") {
    return {{"v", v},
            {"msg_id", msg_id.empty() ? worker_id + ":i1:" + std::to_string(++seq) : msg_id},
            {"worker_id", worker_id},
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
  // ... but only while it holds the lease: the job is over, so neither the job nor its secret now
  json replay = f.wp->apply(f.msg("claim", id, 0, {{"lease_ms", 30000}, {"max_attempts", 5}}, 3, "w1:i1:1"));
  CHECK(replay["status"] == "error");
  CHECK(replay["result"]["reason"] == "lease");
  CHECK_FALSE(replay["result"].contains("secret"));
  CHECK_FALSE(replay["result"].contains("job"));
}

TEST_CASE("the read fence: a job's content only under the reader's current lease") {
  fixture f;
  std::string err;
  auto key = f.keys->create("t1", false, &err);
  REQUIRE(key);
  const std::string id = f.job("t1");
  f.keys->link_job(id, key->info.id);
  json claim = f.msg("claim", id, 0, {{"lease_ms", 30000}, {"max_attempts", 5}});
  json c = f.wp->apply(claim);
  REQUIRE(c["result"]["outcome"] == "claimed");
  const int64_t epoch = c["result"]["epoch"].get<int64_t>();
  REQUIRE(f.wp->apply(f.msg("init_transcript", id, epoch, {{"rows", json::array({{{"role", "user"}, {"content", "hi"}}})}}))
              ["status"] == "ok");
  auto content_of = [](const json& r) { return r["result"]["job"]["request_json"].get<std::string>(); };

  // the holder, under its epoch: everything
  json row = f.wp->apply(f.msg("job", id, epoch, json::object()));
  CHECK(content_of(row).find("hi") != std::string::npos);
  CHECK_FALSE(row["result"].contains("state_only"));
  CHECK(f.wp->apply(f.msg("transcript", id, epoch, json::object()))["result"]["transcript"].size() == 1);
  CHECK(f.wp->apply(f.msg("tool_results", id, epoch, json::object()))["status"] == "ok");
  // the holder under another epoch (a stale or no lease), another worker with the right epoch:
  // the job's state alone, the transcript and tool results fenced
  for (const json& m : {f.msg("job", id, epoch - 1, json::object()), f.msg("job", id, 0, json::object()),
                        f.msg("job", id, epoch, json::object(), 3, "", "w2"),
                        f.msg("job", id, epoch, json::object(), 3, "", "w1x")}) {
    json r = f.wp->apply(m);
    CHECK(r["status"] == "ok");
    CHECK(r["result"]["state_only"] == true);
    CHECK(r["result"]["job"]["status"] == "running");
    CHECK(r["result"]["job"]["lease_epoch"] == epoch);
    CHECK(content_of(r).empty());
    CHECK(r["result"]["job"]["tenant"] == "");
  }
  for (const char* kind : {"transcript", "tool_results"})
    for (const json& m : {f.msg(kind, id, epoch - 1, json::object()), f.msg(kind, id, 0, json::object()),
                          f.msg(kind, id, epoch, json::object(), 3, "", "w2")}) {
      json r = f.wp->apply(m);
      CHECK(r["status"] == "fenced");
      CHECK(r["result"]["reason"] == "lease");
      CHECK_FALSE(r["result"].contains("transcript"));
    }
  // protocol 2 sent epoch 0 on reads: taken as the sender's current lease, still the sender's only
  CHECK(f.wp->apply(f.msg("transcript", id, 0, json::object(), 2))["status"] == "ok");
  CHECK(content_of(f.wp->apply(f.msg("job", id, 0, json::object(), 2))).find("hi") != std::string::npos);
  CHECK(f.wp->apply(f.msg("transcript", id, 0, json::object(), 2, "", "w2"))["status"] == "fenced");
  // a model worker's claim ("w1.beta") is read by its process ("w1"), as a worker's reads carry it
  const std::string id2 = f.job("t1");
  json c2 = f.wp->apply(f.msg("claim", id2, 0, {{"lease_ms", 30000}, {"max_attempts", 5}}, 3, "w1:i1:b1", "w1.beta"));
  REQUIRE(c2["result"]["outcome"] == "claimed");
  CHECK(f.wp->apply(f.msg("transcript", id2, c2["result"]["epoch"], json::object()))["status"] == "ok");

  // another worker claims the job after a lapsed lease (epoch + 1): w1's epoch reads nothing now,
  // and a replay of w1's claim gets no secret
  REQUIRE(f.wp->apply(f.msg("release", id, epoch, json::object()))["status"] == "ok");
  json c3 = f.wp->apply(f.msg("claim", id, 0, {{"lease_ms", 30000}, {"max_attempts", 5}}, 3, "", "w2"));
  REQUIRE(c3["result"]["outcome"] == "claimed");
  CHECK(c3["result"]["secret"] == key->info.webhook_secret);
  CHECK(f.wp->apply(f.msg("transcript", id, epoch, json::object()))["status"] == "fenced");
  CHECK(f.wp->apply(f.msg("transcript", id, 0, json::object(), 2))["status"] == "fenced");
  CHECK(f.wp->apply(f.msg("transcript", id, c3["result"]["epoch"], json::object(), 3, "", "w2"))["status"] == "ok");
  json replay = f.wp->apply(claim);
  CHECK(replay["status"] == "error");  // not its first reply: that lease is gone
  CHECK_FALSE(replay["result"].contains("secret"));
  CHECK_FALSE(replay["result"].contains("transcript"));
  // open reads: no content
  CHECK(f.wp->apply(f.msg("job_models", "", 0, {{"ids", json::array({id})}}, 3, "", "w3"))["status"] == "ok");
  CHECK(f.wp->apply(f.msg("cancelled_among", "", 0, {{"ids", json::array({id})}}, 3, "", "w3"))["status"] == "ok");
}

TEST_CASE("protocol versions and malformed messages") {
  fixture f;
  const std::string id = f.job();
  CHECK(f.wp->apply(f.msg("job", id, 0, json::object(), 2))["status"] == "ok");
  CHECK(f.wp->apply(f.msg("job", id, 0, json::object(), 4))["status"] == "ok");
  json r = f.wp->apply(f.msg("job", id, 0, json::object(), 5));
  CHECK(r["status"] == "invalid");
  CHECK(r["result"]["reason"] == "protocol");
  CHECK(f.wp->apply(f.msg("job", id, 0, json::object(), 1))["status"] == "invalid");
  CHECK(f.wp->apply(f.msg("drop_tables", id, 0, json::object()))["status"] == "invalid");
  CHECK(f.wp->apply(json::array())["status"] == "invalid");
  CHECK(f.wp->apply(f.msg("commit_turn", id, 1, {{"turn_idx", "x"}}))["status"] == "invalid");
  CHECK(f.wp->apply(f.msg("finish", id, 1, {{"status", "running"}}))["status"] == "invalid");
}
