// The embedded dashboard: every file the page references is embedded, content types, the
// ETag / If-None-Match / CSP headers of GET /ui, and the event-cursor parsing of the SSE routes.
#include <doctest/doctest.h>

#include <regex>
#include <string>

#include "api/api.h"
#include "api/event_stream.h"
#include "http/router.h"
#include "ui/assets.h"

using namespace agentq;

namespace {
std::string header_of(const http::response& res, const std::string& name) {
  for (const auto& [k, v] : res.headers)
    if (k == name) return v;
  return "";
}

http::response get(const http::router& r, const std::string& path, http::header_list headers = {}) {
  http::request req;
  req.method = "GET";
  req.path = req.target = path;
  req.headers = std::move(headers);
  return r.dispatch(req);
}
}  // namespace

TEST_CASE("every file index.html and the JS modules reference is embedded") {
  REQUIRE(ui::find_asset("index.html"));
  int n_refs = 0;
  for (const ui::asset& a : ui::assets()) {
    CHECK_MESSAGE(!a.content_type.empty(), a.name);
    CHECK(a.etag.size() == 22);
    std::string body(a.body);
    // href="/ui/x", src="/ui/x" in HTML; import ... from './x.js' in modules
    static const std::regex ref(R"re((?:"/ui/([A-Za-z0-9_.-]+)")|(?:from '\./([A-Za-z0-9_.-]+)'))re");
    for (auto it = std::sregex_iterator(body.begin(), body.end(), ref); it != std::sregex_iterator(); ++it) {
      std::string name = (*it)[1].matched ? (*it)[1].str() : (*it)[2].str();
      CHECK_MESSAGE(ui::find_asset(name), a.name << " references missing file " << name);
      ++n_refs;
    }
  }
  CHECK(n_refs >= 10);
  CHECK(ui::find_asset("app.js")->content_type.starts_with("text/javascript"));
  CHECK(ui::find_asset("app.css")->content_type.starts_with("text/css"));
  CHECK(ui::find_asset("index.html")->content_type.starts_with("text/html"));
  CHECK_FALSE(ui::find_asset("nope.js"));
}

TEST_CASE("GET /ui: ETag, 304 on If-None-Match, CSP, 404") {
  http::router r;
  api::api a({}, {});
  a.install(r);
  auto page = get(r, "/ui");
  CHECK(page.status == 200);
  CHECK(page.content_type.starts_with("text/html"));
  CHECK(page.body == std::string(ui::find_asset("index.html")->body));
  std::string etag = header_of(page, "ETag");
  CHECK(etag == ui::find_asset("index.html")->etag);
  CHECK(header_of(page, "Content-Security-Policy").find("script-src 'self'") != std::string::npos);
  CHECK(header_of(page, "Cache-Control") == "no-cache");
  CHECK(header_of(page, "X-Content-Type-Options") == "nosniff");

  CHECK(get(r, "/ui", {{"if-none-match", etag}}).status == 304);
  CHECK(get(r, "/ui", {{"if-none-match", "\"other\", W/" + etag}}).status == 304);
  CHECK(get(r, "/ui", {{"if-none-match", "*"}}).status == 304);
  CHECK(get(r, "/ui", {{"if-none-match", "\"other\""}}).status == 200);
  CHECK(get(r, "/ui/index.html", {{"if-none-match", etag}}).status == 304);
  CHECK(get(r, "/ui/app.js").content_type.starts_with("text/javascript"));
  CHECK(get(r, "/ui/nope.js").status == 404);
  CHECK(get(r, "/ui/%2e%2e").status == 404);
  CHECK(get(r, "/ui/").status == 404);
}

TEST_CASE("event cursor: Last-Event-ID, else ?after=, else none; bad values are 400") {
  http::request req;
  CHECK_FALSE(api::parse_event_cursor(req).after);
  CHECK_FALSE(api::parse_event_cursor(req).error);
  req.query = "after=12";
  CHECK(api::parse_event_cursor(req).after == 12);
  req.headers = {{"last-event-id", "40"}};
  CHECK(api::parse_event_cursor(req).after == 40);
  req.headers = {{"last-event-id", "-1"}};
  auto bad = api::parse_event_cursor(req);
  REQUIRE(bad.error);
  CHECK(bad.error->status == 400);
  req.headers.clear();
  req.query = "after=99999999999999999999";
  CHECK(api::parse_event_cursor(req).error);
  req.headers = {{"accept", "text/event-stream"}};
  CHECK(api::wants_sse(req));
}
