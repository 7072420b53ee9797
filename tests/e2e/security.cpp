// Security end to end against the real agentqd on loopback (no address allow-list):
// missing / malformed / bad / revoked keys all get the same 401 body (no oracle); another
// tenant's job is a 404 on every job route and nothing changes; per-key rate limits give
// 429 + Retry-After while another tenant is unaffected; an SSRF URL corpus is refused at
// submission for webhook and tool URLs (400 naming the param); and no API key or webhook
// secret ever reaches agentqd's logs. (Connect-time checks: tests/unit/service/ssrf_guard.cpp.)
#include <doctest/doctest.h>

#include "agentqd_e2e.h"
#include "test_env.h"
#include "loopback_name.h"

using namespace agentq;
using namespace agentq::test::e2e;

namespace {

std::string read_file(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// GET /v1/keys as a value (a range-for over a member of the temporary reply would dangle).
json list_keys(const api& who) {
  return who.get("/v1/keys").body["data"];
}

// Replace every occurrence of `from` (so two 404 bodies can be compared without their ids).
std::string without(std::string s, const std::string& from) {
  for (size_t at; !from.empty() && (at = s.find(from)) != std::string::npos;) s.replace(at, from.size(), "ID");
  return s;
}

const std::vector<std::string> k_ssrf_corpus = {
    // loopback, unspecified, private, link-local, metadata, CGNAT
    "http://127.0.0.1/", "http://127.0.0.1:8080/hook", "http://127.255.255.254/", "http://localhost/",
    "http://LOCALHOST./", "http://api.localhost/", "http://0.0.0.0/", "http://10.0.0.1/", "http://172.16.5.4/",
    "http://172.31.255.255/", "http://192.168.1.1/", "http://169.254.169.254/latest/meta-data/", "http://169.254.1.1/",
    "http://100.64.0.1/", "http://100.127.255.254/",
    // IPv6: loopback, unspecified, ULA (EC2 metadata), link-local, IPv4-mapped and -translated
    "http://[::1]/", "http://[::]/", "http://[fd00:ec2::254]/", "http://[fe80::1]/", "http://[fe80::1%25lo]/",
    "http://[::ffff:127.0.0.1]/", "http://[::ffff:7f00:1]/", "http://[::ffff:169.254.169.254]/",
    "http://[0:0:0:0:0:ffff:10.0.0.1]/", "http://[64:ff9b::7f00:1]/",
    // decimal, hex, octal, short and trailing-dot IPv4 forms
    "http://2130706433/", "http://0x7f000001/", "http://0x7f.1/", "http://0x7f.0.0.1/", "http://0177.0.0.1/",
    "http://017700000001/", "http://127.1/", "http://0/", "http://127.0.0.1./", "http://169.254.169.254./",
    "http://2852039166/", "http://0xa9.0xfe.0xa9.0xfe/",
    // userinfo and parser-confusion tricks
    "http://good@127.0.0.1/", "http://good.example:80@127.0.0.1/", "http://user:pw@169.254.169.254/",
    "http://example.com\\@127.0.0.1/", "http://127.0.0.1#@example.com/", "http://127.0.0.1%2f@example.com/",
    "http:// 127.0.0.1/", "http://127.0.0.1\t/",
    // not HTTP
    "file:///etc/passwd", "gopher://127.0.0.1:6379/_INFO", "ftp://example.com/", "dict://127.0.0.1:6379/info",
    "ldap://127.0.0.1/", "javascript:alert(1)", "//127.0.0.1/", "127.0.0.1"};

}  // namespace

TEST_CASE("security: auth oracle, tenant isolation, SSRF at submission, secrets not logged") {
  test::require_tiny_model();
  // --role api: no worker, so a submitted job stays queued and "nothing changed" is exact.
  daemon_proc d({"--allow-addresses", "", "--role", "api", "--log-level", "debug"});
  api admin{d, k_admin_key};
  auto [key_a, secret_a] = make_tenant(admin, "sec-a");
  auto [key_b, secret_b] = make_tenant(admin, "sec-b");
  api a{d, key_a}, b{d, key_b};
  const std::string job_secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

  {  // missing, malformed, bad and revoked keys: one uniform 401
    auto [key_r, secret_r] = make_tenant(admin, "sec-revoked");
    std::string key_r_id;
    for (const auto& k : list_keys(admin))
      if (k["tenant"] == "sec-revoked") key_r_id = k["id"];
    REQUIRE(admin.post("/v1/keys/" + key_r_id + "/revoke", json::object()).status == 200);
    api anon{d, ""};
    std::vector<std::pair<std::string, std::vector<std::pair<std::string, std::string>>>> tries = {
        {"missing", {}},
        {"empty bearer", {{"Authorization", "Bearer "}}},
        {"no scheme", {{"Authorization", key_a}}},
        {"basic scheme", {{"Authorization", "Basic " + key_a}}},
        {"two spaces", {{"Authorization", "Bearer  " + key_a}}},
        {"trailing junk", {{"Authorization", "Bearer " + key_a + "x"}}},
        {"prefix only", {{"Authorization", "Bearer " + key_a.substr(0, 12)}}},
        {"bad key", {{"Authorization", "Bearer aq_" + std::string(40, '0')}}},
        {"huge key", {{"Authorization", "Bearer aq_" + std::string(3000, 'z')}}},
        {"non-ASCII", {{"Authorization", "Bearer aq_\xc3\xa9\xff"}}},
        {"revoked", {{"Authorization", "Bearer " + key_r}}},
    };
    std::string first_body;
    for (const auto& [what, headers] : tries) {
      INFO(what);
      for (const char* path : {"/v1/models", "/v1/jobs"}) {
        auto r = anon.call("GET", path, "", headers);
        CHECK(r.status == 401);
        CHECK(r.res.header("www-authenticate") == "Bearer");
        if (first_body.empty()) first_body = r.raw;
        CHECK(r.raw == first_body);  // same bytes whatever was wrong: no oracle
      }
      auto post = anon.call("POST", "/v1/jobs", simple_job().dump(), headers);
      CHECK(post.status == 401);
      CHECK(post.raw == first_body);
    }
    CHECK(json::parse(first_body)["error"]["type"] == "authentication_error");
    CHECK(a.get("/v1/models").status == 200);
  }

  {  // another tenant's job: 404 on every route, nothing changed
    json body = simple_job();
    body["metadata"] = {{"owner", "a"}};
    auto r = a.post("/v1/jobs", body);
    REQUIRE_MESSAGE(r.status == 202, r.raw);
    std::string id = r.body["id"];
    auto job_before = a.get("/v1/jobs/" + id).body;
    // NOTE: the server's own "waiting" notice (no live worker serves the model: this test runs no
    // worker) lands asynchronously; what tenant B must not change is everything else.
    auto own_events = [&] {
      json out = json::array();
      for (auto& e : a.get("/v1/jobs/" + id + "/events").body["data"])
        if (e.value("type", "") != "waiting") out.push_back(e);
      return out;
    };
    auto events_before = own_events();
    REQUIRE(job_before["status"] == "queued");

    auto missing = b.get("/v1/jobs/job_doesnotexist0000");
    REQUIRE(missing.status == 404);
    struct route_try {
      std::string method, path, body;
      std::vector<std::pair<std::string, std::string>> headers;
    };
    std::vector<route_try> routes = {
        {"GET", "/v1/jobs/" + id, "", {}},
        {"GET", "/v1/jobs/" + id + "/events", "", {}},
        {"GET", "/v1/jobs/" + id + "/events", "", {{"Accept", "text/event-stream"}}},
        {"GET", "/v1/jobs/" + id + "/webhooks", "", {}},
        {"POST", "/v1/jobs/" + id + "/cancel", "{}", {}},
        {"POST",
         "/v1/jobs/" + id + "/tool_outputs",
         R"({"tool_outputs":[{"tool_call_id":"call_0","output":"pwned"}]})",
         {}},
    };
    for (const auto& t : routes) {
      INFO(t.method << " " << t.path);
      auto res = b.call(t.method, t.path, t.body, t.headers);
      CHECK(res.status == 404);
      CHECK(res.body["error"]["type"] == "not_found_error");
      // indistinguishable from an id that does not exist
      CHECK(without(res.raw, id) == without(missing.raw, "job_doesnotexist0000"));
    }
    CHECK(b.get("/v1/jobs").body["data"].empty());
    CHECK(b.get("/v1/jobs?metadata.owner=a").body["data"].empty());
    CHECK(b.get("/v1/jobs?status=queued").body["data"].empty());
    auto feed = b.get("/v1/events?after=0");
    if (feed.status == 200) CHECK(feed.raw.find(id) == std::string::npos);

    // nothing changed for the owner
    auto job_after = a.get("/v1/jobs/" + id).body;
    CHECK(job_after == job_before);
    CHECK(own_events() == events_before);
    // and the owner can still act on it (the 404s were not some other failure)
    CHECK(a.post("/v1/jobs/" + id + "/cancel", json::object()).status == 200);

    // keys: a tenant cannot see, revoke or rotate another tenant's key, nor create keys
    std::string key_a_id;
    for (const auto& k : list_keys(admin))
      if (k["tenant"] == "sec-a") key_a_id = k["id"];
    REQUIRE(!key_a_id.empty());
    for (const auto& k : list_keys(b)) CHECK(k["tenant"] == "sec-b");
    CHECK(b.post("/v1/keys/" + key_a_id + "/revoke", json::object()).status == 404);
    CHECK(b.post("/v1/keys/" + key_a_id + "/rotate_secret", json::object()).status == 404);
    CHECK(b.post("/v1/keys", {{"tenant", "sec-a"}, {"admin", true}}).status == 403);
    CHECK(a.get("/v1/models").status == 200);
  }

  {  // SSRF corpus: refused at submission for webhook and tool URLs
    size_t n_jobs_before = a.get("/v1/jobs").body["data"].size();
    std::vector<std::string> corpus = k_ssrf_corpus;
    corpus.push_back("http://127.0.0.1:" + std::to_string(d.port) + "/v1/models");  // ourselves
    if (std::string host = test::loopback_hostname(); !host.empty()) {
      corpus.push_back("http://" + host + ":" + std::to_string(d.port) + "/");  // DNS name -> loopback
      MESSAGE("hostname '" << host << "' resolves to loopback: in the corpus");
    }
    for (const std::string& url : corpus) {
      INFO(url);
      json j = simple_job();
      j["webhook"] = {{"url", url}};
      auto r = a.post("/v1/jobs", j);
      CHECK(r.status == 400);
      CHECK(r.body["error"]["param"] == "webhook.url");
      j = simple_job();
      j["tools"] = {
          {{"type", "function"}, {"function", {{"name", "fetch"}}}, {"execution", {{"type", "http"}, {"url", url}}}}};
      r = a.post("/v1/jobs", j);
      CHECK(r.status == 400);
      CHECK(r.body["error"]["param"] == "tools[0].execution.url");
    }
    CHECK(a.get("/v1/jobs").body["data"].size() == n_jobs_before);  // none of them was accepted
    // a public literal address passes (the guard is not refusing everything)
    json ok = simple_job();
    ok["webhook"] = {{"url", "http://8.8.8.8:9/hook"}};
    CHECK(a.post("/v1/jobs", ok).status == 202);
  }

  {  // secrets never reach the logs
    json j = simple_job();
    j["webhook"] = {{"url", "http://8.8.8.8:9/hook"}, {"secret", job_secret}};
    REQUIRE(a.post("/v1/jobs", j).status == 202);
    api wrong{d, key_a + "0"};
    CHECK(wrong.get("/v1/models").status == 401);
    std::string rotated;
    for (const auto& k : list_keys(admin))
      if (k["tenant"] == "sec-b")
        rotated = admin.post("/v1/keys/" + k["id"].get<std::string>() + "/rotate_secret", json::object())
                      .body["webhook_secret"];
    REQUIRE(rotated.starts_with("whsec_"));
    std::this_thread::sleep_for(300ms);  // let the file sink flush
    std::string logs = d.log() + read_file(d.dir / "data" / "agentqd.log");
    REQUIRE(logs.find("listening") != std::string::npos);  // we are reading the right logs
    for (const std::string& secret : {k_admin_key, key_a, key_b, secret_a, secret_b, job_secret, rotated}) {
      CHECK_MESSAGE(logs.find(secret) == std::string::npos, "secret in the logs: " << secret);
      CHECK(logs.find(secret.substr(secret.find('_') + 1)) == std::string::npos);  // nor its body alone
    }
  }
}

TEST_CASE("security: per-key rate limit gives 429 + Retry-After; another tenant is unaffected") {
  test::require_tiny_model();
  daemon_proc d({"--rate-limit", "1", "--rate-burst", "3", "--role", "api"});
  api admin{d, k_admin_key};
  auto [key_a, secret_a] = make_tenant(admin, "rl-a");
  auto [key_b, secret_b] = make_tenant(admin, "rl-b");
  api a{d, key_a}, b{d, key_b};
  int n_429 = 0;
  for (int i = 0; i < 8; ++i) {
    auto r = a.get("/v1/jobs");
    if (r.status == 429) {
      ++n_429;
      CHECK(r.body["error"]["type"] == "rate_limit_error");
      int retry = std::stoi(r.res.header("retry-after"));
      CHECK(retry >= 1);
      CHECK(retry <= 2);
    } else {
      CHECK(r.status == 200);
    }
  }
  CHECK(n_429 >= 4);
  // tenant b has its own bucket: its burst is served in full while a is throttled
  for (int i = 0; i < 3; ++i) CHECK(b.get("/v1/jobs").status == 200);
  CHECK(a.get("/v1/jobs").status == 429);
  // a throttled submit creates nothing
  CHECK(a.post("/v1/jobs", simple_job()).status == 429);
  std::this_thread::sleep_for(1100ms);
  CHECK(a.get("/v1/jobs").body["data"].empty());
}
