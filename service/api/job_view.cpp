// Job rows -> API job objects (see job_view.h).
#include "api/job_view.h"

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <cstdio>

#include "api/json_text.h"
#include "api/validate.h"

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

// NOTE: the events of a top-level value come at depth 1 (its start, a scalar, its end) and deeper;
// refused there, the parser builds nothing of it (a refused key alone still builds the value) but
// the JSON string it makes of each key to ask about it: 432 allocations for a 200-message request,
// 1,034 for its whole parse alone, which the old read then copied (unit.job_view).
json request_fields(const std::string& text, std::initializer_list<std::string_view> keys) {
  if (text.empty()) return json::object();
  bool in_kept = true;  // the current top-level key is one of keys (a top level that is no object: kept)
  json j = json::parse(
      text,
      [&in_kept, keys](int depth, json::parse_event_t event, json& parsed) {
        if (depth == 0) return true;
        if (depth == 1 && event == json::parse_event_t::key) {
          const auto& k = parsed.get_ref<const std::string&>();
          in_kept = std::find(keys.begin(), keys.end(), std::string_view(k)) != keys.end();
        }
        return in_kept;
      },
      false);
  return j.is_discarded() ? json::object() : j;
}

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
  if (!request) parsed = request_fields(job.request_json, {"model", "metadata", "webhook"});
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

namespace {

// job_object's "transcript" and "turns" arrays; false (nothing usable written) where a turn's usage
// is complex (usage_reader).
bool write_transcript(json_writer& w, const std::vector<store::transcript_row>& rows) {
  w.raw(","), w.key("transcript"), w.raw("[");
  for (size_t i = 0; i < rows.size(); ++i) {
    const auto& r = rows[i];
    if (i) w.raw(",");
    w.raw("{"), w.key("content"), w.str(r.content);
    if (!r.name.empty()) w.raw(","), w.key("name"), w.str(r.name);
    w.raw(","), w.key("role"), w.str(r.role);
    if (!r.tool_call_id.empty()) w.raw(","), w.key("tool_call_id"), w.str(r.tool_call_id);
    if (!r.tool_calls_json.empty()) w.raw(","), w.key("tool_calls"), w.value(parse_or(r.tool_calls_json, json::array()));
    if (r.turn_idx >= 0) w.raw(","), w.key("turn"), w.i64(r.turn_idx);
    w.raw("}");
  }
  w.raw("]"), w.raw(","), w.key("turns"), w.raw("[");
  bool first = true;
  for (const auto& r : rows) {
    if (r.role != "assistant" || r.turn_idx < 0) continue;
    if (!first) w.raw(",");
    first = false;
    const usage_reader tu(r.usage_json);
    if (tu.complex()) return false;
    w.raw("{"), w.key("created_at"), w.f64(double(r.created_ms) / 1000.0);
    w.raw(","), w.key("finish_reason");
    if (tu.finish().is_string())
      w.str(tu.finish().get_ref<const std::string&>());
    else
      w.raw(!r.tool_calls_json.empty() && r.tool_calls_json != "[]" ? "\"tool_calls\"" : "\"stop\"");
    w.raw(","), w.key("timings"), w.raw("{");
    bool first_timing = true;
    for (const auto& [name, v] : tu.timings())
      if (!v->is_discarded()) {
        if (!first_timing) w.raw(",");
        first_timing = false;
        w.key(name), w.scalar(*v);
      }
    w.raw("}");
    w.raw(","), w.key("turn"), w.i64(r.turn_idx);
    w.raw(","), w.key("usage"), write_usage(w, tu);
    w.raw("}");
  }
  w.raw("]");
  return true;
}

}  // namespace

std::string job_json(const store::job_row& job, const std::vector<store::transcript_row>* transcript,
                     const json* request) {
  json parsed;
  if (!request) parsed = request_fields(job.request_json, {"model", "metadata", "webhook"});
  const json& req = request ? *request : parsed;
  // NOTE: read in job_object's order with its accessors, so a stored request of another shape
  // throws (or falls back) just as it does there.
  const std::string model = req.value("model", "");
  auto md = req.find("metadata");
  const usage_reader usage(job.usage_json);
  // NOTE: a usage job_object copies or throws on (usage_reader::complex; agentq never stores one):
  // made the old way, so the answer is the same in every case.
  auto reference = [&] { return job_object(job, transcript, &req).dump(-1, ' ', false, json::error_handler_t::replace); };
  if (usage.complex()) return reference();
  const int n_turns = usage.n_turns();

  std::string out;
  out.reserve(transcript ? 1024 + transcript->size() * 256 : 640);  // a 1-token job: 522 / 1,056 bytes
  json_writer w(out);
  w.raw("{"), w.key("created_at"), w.seconds_or_null(job.created_ms);
  w.raw(","), w.key("deadline_at"), w.seconds_or_null(job.deadline_ms);
  w.raw(","), w.key("error");
  if (job.error.empty()) w.raw("null");
  else w.raw("{"), w.key("message"), w.str(job.error), w.raw("}");
  w.raw(","), w.key("finished_at"), w.seconds_or_null(job.finished_ms);
  w.raw(","), w.key("id"), w.str(job.id);
  w.raw(","), w.key("metadata");
  if (md == req.end()) w.raw("{}");
  else w.value(*md);
  w.raw(","), w.key("model"), w.str(model);
  w.raw(","), w.key("n_turns"), w.i64(n_turns);
  w.raw(","), w.key("object"), w.raw("\"job\"");
  w.raw(","), w.key("output");
  if (job.result_json.empty()) {
    w.raw("null");
  } else if (auto r = json::parse(job.result_json, nullptr, false); r.is_discarded()) {
    w.str(job.result_json);  // not JSON: the text itself, as a string
  } else {
    w.value(r);
  }
  w.raw(","), w.key("priority"), w.str(store::to_string(job.priority));
  w.raw(","), w.key("required_action");
  if (job.status == store::job_status::requires_action) {
    w.raw("{"), w.key("tool_calls"), w.value(parse_or(job.pending_json, json::array()));
    w.raw(","), w.key("type"), w.raw("\"submit_tool_outputs\""), w.raw("}");
  } else {
    w.raw("null");
  }
  w.raw(","), w.key("started_at"), w.seconds_or_null(job.started_ms);
  w.raw(","), w.key("status"), w.str(store::to_string(job.status));
  w.raw(","), w.key("timings"), w.raw("{"), w.key("queue_ms");
  if (job.started_ms > 0) w.i64(job.started_ms - job.created_ms);
  else w.raw("null");
  w.raw(","), w.key("run_ms");
  if (job.finished_ms > 0 && job.started_ms > 0) w.i64(job.finished_ms - job.started_ms);
  else w.raw("null");
  w.raw(","), w.key("total_ms");
  if (job.finished_ms > 0) w.i64(job.finished_ms - job.created_ms);
  else w.raw("null");
  w.raw("}");
  if (transcript && !write_transcript(w, *transcript)) return reference();
  w.raw(","), w.key("usage"), write_usage(w, usage);
  w.raw(","), w.key("webhook");
  if (auto wh = req.find("webhook"); wh != req.end() && wh->is_object()) {
    const std::string url = wh->value("url", "");
    w.raw("{");
    if (wh->contains("events")) w.key("events"), w.value((*wh)["events"]), w.raw(",");
    w.key("url"), w.str(url), w.raw("}");
  } else {
    w.raw("null");
  }
  w.raw("}");
  return out;
}

}  // namespace agentq::api
