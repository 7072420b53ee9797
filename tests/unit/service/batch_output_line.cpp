// A Batch output file's line (api/batch_map.h batch_output_line) and chat_completion_json
// (api/openai_map.h), written as text, against the documents they stand for: the line as it was
// built before (an object with the endpoint's object as its response body) and
// chat_completion_object, dumped as the API dumps them. Same bytes for every shape of row.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include "api/batch_map.h"
#include "api/job_view.h"
#include "api/openai_map.h"

using namespace agentq;
using json = nlohmann::json;

namespace {

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

// The line as a document, built the way batch_output_line built it before it wrote text.
std::string reference_line(const std::string& endpoint, const store::batch_result& r, const store::job_row& job,
                           const std::vector<store::transcript_row>& t) {
  json body = endpoint == "/v1/chat/completions" ? api::chat_completion_object(job, t)
              : endpoint == "/v1/responses"      ? api::response_object(job, t)
                                                 : api::job_object(job, &t);
  json line = {{"id", "batch_req_" + r.job_id.substr(4)}, {"custom_id", r.custom_id}, {"response", nullptr},
               {"error", nullptr}};
  line["response"] = {{"status_code", 200}, {"request_id", job.id}, {"body", body}};
  return dump(line);
}

store::job_row finished_job() {
  store::job_row j;
  j.id = "job_0190a1b2c3d4e5f60718293a";
  j.tenant = "t1";
  j.status = store::job_status::completed;
  j.request_json = R"({"model":"stories260K","messages":[{"role":"user","content":"Once upon a time 7"}],)"
                   R"("max_turns":1,"max_tokens_per_turn":1,"openai":{"surface":"chat"}})";
  j.created_ms = 1764840000123;
  j.started_ms = 1764840000130;
  j.finished_ms = 1764840000140;
  j.usage_json = R"({"prompt_tokens":56,"cached_tokens":37,"completion_tokens":1,"turns":1})";
  return j;
}

store::transcript_row turn(const std::string& content, const std::string& tool_calls = "",
                           const std::string& usage = R"({"finish":"length","prompt_tokens":56})") {
  store::transcript_row t;
  t.role = "assistant";
  t.turn_idx = 0;
  t.content = content;
  t.tool_calls_json = tool_calls;
  t.usage_json = usage;
  t.created_ms = 1764840000139;
  return t;
}

// Rows and transcripts of every shape a line's body reads: contents to escape (quotes, controls,
// multi-byte and invalid UTF-8), tool calls with and without content, finish reasons from the
// job's status and the turn's usage, usage of old and odd forms, no turn at all.
std::vector<std::pair<store::job_row, std::vector<store::transcript_row>>> cases() {
  std::vector<std::pair<store::job_row, std::vector<store::transcript_row>>> out;
  const auto base = finished_job();
  for (const std::string& s : std::vector<std::string>{"", "Once", "quote \" back \\ tab\t nl\n", "caf\xC3\xA9 \xF0\x9F\x98\x80",
                              "cut \xE2\x82", "stray \x80\xBF", std::string("nul \0 in", 8)})
    out.push_back({base, {turn(s)}});
  const std::string calls = R"([{"id":"call_1","name":"get","arguments":"{\"q\":\"x\"}"}])";
  out.push_back({base, {turn("", calls)}});
  out.push_back({base, {turn("thinking out loud", calls)}});
  out.push_back({base, {turn("empty calls", "[]")}});
  out.push_back({base, {turn("stop", "", R"({"finish":"stop"})")}});
  out.push_back({base, {turn("odd finish", "", R"({"finish":5})")}});
  out.push_back({base, {turn("no usage", "", "")}});
  out.push_back({base, {}});
  auto incomplete = base;
  incomplete.status = store::job_status::incomplete;
  out.push_back({incomplete, {turn("cut short", "", R"({"finish":"stop"})")}});
  for (const std::string& usage : std::vector<std::string>{"", "{}", "[1,2]", "not json", R"({"n_tokens_prompt":9,"n_tokens_generated":2,"n_tokens_cached":4})",
        R"({"prompt_tokens":"x","completion_tokens":3.5})",
        R"({"prompt_tokens":5,"completion_tokens":7,"completion_tokens_details":{"accepted_prediction_tokens":4,"rejected_prediction_tokens":1}})",
        R"({"prompt_tokens":5,"completion_tokens_details":[1]})", R"({"turns":"x","queue_ms":{"a":1}})"}) {
    auto j = base;
    j.usage_json = usage;
    out.push_back({j, {turn("usage")}});
  }
  for (const std::string& req : std::vector<std::string>{"", "not json", "[]", R"({"model":7})", R"({"model":"caf\u00e9 \"m\""})"}) {
    auto j = base;
    j.request_json = req;
    out.push_back({j, {turn("model")}});
  }
  auto early = base;
  early.created_ms = 999;
  out.push_back({early, {turn("an early second")}});
  return out;
}

}  // namespace

