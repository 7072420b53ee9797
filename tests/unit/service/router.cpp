// Router matching, 404/405, and the OpenAPI document listing exactly the served routes.
// Also: finding a request's route allocates nothing (counts every operator new in this binary).
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>
#include <set>

#include "api/api.h"
#include "http/router.h"

#include "count_new.h"

using namespace agentq;

TEST_CASE("pattern matching") {
  std::vector<std::pair<std::string, std::string>> p;
  CHECK(http::router::match("/v1/jobs/{id}/cancel", "/v1/jobs/job_1/cancel", &p));
  REQUIRE(p.size() == 1);
  CHECK(p[0].first == "id");
  CHECK(p[0].second == "job_1");
  CHECK_FALSE(http::router::match("/v1/jobs/{id}", "/v1/jobs/", nullptr));
  CHECK_FALSE(http::router::match("/v1/jobs/{id}", "/v1/jobs/a/b", nullptr));
  CHECK_FALSE(http::router::match("/v1/jobs", "/v1/jobs/", nullptr));
  CHECK_FALSE(http::router::match("/v1/jobs", "//v1/jobs", nullptr));
  CHECK(http::router::match("/healthz", "/healthz", nullptr));
  CHECK(http::router::match("/v1/jobs/{id}", "/v1/jobs/a%20b", &p));
  CHECK(p[0].second == "a b");
  CHECK(http::router::match("/", "/", &p));
  CHECK(p.empty());
  CHECK_FALSE(http::router::match("/", "/v1", nullptr));
  CHECK_FALSE(http::router::match("/v1/{id}", "/", nullptr));
  CHECK_FALSE(http::router::match("/v1/jobs", "v1/jobs", nullptr));
  CHECK_FALSE(http::router::match("/v1/jobs/{id}", "/v1/jobs", nullptr));
  CHECK_FALSE(http::router::match("/v1/jobs/{id}/cancel", "/v1/jobs/a/cancelx", nullptr));
  CHECK(http::router::match("/v1/files/{id}/parts/{n}", "/v1/files/f%2F1/parts/7", &p));
  REQUIRE(p.size() == 2);
  CHECK(p[0] == std::pair<std::string, std::string>{"id", "f/1"});
  CHECK(p[1] == std::pair<std::string, std::string>{"n", "7"});
  CHECK_FALSE(http::router::match("/v1/files/{id}/parts/{n}", "/v1/files/f1/parts", &p));
  CHECK(p.size() == 2);  // a failed match leaves params as they were
}

TEST_CASE("finding the route allocates nothing; the captures only for the route that runs") {
  http::router r;
  api::api a({}, {});
  a.install(r);
  long n_matched = 0;
  const std::string paths[] = {"/v1/jobs", "/v1/jobs/job_0190a1b2c3d4e5f60718293a",
                               "/v1/jobs/job_0190a1b2c3d4e5f60718293a/events", "/nope/x/y", "/"};
  const long before = test::n_new();
  for (const auto& path : paths)
    for (const auto& rt : r.routes()) n_matched += http::router::match(rt.pattern, path, nullptr);
  CHECK(test::n_new() - before == 0);
  CHECK(n_matched >= 4);
  // dispatch: a route whose method differs (DELETE /v1/jobs/{id} beside GET) decodes nothing
  http::router small;
  std::string seen;
  small.add("DELETE", "/v1/things/{id}", [](http::request&) { return http::response{}; });
  small.add("GET", "/v1/things/{id}", [&seen](http::request& req) {
    seen = req.path_param("id");
    return http::response{};
  });
  http::request req;
  req.method = "GET";
  req.path = "/v1/things/a%2Fb";
  small.dispatch(req);
  CHECK(seen == "a/b");
  CHECK(req.path_params.size() == 1);
}

TEST_CASE("dispatch, 404 and 405") {
  http::router r;
  r.add("GET", "/v1/things/{id}", [](http::request& req) {
    http::response res;
    res.body = req.path_param("id");
    return res;
  });
  r.add("DELETE", "/v1/things/{id}", [](http::request&) { return http::response{}; });
  http::request req;
  req.method = "GET";
  req.path = "/v1/things/x1";
  CHECK(r.dispatch(req).body == "x1");
  req.method = "POST";
  auto res = r.dispatch(req);
  CHECK(res.status == 405);
  CHECK(res.headers.at(0).second == "GET, DELETE");
  auto body = nlohmann::json::parse(res.body);
  CHECK(body["error"]["type"] == "method_not_allowed");
  req.path = "/nope";
  res = r.dispatch(req);
  CHECK(res.status == 404);
  CHECK(nlohmann::json::parse(res.body)["error"]["type"] == "not_found_error");
}

TEST_CASE("error table") {
  auto b = nlohmann::json::parse(http::error_body(http::error_kind::invalid_request, "bad", "messages[0].role"));
  CHECK(b["error"]["type"] == "invalid_request_error");
  CHECK(b["error"]["message"] == "bad");
  CHECK(b["error"]["param"] == "messages[0].role");
  CHECK(nlohmann::json::parse(http::error_body(http::error_kind::internal, "x"))["error"]["param"].is_null());
  CHECK(http::status_of(http::error_kind::payload_too_large) == 413);
  CHECK(http::status_of(http::error_kind::header_too_large) == 431);
  CHECK(http::status_of(http::error_kind::rate_limited) == 429);
  CHECK(http::status_of(http::error_kind::authentication) == 401);
}

TEST_CASE("every served route is in openapi.json and vice versa") {
  http::router r;
  api::api a({}, {});
  a.install(r);
  std::set<std::string> served, documented;
  for (const auto& rt : r.routes()) {
    std::string m = rt.method;
    for (char& c : m) c = char(std::tolower(static_cast<unsigned char>(c)));
    served.insert(m + " " + rt.pattern);
  }
  auto doc = nlohmann::json::parse(api::openapi_json());
  CHECK(doc["openapi"].get<std::string>().starts_with("3."));
  for (auto p = doc["paths"].begin(); p != doc["paths"].end(); ++p)
    for (auto m = p->begin(); m != p->end(); ++m) documented.insert(m.key() + " " + p.key());
  for (const auto& s : served) CHECK_MESSAGE(documented.count(s), "undocumented route: " << s);
  for (const auto& d : documented) CHECK_MESSAGE(served.count(d), "documented but not served: " << d);
  CHECK(served.size() >= 15);
}
