// The OpenAI-compatible routes in the OpenAPI document (see openapi.cpp, docs/openai.md).
#include "api/openai_routes.h"

namespace agentq::api {

using json = nlohmann::json;

namespace {
json err_ref() { return {{"$ref", "#/components/schemas/Error"}}; }
json schema_ref(const char* n) { return {{"$ref", std::string("#/components/schemas/") + n}}; }

json op(const char* summary, int ok, json ok_schema, std::initializer_list<int> errors, bool sse = false) {
  json responses = json::object();
  for (int c : errors)
    responses[std::to_string(c)] = {{"description", "error"}, {"content", {{"application/json", {{"schema", err_ref()}}}}}};
  json content = {{"application/json", {{"schema", ok_schema}}}};
  if (sse) content["text/event-stream"] = {{"schema", {{"type", "string"}, {"description", "server-sent events"}}}};
  responses[std::to_string(ok)] = {{"description", "success"}, {"content", content}};
  return {{"summary", summary}, {"responses", responses}};
}
json body(json schema) { return {{"required", true}, {"content", {{"application/json", {{"schema", schema}}}}}}; }
json query(const char* name, json schema, const char* description) {
  return {{"name", name}, {"in", "query"}, {"required", false}, {"schema", schema}, {"description", description}};
}
}  // namespace

void add_openai_openapi(json& doc) {
  auto& s = doc["components"]["schemas"];
  json str = {{"type", "string"}}, integer = {{"type", "integer"}}, obj = {{"type", "object"}};
  s["ChatCompletionRequest"] = {
      {"type", "object"},
      {"description", "OpenAI Chat Completions request; fields agentq cannot honour are a 400 naming them (docs/openai.md)"},
      {"required", {"model", "messages"}},
      {"properties", {{"model", str}, {"messages", {{"type", "array"}, {"items", obj}}}, {"tools", {{"type", "array"}, {"items", obj}}},
                      {"tool_choice", json::object()}, {"response_format", obj}, {"max_tokens", integer},
                      {"max_completion_tokens", integer}, {"stop", json::object()}, {"seed", integer}, {"n", integer},
                      {"stream", {{"type", "boolean"}}}, {"stream_options", obj}, {"temperature", {{"type", "number"}}},
                      {"top_p", {{"type", "number"}}}}}};
  s["ChatCompletion"] = {{"type", "object"},
                         {"properties", {{"id", str}, {"object", str}, {"created", integer}, {"model", str},
                                         {"choices", {{"type", "array"}, {"items", obj}}}, {"usage", obj}}}};
  s["ResponseRequest"] = {
      {"type", "object"},
      {"description", "OpenAI Responses request; fields agentq cannot honour are a 400 naming them (docs/openai.md)"},
      {"required", {"model", "input"}},
      {"properties", {{"model", str}, {"input", json::object()}, {"instructions", str}, {"tools", {{"type", "array"}, {"items", obj}}},
                      {"tool_choice", json::object()}, {"parallel_tool_calls", {{"type", "boolean"}}},
                      {"max_output_tokens", integer}, {"max_tool_calls", integer}, {"temperature", {{"type", "number"}}},
                      {"top_p", {{"type", "number"}}}, {"text", obj}, {"metadata", obj}, {"store", {{"type", "boolean"}}},
                      {"previous_response_id", str}, {"background", {{"type", "boolean"}}}, {"stream", {{"type", "boolean"}}},
                      {"truncation", {{"type", "string"}, {"enum", {"disabled", "auto"}}}}, {"user", str}}}};
  s["Response"] = {
      {"type", "object"},
      {"properties", {{"id", str}, {"object", str}, {"created_at", integer},
                      {"status", {{"type", "string"}, {"enum", {"queued", "in_progress", "completed", "failed", "cancelled", "incomplete"}}}},
                      {"output", {{"type", "array"}, {"items", obj}}}, {"output_text", str}, {"usage", obj},
                      {"error", obj}, {"incomplete_details", obj}, {"previous_response_id", str}, {"metadata", obj}}}};
  s["WebhookEndpoint"] = {{"type", "object"},
                          {"properties", {{"id", str}, {"object", str}, {"url", str},
                                          {"events", {{"type", "array"}, {"items", str}}}, {"created_at", integer}}}};
  json list = schema_ref("List");

  auto& p = doc["paths"];
  json chat = op("OpenAI Chat Completions (sync, or SSE chunks with stream: true); highest priority class", 200,
                 schema_ref("ChatCompletion"), {400, 401, 409, 429, 503}, true);
  chat["requestBody"] = body(schema_ref("ChatCompletionRequest"));
  p["/v1/chat/completions"]["post"] = chat;
  json create = op("OpenAI Responses: create (background: true returns at once; stream: true answers SSE)", 200,
                   schema_ref("Response"), {400, 401, 404, 409, 429, 503}, true);
  create["requestBody"] = body(schema_ref("ResponseRequest"));
  p["/v1/responses"]["post"] = create;
  json get = op("A response; ?stream=true&starting_after=N replays its event stream from the durable log", 200,
                schema_ref("Response"), {400, 401, 404, 429}, true);
  get["parameters"] = json::array({query("stream", {{"type", "boolean"}}, "answer the event stream (SSE)"),
                                   query("starting_after", integer, "resume after this sequence_number")});
  p["/v1/responses/{id}"]["get"] = get;
  p["/v1/responses/{id}"]["delete"] = op("Delete a response (cancelled first if still running)", 200, obj, {401, 404, 429});
  p["/v1/responses/{id}/cancel"]["post"] = op("Cancel a background response", 200, schema_ref("Response"), {400, 401, 404, 409, 429});
  json items = op("The input items of a response, paginated", 200, list, {400, 401, 404, 429});
  items["parameters"] = json::array({query("limit", integer, "1-100, default 20"),
                                     query("order", {{"type", "string"}, {"enum", {"asc", "desc"}}}, "default desc"),
                                     query("after", str, "an item id: the page after it"),
                                     query("before", str, "an item id: the page before it")});
  p["/v1/responses/{id}/input_items"]["get"] = items;
  json add = op("Register an OpenAI-shaped webhook endpoint (response.completed/failed/cancelled/incomplete)", 201,
                schema_ref("WebhookEndpoint"), {400, 401, 429});
  add["requestBody"] = body({{"type", "object"}, {"required", {"url"}},
                             {"properties", {{"url", str}, {"events", {{"type", "array"}, {"items", str}}}}}});
  p["/v1/webhook_endpoints"]["post"] = add;
  p["/v1/webhook_endpoints"]["get"] = op("The tenant's webhook endpoints", 200, list, {401, 429});
  p["/v1/webhook_endpoints/{id}"]["get"] = op("A webhook endpoint", 200, schema_ref("WebhookEndpoint"), {401, 404, 429});
  p["/v1/webhook_endpoints/{id}"]["delete"] = op("Remove a webhook endpoint", 200, obj, {401, 404, 429});
}

}  // namespace agentq::api
