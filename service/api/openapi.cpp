// The OpenAPI 3 document served at /openapi.json. A unit test checks that its paths
// and methods are exactly the router's routes.
#include "api/api.h"
#include "api/batch_routes.h"
#include "api/openai_routes.h"

#include <nlohmann/json.hpp>

namespace agentq::api {

namespace {
using json = nlohmann::json;

json ref(const char* name) { return {{"$ref", std::string("#/components/schemas/") + name}}; }

json error_responses(std::initializer_list<int> codes) {
  json r = json::object();
  for (int c : codes)
    r[std::to_string(c)] = {{"description", "error"},
                            {"content", {{"application/json", {{"schema", ref("Error")}}}}}};
  return r;
}

json op(const char* summary, int ok_code, json ok_schema, std::initializer_list<int> errors, bool auth = true) {
  json o = {{"summary", summary}};
  json responses = error_responses(errors);
  responses[std::to_string(ok_code)] = {{"description", "success"},
                                        {"content", {{"application/json", {{"schema", ok_schema}}}}}};
  o["responses"] = responses;
  if (!auth) o["security"] = json::array();
  return o;
}

json id_param() {
  return {{"name", "id"}, {"in", "path"}, {"required", true}, {"schema", {{"type", "string"}}}};
}

json body(json schema) { return {{"required", true}, {"content", {{"application/json", {{"schema", schema}}}}}}; }

json object_of(json properties) { return {{"type", "object"}, {"properties", std::move(properties)}}; }
json array_of(json items) { return {{"type", "array"}, {"items", std::move(items)}}; }

// One span or mark of a job timeline: its kind (the values in `kinds`), its times, label and attrs.
json timeline_item(const char* kinds, json times) {
  json props = {{"kind", {{"type", "string"}, {"description", kinds}}},
                {"label", {{"type", "string"}}},
                {"attrs", {{"type", "object"}}}};
  props.update(times);
  return object_of(std::move(props));
}

json build() {
  json doc;
  doc["openapi"] = "3.0.3";
  doc["info"] = {{"title", "agentq"},
                 {"version", "0.1.0"},
                 {"description", "Background runner for long-running LLM agents. Errors: {\"error\":{\"type\",\"message\",\"param\"}}."}};
  doc["components"]["securitySchemes"]["bearer"] = {{"type", "http"}, {"scheme", "bearer"}};
  doc["security"] = json::array({{{"bearer", json::array()}}});
  auto& s = doc["components"]["schemas"];
  s["Error"] = {{"type", "object"},
                {"required", {"error"}},
                {"properties",
                 {{"error",
                   {{"type", "object"},
                    {"properties",
                     {{"type", {{"type", "string"}}},
                      {"message", {{"type", "string"}}},
                      {"param", {{"type", "string"}, {"nullable", true}}}}}}}}}};
  s["Usage"] = {{"type", "object"},
                {"properties",
                 {{"prompt_tokens", {{"type", "integer"}}},
                  {"cached_tokens", {{"type", "integer"}}},
                  {"completion_tokens", {{"type", "integer"}}},
                  {"total_tokens", {{"type", "integer"}}},
                  {"completion_tokens_details",
                   {{"type", "object"},
                    {"description", "speculative decoding: proposed tokens the model accepted / rejected"},
                    {"properties",
                     {{"accepted_prediction_tokens", {{"type", "integer"}}},
                      {"rejected_prediction_tokens", {{"type", "integer"}}}}}}}}}};
  s["Message"] = {{"type", "object"},
                  {"required", {"role"}},
                  {"properties",
                   {{"role", {{"type", "string"}, {"enum", {"system", "user", "assistant", "tool"}}}},
                    {"content", {{"type", "string"}, {"nullable", true}}},
                    {"tool_calls", {{"type", "array"}, {"items", {{"type", "object"}}}}},
                    {"tool_call_id", {{"type", "string"}}}}}};
  s["Tool"] = {{"type", "object"},
               {"required", {"type", "function"}},
               {"properties",
                {{"type", {{"type", "string"}, {"enum", {"function"}}}},
                 {"function",
                  {{"type", "object"},
                   {"properties",
                    {{"name", {{"type", "string"}}},
                     {"description", {{"type", "string"}}},
                     {"parameters", {{"type", "object"}}}}}}},
                 {"execution",
                  {{"type", "object"},
                   {"description", "present: the server calls url (POST, signed); absent: the job waits in requires_action"},
                   {"properties",
                    {{"type", {{"type", "string"}, {"enum", {"http"}}}},
                     {"url", {{"type", "string"}}},
                     {"timeout_ms", {{"type", "integer"}}}}}}}}}};
  s["JobRequest"] = {
      {"type", "object"},
      {"required", {"model", "messages"}},
      {"additionalProperties", false},
      {"properties",
       {{"model", {{"type", "string"}}},
        {"messages", {{"type", "array"}, {"items", ref("Message")}}},
        {"tools", {{"type", "array"}, {"items", ref("Tool")}}},
        {"tool_choice", {{"oneOf", {{{"type", "string"}, {"enum", {"auto", "none", "required"}}}, {{"type", "object"}}}}}},
        {"parallel_tool_calls", {{"type", "boolean"}}},
        {"json_whitespace",
         {{"type", "string"}, {"enum", {"spaced", "free"}},
          {"description", "whitespace in constrained JSON (tool-call arguments, response_format): spaced (default, "
                          "compact with one space after ':' and ','), free (any, up to 16 bytes a gap)"}}},
        {"response_format", {{"type", "object"}}},
        {"temperature", {{"type", "number"}}},
        {"top_p", {{"type", "number"}}},
        {"top_k", {{"type", "integer"}}},
        {"min_p", {{"type", "number"}}},
        {"seed", {{"type", "integer"}}},
        {"frequency_penalty", {{"type", "number"}}},
        {"presence_penalty", {{"type", "number"}}},
        {"repeat_penalty", {{"type", "number"}}},
        {"stop", {{"type", "array"}, {"items", {{"type", "string"}}}}},
        {"max_turns", {{"type", "integer"}}},
        {"max_output_tokens", {{"type", "integer"}}},
        {"max_tokens_per_turn", {{"type", "integer"}}},
        {"deadline_seconds", {{"type", "number"}}},
        {"priority", {{"type", "string"}, {"enum", {"high", "normal", "low"}}}},
        {"stream_tokens", {{"type", "boolean"}}},
        {"tool_choice_every_turn", {{"type", "boolean"}}},
        {"prediction",
         {{"type", "object"},
          {"description", "Predicted Outputs: {\"type\": \"content\", \"content\": text or [{\"type\": \"text\", "
                          "\"text\"}]}, lookup text for speculative decoding; the output is unchanged"}}},
        {"store",
         {{"type", "boolean"},
          {"description", "false: the job's content is deleted (the job becomes a 404 tombstone) once it is "
                          "terminal and its result webhook, if any, was delivered or given up; default true"}}},
        {"webhook",
         {{"type", "object"},
          {"properties",
           {{"url", {{"type", "string"}}},
            {"events", {{"type", "array"}, {"items", {{"type", "string"}}}}},
            {"secret", {{"type", "string"}}}}}}},
        {"metadata", {{"type", "object"}, {"additionalProperties", {{"type", "string"}}}}}}}};
  s["Job"] = {{"type", "object"},
              {"properties",
               {{"id", {{"type", "string"}}},
                {"object", {{"type", "string"}}},
                {"status",
                 {{"type", "string"},
                  {"enum", {"queued", "running", "requires_action", "completed", "failed", "cancelled", "incomplete"}}}},
                {"model", {{"type", "string"}}},
                {"usage", ref("Usage")},
                {"turns", {{"type", "array"}, {"items", {{"type", "object"}}}}},
                {"transcript", {{"type", "array"}, {"items", ref("Message")}}},
                {"required_action", {{"type", "object"}, {"nullable", true}}},
                {"output", {{"type", "object"}, {"nullable", true}}},
                {"error", {{"type", "object"}, {"nullable", true}}},
                {"timings", {{"type", "object"}}}}}};
  s["List"] = {{"type", "object"},
               {"properties",
                {{"object", {{"type", "string"}}},
                 {"data", {{"type", "array"}, {"items", {{"type", "object"}}}}},
                 {"has_more", {{"type", "boolean"}}},
                 {"next_cursor", {{"type", "string"}, {"nullable", true}}}}}};
  s["Key"] = {{"type", "object"},
              {"properties",
               {{"id", {{"type", "string"}}},
                {"tenant", {{"type", "string"}}},
                {"key", {{"type", "string"}, {"description", "only in the create response"}}},
                {"retention_days",
                 {{"type", "integer"}, {"nullable", true},
                  {"description", "finished jobs of this key are deleted this many days after they finish; null: "
                                  "the server's --retention-days"}}},
                {"webhook_secret", {{"type", "string"}, {"description", "only on create and rotate"}}}}}};

  auto& p = doc["paths"];
  p["/healthz"]["get"] = op("Liveness", 200, {{"type", "object"}}, {}, false);
  p["/readyz"]["get"] = op("Readiness: Redis reachable, database ok, engine loaded", 200, {{"type", "object"}}, {503}, false);
  p["/openapi.json"]["get"] = op("This document", 200, {{"type", "object"}}, {}, false);
  p["/v1/models"]["get"] = op("Models the API knows: its own (source local) and, for --model-ttl-h after a live worker "
                              "last advertised them, the fleet's (source fleet, last_seen_ms); served, workers, devices (live workers "
                              "serving it per device: a mixed CPU/CUDA fleet)", 200,
                              ref("List"), {401, 429});
  p["/v1/workers"]["get"] =
      op("Live workers (admin): id, host, incarnation, version, protocol, device, models (name, arch, context_length, "
         "chat_family), share (how its process shares the device between its models: rule, threads_each, "
         "kv_budget_mb_each), kv (blocks used/free), max_jobs, running_jobs, free_slots, last_heartbeat_ms",
         200, ref("List"), {401, 403, 429});
  json submit = op("Submit an agent job (202; an Idempotency-Key replay answers 200 with the same job)", 202,
                   ref("Job"), {400, 401, 409, 413, 422, 429, 503});
  submit["responses"]["200"] = {{"description", "idempotent replay"},
                                {"content", {{"application/json", {{"schema", ref("Job")}}}}}};
  submit["requestBody"] = body(ref("JobRequest"));
  submit["parameters"] = json::array(
      {{{"name", "Idempotency-Key"}, {"in", "header"}, {"required", false}, {"schema", {{"type", "string"}}}}});
  p["/v1/jobs"]["post"] = submit;
  json list = op("List jobs, newest first", 200, ref("List"), {400, 401, 429});
  list["parameters"] = json::array(
      {{{"name", "status"}, {"in", "query"}, {"schema", {{"type", "string"}}}},
       {{"name", "limit"}, {"in", "query"}, {"schema", {{"type", "integer"}, {"minimum", 1}, {"maximum", 100}}}},
       {{"name", "after"}, {"in", "query"}, {"description", "cursor: next_cursor of the previous page"},
        {"schema", {{"type", "string"}}}},
       {{"name", "metadata.KEY"}, {"in", "query"}, {"description", "filter on a metadata key=value"},
        {"schema", {{"type", "string"}}}}});
  p["/v1/jobs"]["get"] = list;
  p["/v1/jobs/{id}"]["get"] = op("A job with transcript, per-turn usage and timings", 200, ref("Job"), {401, 404, 429});
  p["/v1/jobs/{id}/cancel"]["post"] = op("Cancel a job", 200, ref("Job"), {401, 404, 409, 429});
  json deleted = object_of({{"id", {{"type", "string"}}}, {"object", {{"type", "string"}, {"enum", {"job.deleted"}}}},
                            {"deleted", {{"type", "boolean"}}}});
  p["/v1/jobs/{id}"]["delete"] =
      op("Delete a job's content now (a running job is cancelled first); it stays a tombstone (id, tenant, final "
         "status, timestamps) and every route answers 404 for it",
         200, deleted, {401, 404, 409, 429, 503});
  json tenant_deleted = op("Delete every job of a tenant (admin); live jobs are cancelled first", 200,
                           object_of({{"object", {{"type", "string"}, {"enum", {"tenant.deleted"}}}},
                                      {"tenant", {{"type", "string"}}},
                                      {"n_jobs_deleted", {{"type", "integer"}}},
                                      {"n_jobs_cancelled", {{"type", "integer"}}}}),
                           {401, 403, 429, 503});
  tenant_deleted["parameters"] = json::array(
      {{{"name", "tenant"}, {"in", "path"}, {"required", true}, {"schema", {{"type", "string"}}}}});
  p["/v1/tenants/{tenant}"]["delete"] = tenant_deleted;
  json tool_outputs = op("Answer the pending client-side tool calls", 200, ref("Job"), {400, 401, 404, 409, 429});
  tool_outputs["requestBody"] = body(
      {{"type", "object"},
       {"required", {"tool_outputs"}},
       {"properties",
        {{"tool_outputs",
          {{"type", "array"},
           {"items",
            {{"type", "object"},
             {"required", {"tool_call_id", "output"}},
             {"properties", {{"tool_call_id", {{"type", "string"}}}, {"output", {{"type", "string"}}}}}}}}}}}});
  p["/v1/jobs/{id}/tool_outputs"]["post"] = tool_outputs;
  json events = op("Job events: a JSON list, or with Accept: text/event-stream a live SSE stream (Last-Event-ID resumes)",
                   200, ref("List"), {400, 401, 404, 429});
  events["responses"]["200"]["content"]["text/event-stream"] = {{"schema", {{"type", "string"}}}};
  events["parameters"] = json::array({{{"name", "after"}, {"in", "query"}, {"schema", {{"type", "integer"}}}},
                                      {{"name", "Last-Event-ID"}, {"in", "header"}, {"schema", {{"type", "string"}}}}});
  p["/v1/jobs/{id}/events"]["get"] = events;
  json tenant_events = events;
  tenant_events["summary"] =
      "Every job event of the key's tenant (data carries job_id): a JSON list, or an SSE stream that starts at the "
      "newest event unless Last-Event-ID or ?after= says where to resume";
  tenant_events["responses"].erase("404");
  p["/v1/events"]["get"] = tenant_events;
  json ui_page = op("The web dashboard (HTML; its files are embedded in the binary)", 200, {{"type", "string"}}, {}, false);
  ui_page["responses"]["200"]["content"] = {{"text/html", {{"schema", {{"type", "string"}}}}}};
  p["/ui"]["get"] = ui_page;
  json ui_file = op("A dashboard file (JS, CSS); ETag, and 304 on If-None-Match", 200, {{"type", "string"}}, {404}, false);
  ui_file["responses"]["200"]["content"] = {{"text/javascript", {{"schema", {{"type", "string"}}}}},
                                            {"text/css", {{"schema", {{"type", "string"}}}}}};
  ui_file["responses"]["304"] = {{"description", "not modified"}};
  ui_file["parameters"] = json::array(
      {{{"name", "file"}, {"in", "path"}, {"required", true}, {"schema", {{"type", "string"}}}}});
  p["/ui/{file}"]["get"] = ui_file;
  p["/v1/jobs/{id}/webhooks"]["get"] = op("Webhook deliveries of a job and their attempts", 200, ref("List"), {401, 404, 429});
  json create_key = op("Create an API key (admin); the key and its webhook secret are shown once", 201, ref("Key"),
                       {400, 401, 403, 429});
  create_key["requestBody"] = body({{"type", "object"},
                                    {"required", {"tenant"}},
                                    {"properties", {{"tenant", {{"type", "string"}}}, {"admin", {{"type", "boolean"}}},
                                                    {"retention_days", {{"type", "integer"}, {"minimum", 0},
                                                                        {"maximum", 36500}, {"nullable", true}}}}}});
  p["/v1/keys"]["post"] = create_key;
  p["/v1/keys"]["get"] = op("List keys (admin: all tenants)", 200, ref("List"), {401, 429});
  p["/v1/keys/{id}/revoke"]["post"] = op("Revoke a key", 200, ref("Key"), {401, 404, 409, 429});
  p["/v1/keys/{id}/rotate_secret"]["post"] = op("New webhook secret for a key", 200, ref("Key"), {401, 404, 409, 429});
  // Observability (api/observability_routes.cpp)
  json num = {{"type", "number"}}, integer = {{"type", "integer"}}, nint = {{"type", "integer"}, {"nullable", true}};
  s["EngineSample"] = {{"type", "object"},
                       {"properties",
                        {{"at_ms", integer}, {"tokens_per_s", num}, {"prompt_tokens_per_s", num}, {"batch_size", integer},
                         {"running", integer}, {"waiting", integer}, {"kv_blocks_used", integer},
                         {"kv_blocks_total", integer}, {"kv_blocks_parked", integer}, {"kv_blocks_spilled", integer},
                         {"prefix_hit_rate", {{"type", "number"}, {"minimum", 0}, {"maximum", 1}}}}}};
  s["EngineStats"] = object_of(
      {{"object", {{"type", "string"}, {"enum", {"engine.stats"}}}},
       {"now_ms", integer},
       {"workers",
        array_of(object_of({{"worker_id", {{"type", "string"}}}, {"samples", array_of(ref("EngineSample"))}}))}});
  s["JobTimeline"] = object_of(
      {{"object", {{"type", "string"}, {"enum", {"job.timeline"}}}},
       {"job_id", {{"type", "string"}}},
       {"status", {{"type", "string"}}},
       {"created_ms", integer},
       {"finished_ms", nint},
       {"spans", array_of(timeline_item("queue_wait | prefill | decode | tool | client_wait | parked | webhook",
                                        {{"start_ms", integer}, {"end_ms", nint}, {"turn", nint}}))},
       {"marks", array_of(timeline_item("queued | claimed | retry | released | resumed | requires_action | "
                                        "tool_outputs | completed | failed | cancelled | incomplete | kv_spill | "
                                        "kv_restore (attrs: tokens, bytes, ms, worker)",
                                        {{"at_ms", integer}}))}});
  json metrics_op = op("Prometheus metrics (text format 0.0.4); open unless agentqd runs with --metrics-token", 200,
                       {{"type", "string"}}, {401}, false);
  metrics_op["responses"]["200"]["content"] = {{"text/plain", {{"schema", {{"type", "string"}}}}}};
  p["/metrics"]["get"] = metrics_op;
  json engine_stats = op("Engine samples of each worker (about one a second while busy; an hour is kept)", 200,
                         ref("EngineStats"), {400, 401, 429});
  engine_stats["parameters"] = json::array(
      {{{"name", "since_ms"}, {"in", "query"}, {"description", "only samples after this time (ms since the epoch; "
                                                               "default: the last 10 minutes)"},
        {"schema", integer}}});
  p["/v1/engine/stats"]["get"] = engine_stats;
  p["/v1/jobs/{id}/timeline"]["get"] =
      op("Where a job's time went: queue waits, prefill and decode per turn, tool calls, client waits, KV parking, "
         "webhook attempts (spans) and lifecycle marks",
         200, ref("JobTimeline"), {401, 404, 429});
  add_openai_openapi(doc);  // /v1/chat/completions, /v1/responses..., /v1/webhook_endpoints
  add_batch_openapi(doc);   // /v1/files..., /v1/batches...
  for (auto it = p.begin(); it != p.end(); ++it)
    if (it.key().find("{id}") != std::string::npos)
      for (auto m = it->begin(); m != it->end(); ++m) {
        json params = m->value("parameters", json::array());
        params.insert(params.begin(), id_param());
        (*m)["parameters"] = params;
      }
  return doc;
}
}  // namespace

const std::string& openapi_json() {
  static const std::string doc = build().dump(2);
  return doc;
}

}  // namespace agentq::api
