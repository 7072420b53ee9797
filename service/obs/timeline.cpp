// A job's timeline (GET /v1/jobs/{id}/timeline): derived from rows the job already has —
// status events (queue waits, claims, client waits, terminal state), committed turns'
// usage (engine queue, prefill, decode), webhook attempts — plus the spans the worker
// records in job_timeline (tool calls with retries, KV parking).
#include <algorithm>
#include <nlohmann/json.hpp>

#include "obs/obs_store.h"
#include "store/sqlite.h"
#include "store/store.h"

namespace agentq::obs {

using json = nlohmann::json;

namespace {

json span(const std::string& kind, int64_t start, std::optional<int64_t> end, std::optional<int32_t> turn,
          std::string label, json attrs = json::object()) {
  return {{"kind", kind},
          {"start_ms", start},
          {"end_ms", end ? json(*end) : json(nullptr)},
          {"turn", turn ? json(*turn) : json(nullptr)},
          {"label", std::move(label)},
          {"attrs", std::move(attrs)}};
}

json mark(const std::string& kind, int64_t at, std::string label, json attrs = json::object()) {
  return {{"kind", kind}, {"at_ms", at}, {"label", std::move(label)}, {"attrs", std::move(attrs)}};
}

std::string fmt_ms(double ms) {
  char buf[32];
  if (ms < 1000)
    std::snprintf(buf, sizeof buf, "%.0f ms", ms);
  else
    std::snprintf(buf, sizeof buf, "%.2f s", ms / 1000);
  return buf;
}

// Status events -> queue_wait / client_wait spans and lifecycle marks.
void from_status_events(store::sqlite_db& db, const std::string& job_id, json& spans, json& marks) {
  auto s = db.prepare("SELECT data_json, created_ms FROM job_events WHERE job_id=? AND type='status' ORDER BY id");
  s.bind(1, job_id);
  std::optional<int64_t> queued_since, waiting_since;
  std::string queued_why;
  bool running = false;
  while (s.step()) {
    json d = json::parse(s.col_text(0), nullptr, false);
    if (!d.is_object()) continue;
    int64_t at = s.col_int(1);
    std::string st = d.value("status", "");
    auto close_queue = [&] {
      if (queued_since)
        spans.push_back(span("queue_wait", *queued_since, at, std::nullopt,
                             "queue wait (" + queued_why + ") " + fmt_ms(double(at - *queued_since)),
                             {{"after", queued_why}, {"duration_ms", at - *queued_since}}));
      queued_since.reset();
    };
    auto close_wait = [&](const std::string& how) {
      if (waiting_since)
        spans.push_back(span("client_wait", *waiting_since, at, std::nullopt,
                             "waiting on client tool outputs " + fmt_ms(double(at - *waiting_since)),
                             {{"ended_by", how}, {"duration_ms", at - *waiting_since}}));
      waiting_since.reset();
    };
    if (st == "queued") {
      std::string reason = d.value("reason", "");
      if (reason == "tool_outputs") {
        close_wait("tool_outputs");
        marks.push_back(mark("tool_outputs", at, "client tool outputs received"));
      } else if (reason == "released") {
        marks.push_back(mark("released", at, "released by a stopping worker"));
      } else {
        marks.push_back(mark("queued", at, "queued"));
      }
      running = false;
      queued_since = at;
      queued_why = reason.empty() ? "submitted" : reason;
    } else if (st == "running") {
      if (running || !queued_since) {
        // A claim while the job was already running: the previous worker's lease expired.
        marks.push_back(mark("retry", at, "re-claimed after a lost lease", {{"attempt", d.value("attempt", 0)}}));
      }
      close_queue();
      std::string w = d.value("worker", "");
      marks.push_back(mark("claimed", at, "claimed by " + w,
                           {{"worker", w}, {"epoch", d.value("epoch", 0)}, {"attempt", d.value("attempt", 0)}}));
      running = true;
    } else if (st == "requires_action") {
      json names = json::array();
      if (d.contains("tool_calls") && d["tool_calls"].is_array())
        for (const auto& tc : d["tool_calls"])
          if (tc.is_object()) names.push_back(tc.value("name", ""));
      marks.push_back(mark("requires_action", at, "requires action: client tool call(s)", {{"tools", names}}));
      running = false;
      waiting_since = at;
    } else if (!st.empty()) {  // terminal
      close_queue();
      close_wait(st);
      json attrs = json::object();
      if (d.contains("error")) attrs["error"] = d["error"];
      marks.push_back(mark(st, at, st + (d.contains("error") ? ": " + d.value("error", "") : ""), attrs));
      running = false;
    }
  }
  // Still waiting: open spans.
  if (queued_since)
    spans.push_back(span("queue_wait", *queued_since, std::nullopt, std::nullopt, "queue wait (" + queued_why + ")",
                         {{"after", queued_why}}));
  if (waiting_since)
    spans.push_back(span("client_wait", *waiting_since, std::nullopt, std::nullopt, "waiting on client tool outputs"));
}

// Committed turns -> engine queue, prefill and decode spans (ends at the commit time).
void from_turns(store::sqlite_db& db, const std::string& job_id, json& spans, json& marks) {
  auto s = db.prepare(
      "SELECT turn_idx, usage_json, created_ms FROM transcript WHERE job_id=? AND role='assistant' "
      "ORDER BY turn_idx");
  s.bind(1, job_id);
  while (s.step()) {
    int32_t turn = int32_t(s.col_int(0));
    json u = json::parse(s.col_text(1), nullptr, false);
    if (!u.is_object()) continue;
    int64_t end = s.col_int(2);
    double decode_ms = u.value("decode_ms", 0.0), prefill_ms = u.value("prefill_ms", 0.0),
           queue_ms = u.value("queue_ms", 0.0);
    int64_t decode_start = end - int64_t(decode_ms + 0.5);
    int64_t prefill_start = decode_start - int64_t(prefill_ms + 0.5);
    int64_t queue_start = prefill_start - int64_t(queue_ms + 0.5);
    int64_t n_prompt = u.value("prompt_tokens", int64_t{0}), n_cached = u.value("cached_tokens", int64_t{0});
    int64_t n_computed = u.value("computed_tokens", int64_t{0}), n_gen = u.value("completion_tokens", int64_t{0});
    std::string t = "turn " + std::to_string(turn);
    if (queue_ms >= 1)
      spans.push_back(span("queue_wait", queue_start, prefill_start, turn, t + " engine queue " + fmt_ms(queue_ms),
                           {{"after", "engine"}, {"duration_ms", queue_ms}}));
    spans.push_back(span("prefill", prefill_start, decode_start, turn,
                         t + " prefill: " + std::to_string(n_computed) + " computed, " + std::to_string(n_cached) +
                             " cached of " + std::to_string(n_prompt),
                         {{"prompt_tokens", n_prompt},
                          {"cached_tokens", n_cached},
                          {"computed_tokens", n_computed},
                          {"duration_ms", prefill_ms}}));
    double tps = decode_ms > 0 ? double(n_gen) * 1000.0 / decode_ms : 0;
    json details = u.value("completion_tokens_details", json::object());
    if (!details.is_object()) details = json::object();
    const int64_t n_acc = details.value("accepted_prediction_tokens", int64_t{0}),
                  n_rej = details.value("rejected_prediction_tokens", int64_t{0});
    spans.push_back(span(
        "decode", decode_start, end, turn, t + " decode: " + std::to_string(n_gen) + " tokens " + fmt_ms(decode_ms),
        {{"tokens", n_gen}, {"duration_ms", decode_ms}, {"tokens_per_s", tps}, {"finish", u.value("finish", "")},
         {"accepted_prediction_tokens", n_acc}, {"rejected_prediction_tokens", n_rej}}));
    // Speculation (#32): how many of the turn's tokens came from verified proposals.
    if (n_acc + n_rej > 0)
      marks.push_back(mark("speculation", end,
                           t + " speculation: " + std::to_string(n_acc) + " proposed tokens accepted, " +
                               std::to_string(n_rej) + " rejected",
                           {{"turn", turn},
                            {"accepted_prediction_tokens", n_acc},
                            {"rejected_prediction_tokens", n_rej},
                            {"completion_tokens", n_gen}}));
    if (turn > 0 && n_cached > 0)
      marks.push_back(mark(
          "resumed", prefill_start,
          t + ": KV resumed, " + std::to_string(n_cached) + " of " + std::to_string(n_prompt) + " prompt tokens cached",
          {{"turn", turn}, {"cached_tokens", n_cached}, {"prompt_tokens", n_prompt}}));
  }
}

// Worker-recorded spans and marks (tools, parking).
void from_recorded(store::sqlite_db& db, const std::string& job_id, json& spans, json& marks) {
  auto s = db.prepare(
      "SELECT is_mark, kind, start_ms, end_ms, turn, label, attrs FROM job_timeline WHERE job_id=? "
      "ORDER BY start_ms, id");
  s.bind(1, job_id);
  while (s.step()) {
    json attrs = json::parse(s.col_text(6), nullptr, false);
    if (!attrs.is_object()) attrs = json::object();
    if (s.col_int(0)) {
      marks.push_back(mark(s.col_text(1), s.col_int(2), s.col_text(5), attrs));
      continue;
    }
    std::optional<int64_t> end;
    if (!s.col_null(3)) end = s.col_int(3);
    std::optional<int32_t> turn;
    if (!s.col_null(4)) turn = int32_t(s.col_int(4));
    spans.push_back(span(s.col_text(1), s.col_int(2), end, turn, s.col_text(5), attrs));
  }
}

// Webhook attempts -> spans ending when the attempt was recorded.
void from_webhooks(store::sqlite_db& db, const std::string& job_id, json& spans) {
  auto s = db.prepare(
      "SELECT d.id, d.event_type, a.attempt_idx, a.status_code, a.error, a.duration_ms, a.created_ms "
      "FROM webhook_attempts a JOIN webhook_deliveries d ON d.id = a.delivery_id WHERE d.job_id=? "
      "ORDER BY a.created_ms");
  s.bind(1, job_id);
  while (s.step()) {
    int64_t code = s.col_int(3), dur = s.col_int(5), end = s.col_int(6);
    std::string outcome = code / 100 == 2 ? "succeeded" : code == 0 ? "no_response" : "http_error";
    spans.push_back(span("webhook", end - dur, end, std::nullopt,
                         "webhook " + s.col_text(1) + " attempt " + std::to_string(s.col_int(2)) + ": " +
                             (code ? "HTTP " + std::to_string(code) : s.col_text(4)),
                         {{"delivery_id", s.col_text(0)},
                          {"event", s.col_text(1)},
                          {"attempt", s.col_int(2)},
                          {"status_code", code ? json(code) : json(nullptr)},
                          {"outcome", outcome},
                          {"duration_ms", dur}}));
  }
}

}  // namespace

json obs_store::timeline(const store::job_row& job) {
  json spans = json::array(), marks = json::array();
  {
    std::lock_guard lock(mu_);
    db_->exec("BEGIN");  // one read snapshot for all four reads
    try {
      from_status_events(*db_, job.id, spans, marks);
      from_turns(*db_, job.id, spans, marks);
      from_recorded(*db_, job.id, spans, marks);
      from_webhooks(*db_, job.id, spans);
    } catch (...) {
      db_->exec("ROLLBACK");
      throw;
    }
    db_->exec("COMMIT");
  }
  // A terminal job has no open spans: e.g. KV still parked for a client that never answered.
  if (store::is_terminal(job.status) && job.finished_ms > 0)
    for (auto& sp : spans)
      if (sp["end_ms"].is_null()) sp["end_ms"] = std::max(job.finished_ms, sp["start_ms"].get<int64_t>());
  auto by = [](const char* key) {
    return [key](const json& a, const json& b) { return a[key].get<int64_t>() < b[key].get<int64_t>(); };
  };
  std::stable_sort(spans.begin(), spans.end(), by("start_ms"));
  std::stable_sort(marks.begin(), marks.end(), by("at_ms"));
  return {{"object", "job.timeline"},
          {"job_id", job.id},
          {"status", store::to_string(job.status)},
          {"created_ms", job.created_ms},
          {"finished_ms", job.finished_ms > 0 ? json(job.finished_ms) : json(nullptr)},
          {"spans", spans},
          {"marks", marks}};
}

}  // namespace agentq::obs
