// libFuzzer target: raw bytes through the HTTP server's request path — the same parser
// limits, head checks (smuggling shapes, obs-fold) and conversion that service/http/server.cpp
// runs per connection (http/request_parse.h) — then routing and query/percent decoding.
// Invariants: no crash or sanitizer report; a rejection maps to a 4xx/5xx with a JSON error
// body; an accepted request's body is within the limit and has no smuggling headers.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string_view>

#include "http/errors.h"
#include "http/request_parse.h"
#include "http/router.h"

using namespace agentq;

namespace {

const http::server_options& options() {
  static const http::server_options o = [] {
    http::server_options x;
    x.max_body_bytes = 2048;  // small limits so the fuzzer reaches them within -max_len
    x.max_header_bytes = 1024;
    return x;
  }();
  return o;
}

const http::router& routes() {
  static const http::router r = [] {
    http::router x;
    auto ok = [](http::request& req) {
      http::response res;
      res.body = req.path_param("id");
      return res;
    };
    for (const char* p : {"/v1/jobs", "/v1/jobs/{id}", "/v1/jobs/{id}/cancel", "/v1/jobs/{id}/tool_outputs",
                          "/v1/jobs/{id}/events", "/v1/jobs/{id}/webhooks", "/v1/keys/{id}/revoke"})
      x.add("GET", p, ok), x.add("POST", p, ok);
    return x;
  }();
  return r;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view bytes(reinterpret_cast<const char*>(data), size);
  http::parse_outcome out = http::parse_request(bytes, options());
  if (out.why) {
    int status = http::status_of(out.why->kind);
    if (status < 400 || out.why->message.empty()) std::abort();
    auto body = nlohmann::json::parse(http::error_body(out.why->kind, out.why->message), nullptr, false);
    if (body.is_discarded()) std::abort();
    return 0;
  }
  if (!out.req) return 0;  // the bytes end before the request does
  http::request& req = *out.req;
  if (req.body.size() > options().max_body_bytes) std::abort();
  int n_cl = 0;
  for (const auto& [k, v] : req.headers) {
    if (k == "content-length") ++n_cl;
    if (k == "content-length" && !req.header("transfer-encoding").empty()) std::abort();
  }
  if (n_cl > 1) std::abort();
  (void)req.query_params();
  (void)req.query_param("limit");
  (void)http::percent_decode(req.path);
  http::response res = routes().dispatch(req);
  if (res.status < 200 || res.status > 599) std::abort();
  return 0;
}
