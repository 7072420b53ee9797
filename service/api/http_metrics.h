// HTTP request metrics around the router: agentq_http_requests_total{method,route,status} and
// agentq_http_request_duration_seconds{method,route}, where route is the matched pattern
// ("/v1/jobs/{id}"), never the raw path (bounded label values); the blocking pool's load.
#pragma once

#include <functional>
#include <memory>

#include "http/blocking_pool.h"
#include "http/message.h"
#include "http/router.h"
#include "metrics/registry.h"

namespace agentq::api {

// A server handler that dispatches through r and records each request in reg. Streaming
// responses (SSE) count when their head is ready.
std::function<http::response(http::request&)> instrumented(const http::router& r,
                                                           metrics::registry& reg = metrics::global());

// A server_options::on_rejected that counts the responses the server writes before routing
// (413, 431, 400, 408, 503) in agentq_http_requests_total with route="rejected".
std::function<void(const std::string& method, int status)> rejection_counter(metrics::registry& reg = metrics::global());

// agentq_http_pool_threads, agentq_http_pool_busy_threads and agentq_http_pool_queued_requests: the
// blocking pool's size and load (http/blocking_pool.h), read at each scrape.
void register_pool_metrics(std::shared_ptr<const http::blocking_pool_load> load,
                           metrics::registry& reg = metrics::global());

// The route pattern that matches method + path ("unmatched" when none does).
std::string route_of(const http::router& r, const std::string& path);

}  // namespace agentq::api
