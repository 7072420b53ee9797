// Batch lines -> job specs, files / batches / results -> OpenAI objects (see batch_map.h).
#include "api/batch_map.h"

#include "api/job_view.h"
#include "api/json_text.h"
#include "api/openai_map.h"

namespace agentq::api {

using json = nlohmann::json;

std::optional<json> batch_line_spec(const std::string& url, const json& body, const model_catalog& catalog,
                                    const net::ssrf_guard& guard, const validation_limits& limits,
                                    validation_error* err, bool* store_content) {
  auto refuse = [&](const std::string& param, const std::string& why) -> std::optional<json> {
    *err = {http::error_kind::invalid_request, why, param};
    return std::nullopt;
  };
  *store_content = true;
  if (auto s = body.find("stream"); s != body.end() && s->is_boolean() && s->get<bool>())
    return refuse("stream", "'stream' is not supported in a batch (results go to the output file)");
  if (url == "/v1/jobs") {
    auto v = validate_job(body, catalog, guard, limits, err);
    if (!v) return std::nullopt;
    *store_content = v->store;
    return body;
  }
  if (url == "/v1/chat/completions") {
    auto j = map_chat_request(body, catalog, guard, limits, err);
    if (!j) return std::nullopt;
    return std::move(j->spec);
  }
  if (url == "/v1/responses") {
    if (auto p = body.find("previous_response_id"); p != body.end() && !p->is_null())
      return refuse("previous_response_id", "'previous_response_id' is not supported in a batch");
    auto j = map_response_request(body, nullptr, catalog, guard, limits, err);
    if (!j) return std::nullopt;
    if (auto s = body.find("store"); s != body.end() && s->is_boolean()) *store_content = s->get<bool>();
    return std::move(j->spec);
  }
  return refuse("url", "'" + url + "' is not a batch endpoint");
}

json file_object(const store::file_row& f) {
  return {{"id", f.id},
          {"object", "file"},
          {"bytes", f.bytes},
          {"created_at", f.created_ms / 1000},
          {"filename", f.filename},
          {"purpose", f.purpose},
          {"status", "processed"},
          {"expires_at", nullptr},
          {"status_details", nullptr}};
}

json batch_object(const store::batch_row& b) {
  auto at = [](int64_t ms) { return ms > 0 ? json(ms / 1000) : json(nullptr); };
  json errors = nullptr;
  if (!b.errors_json.empty()) {
    errors = json::parse(b.errors_json, nullptr, false);
    if (errors.is_discarded()) errors = nullptr;
  }
  json meta = json::parse(b.metadata_json, nullptr, false);
  if (meta.is_discarded()) meta = nullptr;
  int64_t n_completed = b.n_completed, n_failed = b.n_failed;
  return {{"id", b.id},
          {"object", "batch"},
          {"endpoint", b.endpoint},
          {"errors", errors},
          {"input_file_id", b.input_file_id},
          {"completion_window", b.completion_window},
          {"status", store::to_string(b.status)},
          {"output_file_id", b.output_file_id.empty() ? json(nullptr) : json(b.output_file_id)},
          {"error_file_id", b.error_file_id.empty() ? json(nullptr) : json(b.error_file_id)},
          {"created_at", b.created_ms / 1000},
          {"in_progress_at", at(b.in_progress_ms)},
          {"expires_at", at(b.expires_ms)},
          {"finalizing_at", at(b.finalizing_ms)},
          {"completed_at", at(b.completed_ms)},
          {"failed_at", at(b.failed_ms)},
          {"expired_at", at(b.expired_ms)},
          {"cancelling_at", at(b.cancelling_ms)},
          {"cancelled_at", at(b.cancelled_ms)},
          {"request_counts", {{"total", b.n_total}, {"completed", n_completed}, {"failed", n_failed}}},
          {"metadata", meta}};
}

output_line batch_output_line(const std::string& endpoint, const store::batch_result& r, const store::job_row* job,
                              const std::vector<store::transcript_row>& transcript, const std::string& why) {
  output_line out;
  std::string line_id = "batch_req_" + (r.job_id.size() > 4 ? r.job_id.substr(4) : std::to_string(r.line_idx));
  // The error shapes (rare) as documents, dumped as the API dumps them.
  auto document = [&](json error, json response) {
    out.is_error = true;
    const json line = {{"id", line_id}, {"custom_id", r.custom_id}, {"response", std::move(response)},
                       {"error", std::move(error)}};
    out.line = line.dump(-1, ' ', false, json::error_handler_t::replace);
    return out;
  };
  if (!job) {
    json e = r.error_json.empty() ? json(nullptr) : json::parse(r.error_json, nullptr, false);
    if (e.is_object())
      return document({{"code", e.value("code", "invalid_request")}, {"message", e.value("message", "")}}, nullptr);
    return document({{"code", why.empty() ? "batch_failed" : why},
                     {"message", why == "batch_expired" ? "the batch expired before this request ran"
                                 : why == "batch_cancelled" ? "the batch was cancelled before this request ran"
                                                            : "this request did not run"}},
                    nullptr);
  }
  if (job->status == store::job_status::cancelled && !why.empty() && job->started_ms == 0)
    return document({{"code", why},
                     {"message", why == "batch_expired" ? "the batch expired before this request ran"
                                                        : "the batch was cancelled before this request ran"}},
                    nullptr);
  if (job->status == store::job_status::failed || job->status == store::job_status::cancelled) {
    json body = {{"error",
                  {{"type", "server_error"},
                   {"message", job->error.empty() ? "the request " + std::string(store::to_string(job->status)) : job->error},
                   {"param", nullptr},
                   {"code", store::to_string(job->status)}}}};
    return document(nullptr, {{"status_code", 500}, {"request_id", job->id}, {"body", std::move(body)}});
  }
  // NOTE: a line that ran is written as text (issue 29: the document of every line, built and
  // dumped, was most of the batch runner's work per job); the same bytes as the document's dump,
  // keys in its order (unit.batch_output_line checks every endpoint's line against the objects).
  std::string body;
  if (endpoint == "/v1/chat/completions")
    body = chat_completion_json(*job, transcript);
  else if (endpoint == "/v1/responses")
    body = response_object(*job, transcript).dump(-1, ' ', false, json::error_handler_t::replace);
  else
    body = job_json(*job, &transcript);
  out.line.reserve(body.size() + 160);
  json_writer w(out.line);
  w.raw("{"), w.key("custom_id"), w.str(r.custom_id);
  w.raw(","), w.key("error"), w.raw("null");
  w.raw(","), w.key("id"), w.str(line_id);
  w.raw(","), w.key("response"), w.raw("{"), w.key("body"), w.raw(body);
  w.raw(","), w.key("request_id"), w.str(job->id);
  w.raw(","), w.key("status_code"), w.raw("200}}");
  return out;
}

}  // namespace agentq::api
