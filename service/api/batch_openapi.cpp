// The Files and Batch routes in the OpenAPI document (see openapi.cpp, docs/openai.md "Batch").
#include "api/batch_routes.h"

namespace agentq::api {

using json = nlohmann::json;

namespace {
json err_ref() { return {{"$ref", "#/components/schemas/Error"}}; }
json ref(const char* n) { return {{"$ref", std::string("#/components/schemas/") + n}}; }
json op(const char* summary, json ok_schema, std::initializer_list<int> errors, const char* media = "application/json") {
  json responses = json::object();
  for (int c : errors)
    responses[std::to_string(c)] = {{"description", "error"}, {"content", {{"application/json", {{"schema", err_ref()}}}}}};
  responses["200"] = {{"description", "success"}, {"content", {{media, {{"schema", ok_schema}}}}}};
  return {{"summary", summary}, {"responses", responses}};
}
json query(const char* name, json schema, const char* description) {
  return {{"name", name}, {"in", "query"}, {"required", false}, {"schema", schema}, {"description", description}};
}
}  // namespace

void add_batch_openapi(json& doc) {
  auto& s = doc["components"]["schemas"];
  json str = {{"type", "string"}}, integer = {{"type", "integer"}}, obj = {{"type", "object"}};
  s["File"] = {{"type", "object"},
               {"properties", {{"id", str}, {"object", str}, {"bytes", integer}, {"created_at", integer},
                               {"filename", str}, {"purpose", str}, {"status", str}}}};
  s["Batch"] = {
      {"type", "object"},
      {"properties",
       {{"id", str}, {"object", str}, {"endpoint", str}, {"errors", obj}, {"input_file_id", str},
        {"completion_window", str},
        {"status", {{"type", "string"}, {"enum", {"validating", "in_progress", "finalizing", "completed", "expired",
                                                  "cancelling", "cancelled", "failed"}}}},
        {"output_file_id", str}, {"error_file_id", str}, {"created_at", integer}, {"in_progress_at", integer},
        {"expires_at", integer}, {"finalizing_at", integer}, {"completed_at", integer}, {"failed_at", integer},
        {"expired_at", integer}, {"cancelling_at", integer}, {"cancelled_at", integer},
        {"request_counts", {{"type", "object"}, {"properties", {{"total", integer}, {"completed", integer}, {"failed", integer}}}}},
        {"metadata", obj}}}};
  json list = ref("List");
  auto& p = doc["paths"];
  json upload = op("Upload a batch input file (multipart: purpose=batch, file=JSONL); streamed to disk up to "
                   "--max-file-bytes, every line checked (400 names the line)",
                   ref("File"), {400, 401, 413, 429, 503});
  upload["requestBody"] = {
      {"required", true},
      {"content", {{"multipart/form-data", {{"schema", {{"type", "object"}, {"required", {"purpose", "file"}},
                                                          {"properties", {{"purpose", str},
                                                                          {"file", {{"type", "string"}, {"format", "binary"}}}}}}}}}}}};
  p["/v1/files"]["post"] = upload;
  json lf = op("The tenant's files, newest first", list, {400, 401, 429});
  lf["parameters"] = json::array({query("limit", integer, "1-100, default 100")});
  p["/v1/files"]["get"] = lf;
  p["/v1/files/{id}"]["get"] = op("A file", ref("File"), {401, 404, 429});
  p["/v1/files/{id}"]["delete"] = op("Delete a file", obj, {401, 404, 429});
  p["/v1/files/{id}/content"]["get"] = op("A file's bytes (JSONL)", str, {401, 404, 429}, "application/jsonl");
  json create = op("Create a batch from an uploaded file (completion_window 24h); 429 queue_full past "
                   "--max-queue-depth", ref("Batch"), {400, 401, 404, 429, 503});
  create["requestBody"] = {
      {"required", true},
      {"content", {{"application/json", {{"schema", {{"type", "object"}, {"required", {"input_file_id", "endpoint", "completion_window"}},
                                                      {"properties", {{"input_file_id", str}, {"endpoint", str},
                                                                      {"completion_window", str}, {"metadata", obj}}}}}}}}}};
  p["/v1/batches"]["post"] = create;
  json lb = op("The tenant's batches, newest first", list, {400, 401, 429});
  lb["parameters"] = json::array({query("limit", integer, "1-100, default 20"), query("after", str, "a batch id")});
  p["/v1/batches"]["get"] = lb;
  p["/v1/batches/{id}"]["get"] = op("A batch", ref("Batch"), {401, 404, 429});
  json usage = op("Token usage and jobs per UTC day, grouped by key and / or model (OpenAI's usage shape: page of "
                  "buckets of results)", obj, {400, 401, 429, 503});
  usage["parameters"] = json::array({query("start", integer, "Unix seconds (required; rounded down to the day)"),
                                     query("end", integer, "Unix seconds (default now)"),
                                     query("group_by", str, "key, model or key,model")});
  p["/v1/usage"]["get"] = usage;
  p["/v1/batches/{id}/cancel"]["post"] = op("Cancel a batch (cancelling, then cancelled)", ref("Batch"), {401, 404, 409, 429});
}

}  // namespace agentq::api
