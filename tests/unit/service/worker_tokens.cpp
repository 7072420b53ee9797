// Per-worker tokens (#28, --worker-tokens-file) on a real store and the real POST
// /v1/worker/messages handler: the file's parser refuses malformed lines without echoing a
// token; a worker's token acts for its own id (and its model workers "<id>.<model>") only: a
// message under another id, or replaying another worker's msg_id, is a 403; a write to a job
// leased to another worker is fenced even with the right epoch, and its lease is not renewed; removing a line revokes
// (by the file's mtime and by an explicit reload, as SIGHUP does); a bad edit keeps the tokens in force; the fleet-wide
// --worker-token keeps working beside the file.
#include "api/worker_tokens.h"

#include <doctest/doctest.h>

#include <chrono>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "api/worker_protocol.h"
#include "auth/keys.h"
#include "store/store.h"
#include "temp_dir.h"

using namespace agentq;
using json = nlohmann::json;

namespace {

const std::string k_tok_a = "tok_a_0123456789abcdef", k_tok_b = "tok_b_0123456789abcdef";

struct fixture {
  test::temp_dir dir;
  std::string tokens_path = dir.file("worker-tokens");
  std::unique_ptr<store::store> st;
  std::unique_ptr<auth::key_store> keys;
  std::unique_ptr<api::worker_protocol> wp;
  int seq = 0;
  explicit fixture(const std::string& shared = "") {
    write("# worker tokens\nwa " + k_tok_a + "\n\nwb " + k_tok_b + "  # gpu host b\n");
    std::string err;
    store::store_options o;
    o.path = dir.file("agentq.db");
    st = store::store::open(o, &err);
    REQUIRE_MESSAGE(st, err);
    keys = auth::key_store::open(o.path, &err);
    REQUIRE_MESSAGE(keys, err);
    api::worker_protocol_options wo;
    wo.token = shared;
    wo.tokens_file = tokens_path;
    wp = api::worker_protocol::open(wo, *st, nullptr, *keys, o.path, &err);
    REQUIRE_MESSAGE(wp, err);
  }
  void write(const std::string& text) { std::ofstream(tokens_path, std::ios::trunc) << text; }
  std::string job() {
    store::new_job nj;
    nj.tenant = "t1";
    nj.request_json = R"({"messages":[{"role":"user","content":"hi"}]})";
    return st->create_job(nj).get().job.id;
  }
  json msg(const std::string& worker_id, const std::string& kind, const std::string& job_id, int64_t epoch, json body,
           const std::string& msg_owner = "") {
    return {{"v", 2},
            {"msg_id", (msg_owner.empty() ? worker_id : msg_owner) + ":i1:" + std::to_string(++seq)},
            {"worker_id", worker_id},
            {"incarnation", "i1"},
            {"job_id", job_id},
            {"epoch", epoch},
            {"kind", kind},
            {"body", body}};
  }
  http::response post(const std::string& bearer, std::vector<json> msgs) {
    http::request req;
    req.method = "POST";
    req.path = "/v1/worker/messages";
    if (!bearer.empty()) req.headers.push_back({"authorization", "Bearer " + bearer});
    req.body = json{{"messages", msgs}}.dump();
    return wp->handle(req);
  }
  json first_reply(const http::response& r) {
    REQUIRE(r.status == 200);
    return json::parse(r.body)["replies"][0];
  }
};

}  // namespace

TEST_CASE("worker tokens file: parsing") {
  std::string err;
  auto ok = api::parse_worker_tokens("a " + k_tok_a + "\n# c\n\n  b.x_1-2 " + k_tok_b + " # note\n", &err);
  REQUIRE_MESSAGE(ok, err);
  CHECK(ok->size() == 2);
  CHECK(ok->at("b.x_1-2") == k_tok_b);
  for (const std::string& bad :
       std::vector<std::string>{"a\n", "a tok b\n", "a short\n", "a/b " + k_tok_a + "\n", "a " + k_tok_a + " x\n",
                                "a " + k_tok_a + "\na " + k_tok_b + "\n"}) {
    err.clear();
    CHECK_FALSE(api::parse_worker_tokens(bad, &err));
    CHECK(err.starts_with("line "));
    CHECK(err.find(k_tok_a) == std::string::npos);  // a token never reaches a log line
  }
  CHECK(api::worker_id_covered("wa", "wa"));
  CHECK(api::worker_id_covered("wa", "wa.beta"));  // a process's model workers
  CHECK_FALSE(api::worker_id_covered("wa", "wab"));
  CHECK_FALSE(api::worker_id_covered("wa", "wa."));
  CHECK_FALSE(api::worker_id_covered("wa.beta", "wa"));
}

