// Codecs of the remote-worker protocol (protocol.h).
#include "worker/protocol.h"

#include <set>
#include <stdexcept>

namespace agentq::worker::protocol {

bool is_known_kind(const std::string& kind) {
  static const std::set<std::string> k = {"claim", "fence", "renew", "init_transcript", "commit_turn", "tool_result",
                                          "event", "require_action", "finish", "release", "timeline", "timeline_close",
                                          "engine_sample", "job", "job_models", "transcript", "tool_results",
                                          "cancelled_among", "live_kv_keys"};
  return k.count(kind) != 0;
}

bool is_read_kind(const std::string& kind) {
  return kind == "job" || kind == "job_models" || kind == "transcript" || kind == "tool_results" ||
         kind == "cancelled_among" || kind == "live_kv_keys";
}

bool is_recorded_kind(const std::string& kind) {
  return !is_read_kind(kind) && kind != "renew" && kind != "fence" && kind != "engine_sample";
}

json to_json(const store::job_row& r) {
  return {{"id", r.id},
          {"tenant", r.tenant},
          {"status", store::to_string(r.status)},
          {"priority", static_cast<int>(r.priority)},
          {"request_json", r.request_json},
          {"result_json", r.result_json},
          {"error", r.error},
          {"usage_json", r.usage_json},
          {"pending_json", r.pending_json},
          {"attempts", r.attempts},
          {"lease_epoch", r.lease_epoch},
          {"lease_owner", r.lease_owner},
          {"lease_expires_ms", r.lease_expires_ms},
          {"created_ms", r.created_ms},
          {"started_ms", r.started_ms},
          {"finished_ms", r.finished_ms},
          {"updated_ms", r.updated_ms},
          {"deadline_ms", r.deadline_ms},
          {"store_content", r.store_content}};
}

store::job_row job_row_from_json(const json& j) {
  store::job_row r;
  r.id = j.at("id").get<std::string>();
  r.tenant = j.at("tenant").get<std::string>();
  auto st = store::parse_job_status(j.at("status").get<std::string>());
  if (!st) throw std::invalid_argument("bad job status");
  r.status = *st;
  int p = j.at("priority").get<int>();
  if (p < 0 || p > 3) throw std::invalid_argument("bad priority");
  r.priority = static_cast<store::job_priority>(p);
  r.request_json = j.at("request_json").get<std::string>();
  r.result_json = j.value("result_json", "");
  r.error = j.value("error", "");
  r.usage_json = j.value("usage_json", "");
  r.pending_json = j.value("pending_json", "");
  r.attempts = j.value("attempts", 0);
  r.lease_epoch = j.value("lease_epoch", int64_t(0));
  r.lease_owner = j.value("lease_owner", "");
  r.lease_expires_ms = j.value("lease_expires_ms", int64_t(0));
  r.created_ms = j.value("created_ms", int64_t(0));
  r.started_ms = j.value("started_ms", int64_t(0));
  r.finished_ms = j.value("finished_ms", int64_t(0));
  r.updated_ms = j.value("updated_ms", int64_t(0));
  r.deadline_ms = j.value("deadline_ms", int64_t(0));
  r.store_content = j.value("store_content", true);
  return r;
}

json to_json(const store::transcript_row& r) {
  return {{"seq", r.seq},         {"turn_idx", r.turn_idx},         {"role", r.role},
          {"content", r.content}, {"tool_calls_json", r.tool_calls_json}, {"tool_call_id", r.tool_call_id},
          {"name", r.name},       {"usage_json", r.usage_json},     {"created_ms", r.created_ms}};
}

store::transcript_row transcript_row_from_json(const json& j) {
  store::transcript_row r;
  r.seq = j.value("seq", int64_t(0));
  r.turn_idx = j.value("turn_idx", -1);
  r.role = j.at("role").get<std::string>();
  r.content = j.at("content").get<std::string>();
  r.tool_calls_json = j.value("tool_calls_json", "");
  r.tool_call_id = j.value("tool_call_id", "");
  r.name = j.value("name", "");
  r.usage_json = j.value("usage_json", "");
  r.created_ms = j.value("created_ms", int64_t(0));
  return r;
}

json to_json(const store::tool_output& o) {
  return {{"call_id", o.call_id}, {"output", o.output}, {"is_error", o.is_error}};
}

store::tool_output tool_output_from_json(const json& j) {
  return {j.at("call_id").get<std::string>(), j.at("output").get<std::string>(), j.value("is_error", false)};
}

json to_json(const store::turn_commit& t) {
  return {{"turn_idx", t.turn_idx},
          {"content", t.content},
          {"tool_calls_json", t.tool_calls_json},
          {"turn_usage_json", t.turn_usage_json},
          {"job_usage", t.job_usage.to_json()}};
}

store::turn_commit turn_commit_from_json(const json& j) {
  store::turn_commit t;
  t.turn_idx = j.at("turn_idx").get<int32_t>();
  if (t.turn_idx < 0) throw std::invalid_argument("turn_idx < 0");
  t.content = j.at("content").get<std::string>();
  t.tool_calls_json = j.value("tool_calls_json", "");
  t.turn_usage_json = j.value("turn_usage_json", "");
  t.job_usage = store::usage_totals::from_json(j.value("job_usage", ""));
  return t;
}

json to_json(const obs::timeline_entry& e) {
  json j = {{"is_mark", e.is_mark}, {"kind", e.kind}, {"start_ms", e.start_ms}, {"label", e.label}, {"attrs", e.attrs}};
  if (e.end_ms) j["end_ms"] = *e.end_ms;
  if (e.turn) j["turn"] = *e.turn;
  return j;
}

obs::timeline_entry timeline_entry_from_json(const json& j) {
  obs::timeline_entry e;
  e.is_mark = j.value("is_mark", false);
  e.kind = j.at("kind").get<std::string>();
  e.start_ms = j.at("start_ms").get<int64_t>();
  if (j.contains("end_ms")) e.end_ms = j["end_ms"].get<int64_t>();
  if (j.contains("turn")) e.turn = j["turn"].get<int32_t>();
  e.label = j.value("label", "");
  e.attrs = j.value("attrs", json::object());
  if (!e.attrs.is_object()) throw std::invalid_argument("attrs must be an object");
  return e;
}

obs::engine_sample engine_sample_from_json(const json& j) {
  obs::engine_sample s;
  s.at_ms = j.at("at_ms").get<int64_t>();
  s.tokens_per_s = j.value("tokens_per_s", 0.0);
  s.prompt_tokens_per_s = j.value("prompt_tokens_per_s", 0.0);
  s.batch_size = j.value("batch_size", int64_t(0));
  s.running = j.value("running", int64_t(0));
  s.waiting = j.value("waiting", int64_t(0));
  s.kv_blocks_used = j.value("kv_blocks_used", int64_t(0));
  s.kv_blocks_total = j.value("kv_blocks_total", int64_t(0));
  s.kv_blocks_parked = j.value("kv_blocks_parked", int64_t(0));
  s.kv_blocks_spilled = j.value("kv_blocks_spilled", int64_t(0));
  s.prefix_hit_rate = j.value("prefix_hit_rate", 0.0);
  return s;
}

std::optional<store::write_status> parse_write_status(const std::string& s) {
  for (auto w : {store::write_status::ok, store::write_status::fenced, store::write_status::not_found,
                 store::write_status::invalid, store::write_status::error})
    if (s == store::to_string(w)) return w;
  return std::nullopt;
}

const char* to_string(store::claim_outcome o) {
  switch (o) {
    case store::claim_outcome::claimed: return "claimed";
    case store::claim_outcome::busy: return "busy";
    case store::claim_outcome::not_claimable: return "not_claimable";
    case store::claim_outcome::not_found: return "not_found";
    case store::claim_outcome::poisoned: return "poisoned";
    case store::claim_outcome::error: return "error";
    case store::claim_outcome::held: return "held";
  }
  return "error";
}

std::optional<store::claim_outcome> parse_claim_outcome(const std::string& s) {
  for (auto o : {store::claim_outcome::claimed, store::claim_outcome::busy, store::claim_outcome::not_claimable,
                 store::claim_outcome::not_found, store::claim_outcome::poisoned, store::claim_outcome::error,
                 store::claim_outcome::held})
    if (s == to_string(o)) return o;
  return std::nullopt;
}

}  // namespace agentq::worker::protocol
