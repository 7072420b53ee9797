// GET /v1/workers (admin, #28): the fleet as workers advertise it in Redis: id, host, models,
// device, KV usage, running jobs, free capacity, version, last heartbeat.
#pragma once

#include "api/api.h"
#include "api/deletion_routes.h"

namespace agentq::api {

void install_worker_routes(http::router& r, api_deps& deps, const authed_wrap& authed, const admin_check& admin_only);

}  // namespace agentq::api
