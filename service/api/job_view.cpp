// Job rows -> API job objects (see job_view.h).
#include "api/job_view.h"

#include <charconv>
#include <cmath>
#include <cstdio>

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

namespace {

// Appends JSON text as nlohmann's dump(-1, ' ', false, replace) writes the same values: no spaces,
// object keys in the order std::map keeps them (the callers write them sorted), doubles by
// nlohmann's own shortest round-trip conversion. unit.job_view compares job_json with
// job_object(...).dump() byte for byte.
class json_writer {
 public:
  explicit json_writer(std::string& out) : out_(out) {}
  void raw(std::string_view s) { out_.append(s); }
  // `"name":` for the fixed ASCII field names of the job object.
  void key(std::string_view name) {
    out_ += '"';
    out_.append(name);
    out_.append("\":");
  }
  void i64(int64_t v) {
    char b[24];
    auto r = std::to_chars(b, b + sizeof b, v);
    out_.append(b, r.ptr);
  }
  void f64(double v) {
    if (!std::isfinite(v)) return raw("null");
    // NOTE: nlohmann's serializer formats a double with this function (detail namespace, but in its
    // public header); using it keeps the digits identical, the test above checks that they are.
    char b[64];
    char* end = nlohmann::detail::to_chars(b, b + sizeof b, v);
    out_.append(b, end);
  }
  void seconds_or_null(int64_t ms) {
    if (ms > 0) f64(double(ms) / 1000.0);
    else raw("null");
  }
  void value(const json& j) { out_.append(j.dump(-1, ' ', false, json::error_handler_t::replace)); }
  // A JSON string: valid UTF-8 is copied but for '"', '\\' and the control characters, escaped as
  // nlohmann's dump_escaped escapes them with ensure_ascii off.
  void str(std::string_view s) {
    // NOTE: invalid UTF-8 (a model's cut multi-byte character) goes through nlohmann itself: its
    // replacement rules (where U+FFFD goes, which bytes it eats) are its own; rare, so one copy.
    if (!is_valid_utf8(s)) return value(json(std::string(s)));
    out_ += '"';
    size_t run = 0;  // start of the bytes not yet copied
    for (size_t i = 0; i < s.size(); ++i) {
      const auto c = static_cast<unsigned char>(s[i]);
      if (c >= 0x20 && c != '"' && c != '\\') continue;
      out_.append(s.substr(run, i - run));
      run = i + 1;
      switch (c) {
        case '"': out_.append("\\\""); break;
        case '\\': out_.append("\\\\"); break;
        case '\b': out_.append("\\b"); break;
        case '\t': out_.append("\\t"); break;
        case '\n': out_.append("\\n"); break;
        case '\f': out_.append("\\f"); break;
        case '\r': out_.append("\\r"); break;
        default: {
          char b[8];
          std::snprintf(b, sizeof b, "\\u%04x", unsigned(c));
          out_.append(b, 6);
        }
      }
    }
    out_.append(s.substr(run));
    out_ += '"';
  }

 private:
  std::string& out_;
};

// usage_object over an already parsed usage JSON (u: parse_or's result), written.
void write_usage(json_writer& w, const json& parsed) {
  static const json k_empty = json::object();
  const json& u = parsed.is_object() ? parsed : k_empty;
  const int64_t prompt = first_int(u, {"prompt_tokens", "n_tokens_prompt"});
  const int64_t cached = first_int(u, {"cached_tokens", "n_tokens_cached"});
  const int64_t completion = first_int(u, {"completion_tokens", "n_tokens_generated"});
  int64_t accepted = 0, rejected = 0;
  if (auto d = u.find("completion_tokens_details"); d != u.end() && d->is_object()) {
    accepted = first_int(*d, {"accepted_prediction_tokens"});
    rejected = first_int(*d, {"rejected_prediction_tokens"});
  }
  w.raw("{");
  w.key("cached_tokens"), w.i64(cached);
  w.raw(","), w.key("completion_tokens"), w.i64(completion);
  w.raw(","), w.key("completion_tokens_details");
  w.raw("{"), w.key("accepted_prediction_tokens"), w.i64(accepted);
  w.raw(","), w.key("rejected_prediction_tokens"), w.i64(rejected), w.raw("}");
  w.raw(","), w.key("prompt_tokens"), w.i64(prompt);
  w.raw(","), w.key("total_tokens"), w.i64(prompt + completion);
  w.raw("}");
}

// job_object's "transcript" and "turns" arrays.
void write_transcript(json_writer& w, const std::vector<store::transcript_row>& rows) {
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
    const json tu = parse_or(r.usage_json, json::object());
    w.raw("{"), w.key("created_at"), w.f64(double(r.created_ms) / 1000.0);
    w.raw(","), w.key("finish_reason");
    if (tu.is_object() && tu.contains("finish") && tu["finish"].is_string())
      w.str(tu["finish"].get_ref<const std::string&>());
    else
      w.raw(!r.tool_calls_json.empty() && r.tool_calls_json != "[]" ? "\"tool_calls\"" : "\"stop\"");
    w.raw(","), w.key("timings"), w.raw("{");
    bool first_timing = true;
    for (const char* k : {"decode_ms", "prefill_ms", "queue_ms"})  // sorted, as the object keeps them
      if (tu.is_object() && tu.contains(k)) {
        if (!first_timing) w.raw(",");
        first_timing = false;
        w.key(k), w.value(tu[k]);
      }
    w.raw("}");
    w.raw(","), w.key("turn"), w.i64(r.turn_idx);
    w.raw(","), w.key("usage"), write_usage(w, tu);
    w.raw("}");
  }
  w.raw("]");
}

}  // namespace

std::string job_json(const store::job_row& job, const std::vector<store::transcript_row>* transcript,
                     const json* request) {
  json parsed;
  if (!request) parsed = parse_or(job.request_json, json::object());
  const json& req = request ? *request : parsed;
  // NOTE: read in job_object's order with its accessors, so a stored request of another shape
  // throws (or falls back) just as it does there.
  const std::string model = req.value("model", "");
  auto md = req.find("metadata");
  // NOTE: null, not parse_or's {}, when there is none: the same output (write_usage and n_turns
  // read a non-object as {}), without allocating the empty object (a submit's 202 has no usage).
  const json usage = job.usage_json.empty() ? json() : parse_or(job.usage_json, json());
  const int n_turns = usage.is_object() ? usage.value("turns", 0) : 0;

  std::string out;
  out.reserve(640 + (transcript ? transcript->size() * 160 : 0));
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
  if (transcript) write_transcript(w, *transcript);
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
