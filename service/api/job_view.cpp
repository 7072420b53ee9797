// Job rows -> API job objects (see job_view.h).
#include "api/job_view.h"

namespace agentq::api {

using json = nlohmann::json;

namespace {
json parse_or(const std::string& text, json fallback) {
  if (text.empty()) return fallback;
  auto j = json::parse(text, nullptr, false);
  return j.is_discarded() ? fallback : j;
}
json seconds_or_null(int64_t ms) { return ms > 0 ? json(double(ms) / 1000.0) : json(nullptr); }

int64_t first_int(const json& j, std::initializer_list<const char*> keys) {
  for (const char* k : keys)
    if (auto it = j.find(k); it != j.end() && it->is_number()) return it->get<int64_t>();
  return 0;
}
}  // namespace

json usage_object(const std::string& usage_json) {
  json u = parse_or(usage_json, json::object());
  if (!u.is_object()) u = json::object();
  int64_t prompt = first_int(u, {"prompt_tokens", "n_tokens_prompt"});
  int64_t cached = first_int(u, {"cached_tokens", "n_tokens_cached"});
  int64_t completion = first_int(u, {"completion_tokens", "n_tokens_generated"});
  json details = u.value("completion_tokens_details", json::object());
  if (!details.is_object()) details = json::object();
  return {{"prompt_tokens", prompt},
          {"cached_tokens", cached},
          {"completion_tokens", completion},
          {"total_tokens", prompt + completion},
          // speculation (#32): proposed tokens the model accepted / rejected, summed over the turns
          {"completion_tokens_details",
           {{"accepted_prediction_tokens", first_int(details, {"accepted_prediction_tokens"})},
            {"rejected_prediction_tokens", first_int(details, {"rejected_prediction_tokens"})}}}};
}

std::string webhook_event_for(store::job_status status) {
  switch (status) {
    case store::job_status::requires_action: return "job.requires_action";
    case store::job_status::completed: return "job.completed";
    case store::job_status::failed: return "job.failed";
    case store::job_status::cancelled: return "job.cancelled";
    case store::job_status::incomplete: return "job.incomplete";
    default: return "";
  }
}

json event_object(const store::job_event& e) {
  return {{"id", e.id}, {"job_id", e.job_id}, {"type", e.type}, {"data", parse_or(e.data_json, json::object())},
          {"created_at", double(e.created_ms) / 1000.0}};
}

json job_object(const store::job_row& job, const std::vector<store::transcript_row>* transcript,
                const json* request) {
  // NOTE: the submit's 202 hands its parsed body in: parsing the stored text again was most of
  // making that answer (issue 29).
  json parsed;
  if (!request) parsed = parse_or(job.request_json, json::object());
  const json& req = request ? *request : parsed;
  json out = {{"id", job.id},
              {"object", "job"},
              {"status", store::to_string(job.status)},
              {"model", req.value("model", "")},
              {"priority", store::to_string(job.priority)},
              {"metadata", req.value("metadata", json::object())},
              {"created_at", seconds_or_null(job.created_ms)},
              {"started_at", seconds_or_null(job.started_ms)},
              {"finished_at", seconds_or_null(job.finished_ms)},
              {"deadline_at", seconds_or_null(job.deadline_ms)}};
  if (auto wh = req.find("webhook"); wh != req.end() && wh->is_object()) {
    json w = {{"url", wh->value("url", "")}};
    if (wh->contains("events")) w["events"] = (*wh)["events"];
    out["webhook"] = w;
  } else {
    out["webhook"] = nullptr;
  }
  json usage = parse_or(job.usage_json, json::object());
  out["usage"] = usage_object(job.usage_json);
  out["n_turns"] = usage.is_object() ? usage.value("turns", 0) : 0;
  json timings = {{"queue_ms", nullptr}, {"run_ms", nullptr}, {"total_ms", nullptr}};
  if (job.started_ms > 0) timings["queue_ms"] = job.started_ms - job.created_ms;
  if (job.finished_ms > 0) {
    timings["total_ms"] = job.finished_ms - job.created_ms;
    if (job.started_ms > 0) timings["run_ms"] = job.finished_ms - job.started_ms;
  }
  out["timings"] = timings;
  if (job.status == store::job_status::requires_action) {
    out["required_action"] = {{"type", "submit_tool_outputs"},
                              {"tool_calls", parse_or(job.pending_json, json::array())}};
  } else {
    out["required_action"] = nullptr;
  }
  out["output"] = job.result_json.empty() ? json(nullptr) : parse_or(job.result_json, json(job.result_json));
  out["error"] = job.error.empty() ? json(nullptr) : json{{"message", job.error}};
  if (transcript) {
    json msgs = json::array(), turns = json::array();
    for (const auto& r : *transcript) {
      json m = {{"role", r.role}, {"content", r.content}};
      if (!r.tool_calls_json.empty()) m["tool_calls"] = parse_or(r.tool_calls_json, json::array());
      if (!r.tool_call_id.empty()) m["tool_call_id"] = r.tool_call_id;
      if (!r.name.empty()) m["name"] = r.name;
      if (r.turn_idx >= 0) m["turn"] = r.turn_idx;
      msgs.push_back(std::move(m));
      if (r.role == "assistant" && r.turn_idx >= 0) {
        json tu = parse_or(r.usage_json, json::object());
        json t = {{"turn", r.turn_idx}, {"usage", usage_object(r.usage_json)}, {"created_at", double(r.created_ms) / 1000.0}};
        json tim = json::object();
        if (tu.is_object())
          for (const char* k : {"queue_ms", "prefill_ms", "decode_ms"})
            if (tu.contains(k)) tim[k] = tu[k];
        t["timings"] = tim;
        // One source of truth: the engine's finish as the worker committed it with the turn (the
        // same value the "turn" event carries); rows from before it was stored fall back to a guess.
        if (tu.is_object() && tu.contains("finish") && tu["finish"].is_string())
          t["finish_reason"] = tu["finish"];
        else
          t["finish_reason"] = !r.tool_calls_json.empty() && r.tool_calls_json != "[]" ? "tool_calls" : "stop";
        turns.push_back(std::move(t));
      }
    }
    out["transcript"] = std::move(msgs);
    out["turns"] = std::move(turns);
  }
  return out;
}

}  // namespace agentq::api
