// Dashboard routes: the web UI at /ui (files embedded at build time, service/ui/) and the
// tenant-wide event stream GET /v1/events that feeds its live updates.
#pragma once

#include "api/api.h"
#include "http/router.h"

namespace agentq::api {

// GET /ui, GET /ui/{file}: the embedded files, with ETag (304 on If-None-Match), a CSP and
// no-cache (revalidate each load, so a new binary's files show at once).
// GET /v1/events: the key's tenant's job events (JSON list, or SSE with Last-Event-ID / ?after=).
void install_ui_routes(http::router& r, const api_options& options, const api_deps& deps, const authed_wrap& authed);

}  // namespace agentq::api