TEST_CASE("chat_completion_json: chat_completion_object's dump, byte for byte") {
  for (const auto& [job, t] : cases()) {
    CAPTURE(job.usage_json);
    CAPTURE(job.request_json);
    CHECK(api::chat_completion_json(job, t) == dump(api::chat_completion_object(job, t)));
  }
}

TEST_CASE("batch_output_line: a line that ran is its document's dump, for every endpoint") {
  for (const std::string& endpoint : std::vector<std::string>{"/v1/chat/completions", "/v1/responses", "/v1/jobs"})
    for (const std::string& custom_id : std::vector<std::string>{"req-1", "quote \" and caf\xC3\xA9", "cut \xE2\x82"})
      for (const auto& [job, t] : cases()) {
        CAPTURE(endpoint);
        CAPTURE(job.usage_json);
        store::batch_result r;
        r.line_idx = 3;
        r.custom_id = custom_id;
        r.job_id = job.id;
        std::string want;
        try {
          want = reference_line(endpoint, r, job, t);
        } catch (const json::exception&) {
          // a stored request the object cannot read (a top level that is no object): so neither can the text
          CHECK_THROWS_AS(api::batch_output_line(endpoint, r, &job, t, ""), json::exception);
          continue;
        }
        const auto line = api::batch_output_line(endpoint, r, &job, t, "");
        CHECK_FALSE(line.is_error);
        CHECK(line.line == want);
      }
}

TEST_CASE("batch_output_line: error lines keep their shapes") {
  store::batch_result r;
  r.line_idx = 7;
  r.custom_id = "c7";
  r.error_json = R"({"code":"invalid_request","message":"bad 'model'"})";
  auto refused = api::batch_output_line("/v1/chat/completions", r, nullptr, {}, "");
  CHECK(refused.is_error);
  CHECK(json::parse(refused.line) == json{{"id", "batch_req_7"}, {"custom_id", "c7"}, {"response", nullptr},
                                          {"error", {{"code", "invalid_request"}, {"message", "bad 'model'"}}}});
  r.error_json.clear();
  CHECK(json::parse(api::batch_output_line("/v1/jobs", r, nullptr, {}, "batch_expired").line)["error"]["code"] ==
        "batch_expired");
  auto job = finished_job();
  r.job_id = job.id;
  job.status = store::job_status::failed;
  job.error = "the engine failed";
  auto failed = api::batch_output_line("/v1/chat/completions", r, &job, {}, "");
  CHECK(failed.is_error);
  const json f = json::parse(failed.line);
  CHECK(f["response"]["status_code"] == 500);
  CHECK(f["response"]["body"]["error"]["message"] == "the engine failed");
  job.status = store::job_status::cancelled;
  job.started_ms = 0;
  CHECK(json::parse(api::batch_output_line("/v1/chat/completions", r, &job, {}, "batch_cancelled").line)["error"]["code"] ==
        "batch_cancelled");
}
