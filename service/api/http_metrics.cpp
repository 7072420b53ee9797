// HTTP request metrics (see http_metrics.h).
#include "api/http_metrics.h"

#include <spdlog/spdlog.h>

#include <chrono>

namespace agentq::api {

std::string route_of(const http::router& r, const std::string& path) {
  for (const auto& rt : r.routes())
    if (http::router::match(rt.pattern, path, nullptr)) return rt.pattern;
  return "unmatched";
}

namespace {
metrics::family_of<metrics::counter>& requests_family(metrics::registry& reg) {
  return reg.counter_family("agentq_http_requests_total", "HTTP requests by method, route pattern and status.",
                            {"method", "route", "status"});
}

// NOTE: unknown methods fold into one label value so a scanner cannot grow the series set.
std::string method_label(const std::string& m) {
  static const char* k_methods[] = {"GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"};
  for (const char* k : k_methods)
    if (m == k) return k;
  return "other";
}
}  // namespace

std::function<void(const std::string&, int)> rejection_counter(metrics::registry& reg) {
  auto& requests = requests_family(reg);
  return [&requests](const std::string& method, int status) {
    requests.with({method_label(method), "rejected", std::to_string(status)}).inc();
  };
}

std::function<http::response(http::request&)> instrumented(const http::router& r, metrics::registry& reg) {
  auto& requests = requests_family(reg);
  auto& latency = reg.histogram_family("agentq_http_request_duration_seconds",
                                       "HTTP request handling time by method and route pattern.", {"method", "route"});
  return [&r, &requests, &latency](http::request& req) {
    auto t0 = std::chrono::steady_clock::now();
    http::response res = r.dispatch(req);
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::string method = method_label(req.method);
    std::string route = route_of(r, req.path);
    requests.with({method, route, std::to_string(res.status)}).inc();
    latency.with({method, route}).observe(s);
    // NOTE: the path, never the query or headers (keys travel in headers; paths hold no secrets).
    spdlog::debug("http: {} {} -> {} ({:.1f} ms)", method, req.path.substr(0, 200), res.status, s * 1000);
    return res;
  };
}

}  // namespace agentq::api