TEST_CASE("a worker's token acts for its own id only") {
  fixture f;
  const std::string id = f.job();
  // unknown token, no token: 401
  CHECK(f.post("tok_x_0123456789abcdef", {f.msg("wa", "job", id, 0, json::object())}).status == 401);
  CHECK(f.post("", {f.msg("wa", "job", id, 0, json::object())}).status == 401);
  // wa's token under wb's id, or with wb's msg_id (a replay of wb's recorded reply): 403
  auto r = f.post(k_tok_a, {f.msg("wb", "claim", id, 0, {{"lease_ms", 30000}, {"max_attempts", 5}})});
  CHECK(r.status == 403);
  CHECK(r.body.find("worker 'wb'") != std::string::npos);
  CHECK(f.post(k_tok_a, {f.msg("wa", "job", id, 0, json::object(), "wb")}).status == 403);
  // a batch with one foreign message is refused whole
  CHECK(
      f.post(k_tok_a, {f.msg("wa", "job", id, 0, json::object()), f.msg("wb", "job", id, 0, json::object())}).status ==
      403);
  CHECK(f.st->get_job(id)->lease_epoch == 0);  // nothing was applied

  // wb claims under its model worker's id; wa, knowing the epoch, still cannot write the job
  json c = f.first_reply(
      f.post(k_tok_b, {f.msg("wb.beta", "claim", id, 0, {{"lease_ms", 30000}, {"max_attempts", 5}}, "wb")}));
  REQUIRE(c["status"] == "ok");
  const int64_t epoch = c["result"]["epoch"];
  json fin = {{"status", "completed"}, {"result", "{}"}, {"error", ""}, {"usage", ""}};
  json stolen = f.first_reply(f.post(k_tok_a, {f.msg("wa", "finish", id, epoch, fin)}));
  CHECK(stolen["status"] == "fenced");
  CHECK(stolen["result"]["reason"] == "owner");
  CHECK(f.first_reply(f.post(k_tok_a, {f.msg("wa", "event", id, epoch, {{"type", "x"}, {"data", "{}"}})}))["status"] ==
        "fenced");
  CHECK(f.st->get_job(id)->status == store::job_status::running);
  // nor keep its lease alive: renewing another's job reports it lost and leaves the lease as it was
  const int64_t expires = f.st->get_job(id)->lease_expires_ms;
  json rn = f.first_reply(
      f.post(k_tok_a,
             {f.msg("wa", "renew", "", 0, {{"jobs", json::array({json::array({id, epoch})})}, {"lease_ms", 600000}})}));
  CHECK(rn["result"]["lost"] == json::array({id}));
  CHECK(f.st->get_job(id)->lease_expires_ms == expires);
  rn = f.first_reply(
      f.post(k_tok_b,
             {f.msg("wb", "renew", "", 0, {{"jobs", json::array({json::array({id, epoch})})}, {"lease_ms", 600000}})}));
  CHECK(rn["result"]["lost"].empty());
  CHECK(f.st->get_job(id)->lease_expires_ms > expires);
  // its owner (the process id "wb", as a worker's writes carry it) can
  CHECK(f.first_reply(f.post(k_tok_b, {f.msg("wb", "finish", id, epoch, fin)}))["status"] == "ok");
  CHECK(f.st->get_job(id)->status == store::job_status::completed);
}

TEST_CASE("revocation: remove the line (mtime or SIGHUP's reload); a bad edit keeps the tokens") {
  fixture f;
  const std::string id = f.job();
  auto read = [&](const std::string& tok, const std::string& wid) {
    return f.post(tok, {f.msg(wid, "job", id, 0, json::object())}).status;
  };
  CHECK(read(k_tok_a, "wa") == 200);
  // a malformed edit: logged, the old tokens stay in force
  f.write("wa " + k_tok_a + "\nwb\n");
  std::string err;
  CHECK_FALSE(f.wp->reload_tokens(&err));
  CHECK(err.find("line 2") != std::string::npos);
  CHECK(read(k_tok_b, "wb") == 200);
  // revoke wb: an explicit reload (SIGHUP) takes effect at once
  f.write("wa " + k_tok_a + "\n");
  REQUIRE(f.wp->reload_tokens(&err));
  CHECK(read(k_tok_b, "wb") == 401);
  CHECK(read(k_tok_a, "wa") == 200);
  // re-add wb with a new token and revoke wa, without a reload: picked up from the file's mtime
  std::this_thread::sleep_for(std::chrono::milliseconds(1100));
  f.write("wb tok_b2_0123456789abcdef\n");
  std::this_thread::sleep_for(std::chrono::milliseconds(1100));  // at most one look a second
  CHECK(read(k_tok_a, "wa") == 401);
  CHECK(read("tok_b2_0123456789abcdef", "wb") == 200);
  CHECK(read(k_tok_b, "wb") == 401);
}

TEST_CASE("the fleet-wide --worker-token still works beside the file") {
  fixture f("wt_shared_0123456789");
  const std::string id = f.job();
  CHECK(f.post("wt_shared_0123456789", {f.msg("any-worker", "job", id, 0, json::object())}).status == 200);
  CHECK(f.post(k_tok_a, {f.msg("wa", "job", id, 0, json::object())}).status == 200);
  CHECK(f.post(k_tok_a, {f.msg("any-worker", "job", id, 0, json::object())}).status == 403);
}
