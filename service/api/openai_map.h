// The OpenAI-compatible surface (docs/openai.md): Chat Completions and Responses requests mapped
// onto agentq job specs (the same validation, store, queue and engine as POST /v1/jobs), and job
// rows mapped back onto OpenAI's chat.completion and response objects.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "api/validate.h"
#include "store/store.h"

namespace agentq::api {

// A request mapped onto a job: spec is what POST /v1/jobs would have stored (validated), plus
// an "openai" object the worker ignores and the views read back (surface, original fields).
struct openai_job {
  nlohmann::json spec;
  bool stream = false;
  bool include_usage = false;  // chat: stream_options.include_usage
  bool background = false;     // responses: background: true
};

// POST /v1/chat/completions body -> job (priority high, one client-visible answer).
// nullopt with *err naming the field (param) on anything agentq cannot honour.
std::optional<openai_job> map_chat_request(const nlohmann::json& body, const model_catalog& catalog,
                                           const net::ssrf_guard& guard, const validation_limits& limits,
                                           validation_error* err);

// The stored response a new one continues (previous_response_id): its conversation so far, as
// job-spec messages, without the previous response's own instructions.
struct response_chain {
  std::string previous_id;              // "resp_..."
  nlohmann::json messages = nlohmann::json::array();
  std::string kv_chain;                 // job id of the chain's first response (its engine KV key)
};

// POST /v1/responses body -> job. prev: the chain when previous_response_id resolved (the caller
// looks it up; nullptr when the body names none).
std::optional<openai_job> map_response_request(const nlohmann::json& body, const response_chain* prev,
                                               const model_catalog& catalog, const net::ssrf_guard& guard,
                                               const validation_limits& limits, validation_error* err);

// Ids: a response or chat completion id is its job's id with another prefix ("job_<24 hex>" ->
// "resp_<24 hex>" / "chatcmpl-<24 hex>"); nullopt when s is not such an id.
std::string response_id_of(const std::string& job_id);
std::string chat_id_of(const std::string& job_id);
std::optional<std::string> job_id_of_response(const std::string& response_id);

// The job's surface: "chat", "responses", or "" for a plain /v1/jobs job.
std::string openai_surface(const store::job_row& job);

// A job row (+ its transcript) as an OpenAI "response" object.
nlohmann::json response_object(const store::job_row& job, const std::vector<store::transcript_row>& transcript);
// A response's status as OpenAI names it (queued, in_progress, completed, failed, cancelled, incomplete).
std::string response_status(store::job_status s);
// The output items of a response's transcript (message, function_call), in order.
nlohmann::json response_output(const std::string& response_id, const std::vector<store::transcript_row>& transcript);
// The input items of a stored response (GET /v1/responses/{id}/input_items), oldest first.
nlohmann::json response_input_items(const store::job_row& job);

// The top-level "model" string of a stored request ("" when it has none, is not a string or does not
// parse): what parse_or(request).value("model", "") gave for the requests the API stores, read by a
// SAX pass that builds no document and stops at the key (a batch's output line needs only this of
// its request: the whole parse was ~12 % of the batch runner's thread, issue 29).
std::string request_model(const std::string& request_json);

// A job row (+ transcript) as a chat.completion object.
nlohmann::json chat_completion_object(const store::job_row& job, const std::vector<store::transcript_row>& transcript);
// chat_completion_object(job, transcript).dump() as the API sends it (ensure_ascii off, invalid UTF-8
// replaced), written straight into the text: the same bytes without building the object (issue 29:
// once per line of a Batch file's output).
std::string chat_completion_json(const store::job_row& job, const std::vector<store::transcript_row>& transcript);
// The chat finish_reason of a terminal job: stop, length or tool_calls.
std::string chat_finish_reason(const store::job_row& job, const std::vector<store::transcript_row>& transcript);

// The conversation a stored response ends with, as job-spec messages (for previous_response_id):
// its input after its instructions, its turns and its tool results.
nlohmann::json chain_messages(const store::job_row& job, const std::vector<store::transcript_row>& transcript);

}  // namespace agentq::api
