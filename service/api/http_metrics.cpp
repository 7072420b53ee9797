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
  // NOTE: the path, never the query or headers (keys travel in headers; paths hold no secrets).
  auto record = [&requests, &latency](const std::string& method, const std::string& route, const std::string& path,
                                      int status, std::chrono::steady_clock::time_point t0) {
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    requests.with({method, route, std::to_string(status)}).inc();
    latency.with({method, route}).observe(s);
    spdlog::debug("http: {} {} -> {} ({:.1f} ms)", method, path, status, s * 1000);
  };
  return [&r, record](http::request& req) {
    auto t0 = std::chrono::steady_clock::now();
    // NOTE: read before the dispatch: a handler run on the blocking pool takes the request along.
    std::string method = method_label(req.method);
    std::string route = route_of(r, req.path);
    // NOTE: the path is only for the debug log line: not copied when that level is off.
    std::string path = spdlog::should_log(spdlog::level::debug) ? req.path.substr(0, 200) : std::string();
    http::response res = r.dispatch(req);
    if (!res.deferred) {
      record(method, route, path, res.status, t0);
      return res;
    }
    // A deferred answer counts when it is made (its status is known only then).
    res.deferred = [start = std::move(res.deferred), record, method, route, path, t0](http::reply_fn reply) {
      start([reply = std::move(reply), record, method, route, path, t0](std::function<http::response()> make) {
        reply([make = std::move(make), record, method, route, path, t0] {
          http::response made = make();
          record(method, route, path, made.status, t0);
          return made;
        });
      });
    };
    return res;
  };
}

void register_pool_metrics(std::shared_ptr<const http::blocking_pool_load> load, metrics::registry& reg) {
  reg.add_collector([load = std::move(load)](std::vector<metrics::family>& out) {
    auto add = [&out](const char* name, const char* help, double v) {
      out.push_back(metrics::value_family(name, help, metrics::metric_type::gauge, v));
    };
    add("agentq_http_pool_threads", "Threads for the HTTP handlers that may block (--http-blocking-threads).",
        double(load->n_threads));
    add("agentq_http_pool_busy_threads", "Of those, running a handler now.",
        double(load->n_busy.load(std::memory_order_relaxed)));
    add("agentq_http_pool_queued_requests", "Requests waiting for one of those threads now.",
        double(load->n_queued.load(std::memory_order_relaxed)));
  });
}

}  // namespace agentq::api
