// Dashboard routes (see ui_routes.h).
#include "api/ui_routes.h"

#include "api/event_stream.h"
#include "auth/keys.h"
#include "http/errors.h"
#include "store/store.h"
#include "ui/assets.h"

namespace agentq::api {

namespace {

// NOTE: the page loads only its own files and calls only this origin; no inline script or style
// (the JS sets styles through the CSSOM, which a CSP allows), so XSS in job data cannot run.
constexpr const char* k_csp =
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
    "base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

// true when If-None-Match lists etag (or is "*").
bool etag_matches(const std::string& if_none_match, std::string_view etag) {
  if (if_none_match.empty()) return false;
  if (if_none_match == "*") return true;
  size_t at = 0;
  while (at < if_none_match.size()) {
    size_t comma = if_none_match.find(',', at);
    std::string_view tag(if_none_match.data() + at, (comma == std::string::npos ? if_none_match.size() : comma) - at);
    while (!tag.empty() && tag.front() == ' ') tag.remove_prefix(1);
    while (!tag.empty() && tag.back() == ' ') tag.remove_suffix(1);
    if (tag.starts_with("W/")) tag.remove_prefix(2);  // weak comparison, as for GET (RFC 9110 13.1.2)
    if (tag == etag) return true;
    if (comma == std::string::npos) break;
    at = comma + 1;
  }
  return false;
}

http::response serve_asset(const http::request& req, std::string_view name) {
  const ui::asset* a = ui::find_asset(name);
  if (!a) return http::error_response(http::error_kind::not_found, "no dashboard file '" + std::string(name) + "'");
  http::response res;
  res.headers = {{"ETag", std::string(a->etag)},
                 {"Cache-Control", "no-cache"},
                 {"Content-Security-Policy", k_csp},
                 {"X-Content-Type-Options", "nosniff"},
                 {"Referrer-Policy", "no-referrer"}};
  res.content_type = std::string(a->content_type);
  if (etag_matches(req.header("if-none-match"), a->etag)) {
    res.status = 304;
    return res;
  }
  res.body = std::string(a->body);
  return res;
}

}  // namespace

void install_ui_routes(http::router& r, const api_options& options, const api_deps& deps, const authed_wrap& authed) {
  r.add("GET", "/ui", [](http::request& req) { return serve_asset(req, "index.html"); }, http::runs_on::io);
  r.add("GET", "/ui/{file}", [](http::request& req) { return serve_asset(req, req.path_param("file")); }, http::runs_on::io);

  store::store* st = deps.store;
  auto keepalive = options.sse_keepalive;
  r.add("GET", "/v1/events", authed([st, keepalive](http::request& req, const auth::key_info& key) {
          auto cursor = parse_event_cursor(req);
          if (cursor.error) return *cursor.error;
          std::string tenant = key.tenant;
          if (!wants_sse(req))
            return event_list_response(st->read_tenant_events(tenant, cursor.after.value_or(0), 1001), 1000);
          // NOTE: a stream without a cursor starts at the newest event (live updates only); a
          // tenant's whole history is a replay the client asks for with ?after=0.
          int64_t after = cursor.after ? *cursor.after : st->last_event_id();
          event_feed feed{[st, tenant](int64_t a, int32_t n) { return st->read_tenant_events(tenant, a, n); }, {}};
          return sse_response(st, std::move(feed), after, keepalive);
        }));
}

}  // namespace agentq::api
