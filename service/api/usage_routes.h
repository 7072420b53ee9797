// GET /v1/usage (issue 29): a tenant's token usage and job counts per day, optionally grouped by
// API key and / or model, in the shape of OpenAI's usage API (page -> buckets -> results).
#pragma once

#include "api/api.h"
#include "http/router.h"

namespace agentq::api {

void install_usage_routes(http::router& r, const api_deps& deps, const authed_wrap& authed);

}  // namespace agentq::api
