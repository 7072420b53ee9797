// The Batch API's routes (docs/openai.md "Batch"): POST/GET/DELETE /v1/files[/{id}[/content]] and
// POST/GET /v1/batches[/{id}[/cancel]], tenant-scoped, on batch_store + batch_runner.
#pragma once

#include <nlohmann/json.hpp>

#include "api/api.h"
#include "http/router.h"

namespace agentq::api {

void install_batch_routes(http::router& r, const api_options& options, const api_deps& deps, const authed_wrap& authed);

// Paths of these routes in the OpenAPI document.
void add_batch_openapi(nlohmann::json& doc);

}  // namespace agentq::api
