// POST /v1/worker/messages: remote workers' reads and fenced writes, applied to the job store
// (worker_protocol.h; the worker's side is worker/remote_control_plane.cpp).
#include "api/worker_protocol.h"

#include <spdlog/spdlog.h>

#include "api/reply.h"
#include "auth/keys.h"
#include "obs/obs_store.h"
#include "store/sqlite.h"
#include "store/store.h"
#include "util/crypto.h"
#include "util/json_depth.h"
#include "worker/control_plane.h"
#include "worker/protocol.h"

namespace agentq::api {

using json = nlohmann::json;
namespace proto = worker::protocol;
using store::write_status;

namespace {

json reply(const std::string& msg_id, write_status st, json result = json::object(), const std::string& error = {}) {
  json r = {{"msg_id", msg_id}, {"status", store::to_string(st)}, {"result", std::move(result)}};
  if (!error.empty()) r["error"] = error;
  return r;
}

// The writes to one job under its lease (fenced on the epoch by the store).
bool is_job_write(const std::string& kind) {
  for (const char* k : {"init_transcript", "commit_turn", "tool_result", "event", "require_action", "finish", "release",
                        "timeline", "timeline_close"})
    if (kind == k) return true;
  return false;
}

// The job's state without its content, for a reader that does not hold its lease: what a worker
// needs to decide about an entry it is not running (terminal? deleted? its priority).
store::job_row state_only(const store::job_row& r) {
  store::job_row o;
  o.id = r.id;
  o.status = r.status;
  o.priority = r.priority;
  o.attempts = r.attempts;
  o.lease_epoch = r.lease_epoch;
  o.lease_owner = r.lease_owner;
  o.lease_expires_ms = r.lease_expires_ms;
  o.created_ms = r.created_ms;
  o.started_ms = r.started_ms;
  o.finished_ms = r.finished_ms;
  o.updated_ms = r.updated_ms;
  o.deadline_ms = r.deadline_ms;
  o.deleted_ms = r.deleted_ms;
  o.store_content = r.store_content;
  return o;
}

std::string bearer_of(const http::request& req) {
  std::string h = req.header("authorization");
  if (h.size() > 7 && (h.compare(0, 7, "Bearer ") == 0 || h.compare(0, 7, "bearer ") == 0)) return h.substr(7);
  return {};
}

}  // namespace

std::unique_ptr<worker_protocol> worker_protocol::open(worker_protocol_options options, store::store& store,
                                                       obs::obs_store* obs, auth::key_store& keys,
                                                       const std::string& db_path, std::string* error) {
  try {
    auto db = std::make_unique<store::sqlite_db>(db_path, 5000);
    db->exec("PRAGMA journal_mode=WAL");
    db->prepare("SELECT count(*) FROM applied_messages").run();  // the store migrated it (0009)
    std::unique_ptr<worker_protocol> wp(new worker_protocol(std::move(options), store, obs, keys, std::move(db)));
    if (!wp->tokens_.reload(error)) return nullptr;  // NOTE: at start a bad file is fatal; later it is only logged
    return wp;
  } catch (const std::exception& e) {
    if (error) *error = std::string("opening applied_messages: ") + e.what();
    return nullptr;
  }
}

worker_protocol::worker_protocol(worker_protocol_options options, store::store& store, obs::obs_store* obs,
                                 auth::key_store& keys, std::unique_ptr<store::sqlite_db> db)
    : options_(std::move(options)),
      tokens_(options_.token, options_.tokens_file),
      store_(store),
      obs_(obs),
      keys_(keys),
      db_(std::move(db)) {}

worker_protocol::~worker_protocol() = default;

http::response worker_protocol::handle(const http::request& req) {
  // NOTE: only a worker token: a tenant's (or the admin's) API key is not a worker credential.
  tokens_.reload_if_changed();
  const auto scope = tokens_.ids_of(bearer_of(req));  // {} = the fleet-wide token: any worker id
  if (!scope)
    return http::error_response(http::error_kind::authentication,
                                "a worker token is required (Authorization: Bearer <--worker-token or this worker's "
                                "line of --worker-tokens-file>)");
  // NOTE: deeper JSON would overflow the stack when dumped (replies, applied_messages): refused.
  if (util::json_depth(req.body) > util::k_max_json_depth)
    return http::error_response(http::error_kind::invalid_request, "JSON nested too deeply", "messages");
  json body = json::parse(req.body, nullptr, false);
  if (!body.is_object() || !body.contains("messages") || !body["messages"].is_array())
    return http::error_response(http::error_kind::invalid_request, "expected {\"messages\": [...]}", "messages");
  const json& msgs = body["messages"];
  if (msgs.size() > size_t(options_.max_messages))
    return http::error_response(http::error_kind::invalid_request,
                                "at most " + std::to_string(options_.max_messages) + " messages per request", "messages");
  if (!scope->empty())
    for (const auto& m : msgs) {
      // NOTE: the whole request is refused, not the one message: a worker sending under another
      // id is misconfigured or hostile, and the 403 stops its claiming (remote_control_plane).
      // msg_id = "<worker_id of the process>:<incarnation>:<seq>": its id part must be in scope too,
      // or a replayed msg_id would hand out another worker's recorded reply.
      auto str = [&](const char* k) {
        return m.is_object() && m.contains(k) && m[k].is_string() ? m[k].get<std::string>() : std::string();
      };
      const std::string wid = str("worker_id"), mid = str("msg_id");
      const std::string mid_owner = mid.substr(0, mid.find(':'));
      bool covered = false, mid_covered = false;
      for (const auto& id : *scope) {
        covered = covered || worker_id_covered(id, wid);
        mid_covered = mid_covered || worker_id_covered(id, mid_owner);
      }
      if (!covered || !mid_covered)
        return http::error_response(http::error_kind::permission,
                                    "this worker token is not the token of worker '" + (covered ? mid_owner : wid) + "'",
                                    "worker_id");
    }
  json replies = json::array();
  for (const auto& m : msgs) replies.push_back(apply(m));
  return json_response(200, {{"replies", replies}});
}

json worker_protocol::apply(const json& m) {
  std::string msg_id;
  try {
    if (!m.is_object()) return reply("", write_status::invalid, json::object(), "a message is a JSON object");
    msg_id = m.value("msg_id", "");
    const int v = m.at("v").get<int>();
    if (v < options_.version - 1 || v > options_.version + 1)
      return reply(msg_id, write_status::invalid, {{"reason", "protocol"}},
                   "protocol version " + std::to_string(v) + " is not accepted: this control plane speaks " +
                       std::to_string(options_.version) + " and accepts " + std::to_string(options_.version - 1) +
                       ".." + std::to_string(options_.version + 1));
    const std::string kind = m.at("kind").get<std::string>();
    if (!proto::is_known_kind(kind))
      return reply(msg_id, write_status::invalid, {{"reason", "kind"}}, "unknown message kind '" + kind + "'");
    if (msg_id.empty()) return reply(msg_id, write_status::invalid, json::object(), "msg_id is required");
    const bool is_write = proto::is_recorded_kind(kind);
    if (is_write)
      if (auto r = recorded(msg_id)) {
        // NOTE: a claim's secret is not kept in applied_messages; a replayed claim looks it up again.
        // NOTE (the read fence): only while the claim is still the sender's lease. A replay after
        // the job moved on (released, fenced, claimed elsewhere, over) gets neither the job nor its
        // secret, but an error: the entry stays pending and a fresh claim decides.
        if (kind == "claim" && (*r)["result"].contains("job")) {
          const std::string job_id = m.value("job_id", "");
          if (!holds_lease(job_id, m.at("worker_id").get<std::string>(), (*r)["result"].value("epoch", int64_t(-1))))
            return reply(msg_id, write_status::error, {{"outcome", "error"}, {"reason", "lease"}},
                         "a replayed claim of " + job_id + " whose lease has moved on; claim it again");
          (*r)["result"]["secret"] = keys_.webhook_secret_for(job_id, (*r)["result"]["job"].value("tenant", ""));
        }
        return *r;
      }
    if (!options_.tokens_file.empty() && is_job_write(kind)) {
      // NOTE (per-worker tokens): the store fences on the epoch alone; here the epoch's lease must
      // also be the sender's, so a worker that learns another's epoch still cannot write its job.
      const std::string job_id = m.value("job_id", "");
      auto row = store_.get_job(job_id);
      if (row && row->lease_epoch == m.value("epoch", int64_t(0)) &&
          !worker_id_covered(m.at("worker_id").get<std::string>(), row->lease_owner))
        return reply(msg_id, write_status::fenced, {{"reason", "owner"}},
                     "job " + job_id + " is leased to another worker");
    }
    json r = apply_kind(kind, m);
    r["msg_id"] = msg_id;
    // NOTE: recorded after applying (another connection than the store's writer): a control plane
    // killed in between applies that message again on the worker's retry; only an event or a
    // timeline row can repeat then (turns, tool results, claims and terminal states are keyed).
    if (is_write && r.value("status", "") != "error") {
      json kept = r;
      if (kept["result"].is_object()) kept["result"].erase("secret");
      record(msg_id, m.value("job_id", ""), kept);
    }
    return r;
  } catch (const std::exception& e) {
    return reply(msg_id, write_status::invalid, json::object(), std::string("malformed message: ") + e.what());
  }
}

json worker_protocol::apply_kind(const std::string& kind, const json& m) {
  const std::string job_id = m.value("job_id", "");
  const int64_t epoch = m.value("epoch", int64_t(0));
  const std::string worker_id = m.at("worker_id").get<std::string>();
  const json body = m.value("body", json::object());
  const std::string msg_id = m.value("msg_id", "");
  auto done = [&](write_status st, json result = json::object()) { return reply(msg_id, st, std::move(result)); };

  if (kind == "claim") {
    auto c = store_.claim_job(job_id, worker_id, body.at("lease_ms").get<int64_t>(), body.at("max_attempts").get<int32_t>())
                 .get();
    json res = {{"outcome", proto::to_string(c.outcome)}};
    if (c.outcome == store::claim_outcome::claimed && c.won) {
      // What the worker needs to run the job, so it opens no database: the spec (the row), the
      // transcript so far, the recorded tool results, and the job key's signing secret.
      res["epoch"] = c.won->epoch;
      res["job"] = proto::to_json(c.won->job);
      json tr = json::array(), tools = json::array();
      for (const auto& row : store_.read_transcript(job_id)) tr.push_back(proto::to_json(row));
      for (const auto& o : store_.read_tool_results(job_id)) tools.push_back(proto::to_json(o));
      res["transcript"] = tr;
      res["tool_results"] = tools;
      res["secret"] = keys_.webhook_secret_for(job_id, c.won->job.tenant);
    }
    return done(c.outcome == store::claim_outcome::error ? write_status::error : write_status::ok, res);
  }
  if (kind == "fence") return done(write_status::ok, {{"jobs", store_.fence_worker_leases(worker_id).get()}});
  if (kind == "renew") {
    std::vector<std::pair<std::string, int64_t>> jobs;
    std::vector<std::string> not_owned;
    for (const auto& j : body.at("jobs")) {
      std::string id = j.at(0).get<std::string>();
      // NOTE (per-worker tokens): only the sender's own leases are renewed; keeping another worker's
      // lease alive would hold its jobs back from failover. Another's job is reported lost.
      if (!options_.tokens_file.empty())
        if (auto row = store_.get_job(id); row && !worker_id_covered(worker_id, row->lease_owner)) {
          not_owned.push_back(std::move(id));
          continue;
        }
      jobs.emplace_back(std::move(id), j.at(1).get<int64_t>());
    }
    auto lost = store_.renew_leases(std::move(jobs), body.at("lease_ms").get<int64_t>()).get();
    lost.insert(lost.end(), not_owned.begin(), not_owned.end());
    return done(write_status::ok, {{"lost", lost}});
  }
  if (kind == "init_transcript") {
    std::vector<store::transcript_row> rows;
    for (const auto& r : body.at("rows")) rows.push_back(proto::transcript_row_from_json(r));
    return done(store_.init_transcript(job_id, epoch, std::move(rows)).get());
  }
  if (kind == "commit_turn") return done(store_.commit_turn(job_id, epoch, proto::turn_commit_from_json(body)).get());
  if (kind == "tool_result")
    return done(store_.record_tool_result(job_id, epoch, proto::tool_output_from_json(body.at("output")),
                                          body.value("name", ""))
                    .get());
  if (kind == "event")
    return done(store_.append_event(job_id, epoch, body.at("type").get<std::string>(), body.at("data").get<std::string>())
                    .get());
  if (kind == "require_action")
    return done(store_.require_action(job_id, epoch, body.at("pending").get<std::string>()).get());
  if (kind == "finish") {
    auto st = store::parse_job_status(body.at("status").get<std::string>());
    if (!st || !store::is_terminal(*st)) return done(write_status::invalid);
    return done(store_.finish_job(job_id, epoch, *st, body.value("result", ""), body.value("error", ""),
                                  store::usage_totals::from_json(body.value("usage", "")))
                    .get());
  }
  if (kind == "release") return done(store_.release_job(job_id, epoch).get());
  if (kind == "timeline" || kind == "timeline_close") {
    if (!obs_) return done(write_status::ok);  // no timelines kept here
    bool ok = kind == "timeline" ? obs_->record(job_id, epoch, proto::timeline_entry_from_json(body.at("entry")))
                                 : obs_->close_open(job_id, epoch, body.at("kind").get<std::string>(),
                                                    body.at("end_ms").get<int64_t>());
    return done(ok ? write_status::ok : write_status::fenced);
  }
  if (kind == "engine_sample") {
    if (!obs_) return done(write_status::ok);
    bool ok = obs_->write_sample(worker_id, proto::engine_sample_from_json(body.at("sample")),
                                 body.value("families", json::object()));
    // NOTE: the samplers of remote workers do not prune; the control plane does, once a minute.
    const int64_t now = store::now_ms();
    std::lock_guard lock(mu_);
    if (now >= next_sample_prune_ms_) {
      obs_->prune(now - 3600 * 1000);
      next_sample_prune_ms_ = now + 60000;
    }
    return done(ok ? write_status::ok : write_status::error);
  }
  // --- reads ---
  // NOTE (the read fence): a job's content — its request, result, error, transcript and tool
  // results — goes only to the worker holding its current lease (running, leased to the sender's
  // id, the message's epoch = the lease's; protocol 2 sent epoch 0 on reads, taken as "current").
  // Anyone else gets the job's state alone (`job`) or `fenced` (`transcript`, `tool_results`).
  // With per-worker tokens the sender's id is the token's; with the fleet-wide token it is what the
  // sender says. job_models, cancelled_among and live_kv_keys carry no content and stay open.
  const int64_t read_epoch = m.at("v").get<int>() <= 2 && epoch == 0 ? -1 : epoch;  // -1: any
  if (kind == "job") {
    auto row = store_.get_job(job_id);
    if (!row) return done(write_status::not_found);
    if (holds_lease(*row, worker_id, read_epoch)) return done(write_status::ok, {{"job", proto::to_json(*row)}});
    return done(write_status::ok, {{"job", proto::to_json(state_only(*row))}, {"state_only", true}});
  }
  if (kind == "job_models") {
    auto models = store_.job_models(body.at("ids").get<std::vector<std::string>>());
    return done(write_status::ok, {{"models", models}});
  }
  if ((kind == "transcript" || kind == "tool_results") && !holds_lease(job_id, worker_id, read_epoch))
    return reply(msg_id, write_status::fenced, {{"reason", "lease"}},
                 "job " + job_id + " is not leased to worker " + worker_id + " at epoch " + std::to_string(epoch));
  if (kind == "transcript") {
    json tr = json::array();
    for (const auto& row : store_.read_transcript(job_id)) tr.push_back(proto::to_json(row));
    return done(write_status::ok, {{"transcript", tr}});
  }
  if (kind == "tool_results") {
    json tools = json::array();
    for (const auto& o : store_.read_tool_results(job_id)) tools.push_back(proto::to_json(o));
    return done(write_status::ok, {{"tool_results", tools}});
  }
  if (kind == "cancelled_among")
    return done(write_status::ok, {{"ids", store_.cancelled_among(body.at("ids").get<std::vector<std::string>>())}});
  if (kind == "live_kv_keys") return done(write_status::ok, {{"keys", worker::live_kv_keys_of(store_)}});
  return done(write_status::invalid);
}

bool worker_protocol::holds_lease(const store::job_row& row, const std::string& worker_id, int64_t epoch) {
  return row.status == store::job_status::running && (epoch < 0 || row.lease_epoch == epoch) &&
         !row.lease_owner.empty() && worker_id_covered(worker_id, row.lease_owner);
}

bool worker_protocol::holds_lease(const std::string& job_id, const std::string& worker_id, int64_t epoch) {
  auto row = store_.get_job(job_id);
  return row && holds_lease(*row, worker_id, epoch);
}

std::optional<json> worker_protocol::recorded(const std::string& msg_id) {
  std::lock_guard lock(mu_);
  auto s = db_->prepare("SELECT reply FROM applied_messages WHERE msg_id = ?");
  s.bind(1, msg_id);
  if (!s.step()) return std::nullopt;
  json r = json::parse(s.col_text(0), nullptr, false);
  if (r.is_discarded()) return std::nullopt;
  return r;
}

void worker_protocol::record(const std::string& msg_id, const std::string& job_id, const json& r) {
  const int64_t now = store::now_ms();
  std::lock_guard lock(mu_);
  try {
    db_->prepare("INSERT OR IGNORE INTO applied_messages(msg_id, job_id, reply, created_ms) VALUES (?,?,?,?)")
        .bind_all(msg_id, job_id, r.dump(-1, ' ', false, json::error_handler_t::replace), now)
        .run();
    if (now >= next_prune_ms_) {
      db_->prepare("DELETE FROM applied_messages WHERE created_ms < ?").bind(1, now - options_.applied_retention_ms).run();
      next_prune_ms_ = now + 60000;
    }
  } catch (const std::exception& e) {
    spdlog::warn("worker protocol: recording message {} failed: {}", msg_id, e.what());
  }
}

void install_worker_protocol_routes(http::router& r, worker_protocol& wp) {
  r.add("POST", proto::k_path, [&wp](http::request& req) { return wp.handle(req); });
}

}  // namespace agentq::api
