// The job object the API returns (GET /v1/jobs/{id}, lists, webhook payloads), built
// from the store's rows. Secrets in the stored request (webhook.secret) never appear.
#pragma once

#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "store/store.h"

namespace agentq::api {

// {"id","object":"job","status","model","priority","metadata","webhook","created_at",...,
//  "usage":{prompt_tokens,cached_tokens,completion_tokens,total_tokens},"turns":[...],
//  "required_action","output","error","transcript"}. transcript empty = summary form (lists).
// request: job.request_json already parsed, when the caller has it (a submit's 202: the handler
// parsed the body it stored); nullptr = read job.request_json's top-level model, metadata and
// webhook (all the object shows of it; the messages are not built). The object is the same either way.
nlohmann::json job_object(const store::job_row& job, const std::vector<store::transcript_row>* transcript,
                          const nlohmann::json* request = nullptr);

// job_object(job, transcript, request).dump() as the API sends it (ensure_ascii off, invalid UTF-8
// replaced), written straight into the text: the same bytes without building the object (issue 29:
// the submit's 202 and GET /v1/jobs/{id}, once per job each). Throws where job_object throws (a
// stored request whose "model" is not a string).
std::string job_json(const store::job_row& job, const std::vector<store::transcript_row>* transcript,
                     const nlohmann::json* request = nullptr);

// A stored request's top-level values under keys only (job objects show model, metadata and webhook;
// the OpenAI maps read openai, model, metadata): the rest -- the messages and tools, nearly all of it
// -- is lexed and validated but not built. Text that does not parse reads as {}; anything else as
// the whole parse would for those keys (the last of a repeated key; a top level that is not an
// object is kept whole).
nlohmann::json request_fields(const std::string& text, std::initializer_list<std::string_view> keys);

// usage_totals / per-turn usage JSON -> the API usage object.
nlohmann::json usage_object(const std::string& usage_json);

// "job.completed" etc. for a status that has a webhook event; "" otherwise.
std::string webhook_event_for(store::job_status status);

// One stored event as the API shows it: {"id","job_id","type","data","created_at"}.
nlohmann::json event_object(const store::job_event& e);

}  // namespace agentq::api
