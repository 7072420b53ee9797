// The OpenAI-compatible routes (docs/openai.md): POST /v1/chat/completions, the Responses API
// (/v1/responses...) and OpenAI-shaped webhook endpoints (/v1/webhook_endpoints).
#pragma once

#include <nlohmann/json.hpp>

#include "api/api.h"
#include "http/router.h"

namespace agentq::api {

void install_openai_routes(http::router& r, const api_options& options, const api_deps& deps, const authed_wrap& authed);

// POST /v1/webhook_endpoints {url, events}, GET /v1/webhook_endpoints[/{id}], DELETE
// /v1/webhook_endpoints/{id} (openai_webhooks.cpp); deliveries: webhooks/dispatcher.
void install_openai_webhook_routes(http::router& r, const api_deps& deps, const authed_wrap& authed);

// Paths and schemas of these routes in the OpenAPI document (openai_openapi.cpp).
void add_openai_openapi(nlohmann::json& doc);

}  // namespace agentq::api
