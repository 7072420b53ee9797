// Observability routes: GET /metrics (Prometheus text), GET /v1/engine/stats (per-worker
// engine time series), GET /v1/jobs/{id}/timeline (spans and marks of one job).
#pragma once

#include <functional>
#include <vector>

#include "api/api.h"
#include "http/router.h"
#include "metrics/registry.h"

namespace agentq::api {

// authed: api::install's wrapper (api.h): bearer auth + rate limit around a handler.
void install_observability_routes(http::router& r, const api_options& options, const api_deps& deps,
                                  const authed_wrap& authed);

// What /metrics serves besides the process registry: jobs by state, queue depth and age per
// priority (SQLite), and the share of each worker seen in the last 5 minutes (label worker).
std::vector<metrics::family> observability_families(const api_deps& deps, int64_t now_ms);

}  // namespace agentq::api
