// The SQLite job store: a writer thread with group commit (each op in a savepoint inside one
// IMMEDIATE transaction; futures complete after COMMIT; submits first: write_queue.h), a pool of
// reader connections, and the WAL checkpointer's thread (checkpointer.h).
#include "store/store.h"

#include <pthread.h>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <deque>
#include <filesystem>
#include <functional>
#include <mutex>
#include <thread>
#include <unordered_map>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "store/checkpointer.h"
#include "store/conn.h"
#include "store/deletion.h"
#include "store/job_id.h"
#include "store/migrations.h"
#include "store/running_limit.h"
#include "util/crypto.h"
#include "store/sqlite.h"
#include "store/write_queue.h"
#include <agentq/thread_class.h>

namespace agentq::store {

using json = nlohmann::json;

// ---------------------------------------------------------------------------
// Small enums and helpers

const char* to_string(job_status s) {
  switch (s) {
    case job_status::queued: return "queued";
    case job_status::running: return "running";
    case job_status::requires_action: return "requires_action";
    case job_status::completed: return "completed";
    case job_status::failed: return "failed";
    case job_status::cancelled: return "cancelled";
    case job_status::incomplete: return "incomplete";
  }
  return "?";
}

std::optional<job_status> parse_job_status(std::string_view s) {
  for (auto st : {job_status::queued, job_status::running, job_status::requires_action, job_status::completed,
                  job_status::failed, job_status::cancelled, job_status::incomplete})
    if (s == to_string(st)) return st;
  return std::nullopt;
}

bool is_terminal(job_status s) {
  return s == job_status::completed || s == job_status::failed || s == job_status::cancelled ||
         s == job_status::incomplete;
}

const char* to_string(job_priority p) {
  switch (p) {
    case job_priority::high: return "high";
    case job_priority::normal: return "normal";
    case job_priority::low: return "low";
    case job_priority::batch: return "batch";
  }
  return "?";
}

std::optional<job_priority> parse_job_priority(std::string_view s) {
  for (auto p : {job_priority::high, job_priority::normal, job_priority::low, job_priority::batch})
    if (s == to_string(p)) return p;
  return std::nullopt;
}

const char* to_string(write_status s) {
  switch (s) {
    case write_status::ok: return "ok";
    case write_status::fenced: return "fenced";
    case write_status::not_found: return "not_found";
    case write_status::invalid: return "invalid";
    case write_status::error: return "error";
  }
  return "?";
}

int64_t now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// NOTE: written directly, not through a json object (it is made on the writer thread for every job
// end): the bytes nlohmann's dump() gives, keys in its std::map order (unit.store checks they match).
std::string usage_totals::to_json() const {
  char buf[320];
  int n = std::snprintf(buf, sizeof buf,
                        "{\"cached_tokens\":%lld,\"completion_tokens\":%lld,\"completion_tokens_details\":"
                        "{\"accepted_prediction_tokens\":%lld,\"rejected_prediction_tokens\":%lld},"
                        "\"computed_tokens\":%lld,\"prompt_tokens\":%lld,\"turns\":%d}",
                        static_cast<long long>(cached_tokens), static_cast<long long>(completion_tokens),
                        static_cast<long long>(accepted_prediction_tokens),
                        static_cast<long long>(rejected_prediction_tokens), static_cast<long long>(computed_tokens),
                        static_cast<long long>(prompt_tokens), static_cast<int>(turns));
  return std::string(buf, static_cast<size_t>(n));
}

std::string turn_event_json(const turn_commit& t) {
  json d = {{"turn", t.turn_idx}, {"usage", json::parse(t.turn_usage_json.empty() ? "{}" : t.turn_usage_json, nullptr, false)}};
  if (!t.tool_calls_json.empty()) d["tool_calls"] = json::parse(t.tool_calls_json, nullptr, false);
  return d.dump();
}

void set_turn_usage(turn_commit& t, const json& usage) {
  t.turn_usage_json = usage.dump();
  // NOTE: dump() then parse() gives back the same value (numbers round-trip), so this equals
  // turn_event_json(t) without its parse of the usage.
  json d = {{"turn", t.turn_idx}, {"usage", usage}};
  if (!t.tool_calls_json.empty()) d["tool_calls"] = json::parse(t.tool_calls_json, nullptr, false);
  t.event_json = d.dump();
}

void set_turn_usage(turn_commit& t, const turn_usage_fields& u) {
  // NOTE: the keys sorted as nlohmann's std::map-backed object dumps them; the string and the
  // doubles through nlohmann's own serializer (its escaping, its shortest round-trip numbers).
  std::string& o = t.turn_usage_json;
  o.clear();
  o.reserve(320);
  auto num = [&o](const char* key, int64_t v) {
    o += key;
    o += std::to_string(v);
  };
  auto real = [&o](const char* key, double v) {
    o += key;
    o += json(v).dump();
  };
  num("{\"cached_tokens\":", u.cached_tokens);
  num(",\"completion_tokens\":", u.completion_tokens);
  num(",\"completion_tokens_details\":{\"accepted_prediction_tokens\":", u.accepted_prediction_tokens);
  num(",\"rejected_prediction_tokens\":", u.rejected_prediction_tokens);
  num("},\"computed_tokens\":", u.computed_tokens);
  real(",\"decode_ms\":", u.decode_ms);
  o += ",\"finish\":";
  o += json(std::string(u.finish)).dump();
  real(",\"prefill_ms\":", u.prefill_ms);
  num(",\"prompt_tokens\":", u.prompt_tokens);
  real(",\"queue_ms\":", u.queue_ms);
  o += '}';
  // The event: {"tool_calls": ..., "turn": N, "usage": ...} in that (sorted) order; the tool calls
  // parsed and dumped again, as turn_event_json does.
  t.event_json = "{";
  if (!t.tool_calls_json.empty()) {
    t.event_json += "\"tool_calls\":";
    t.event_json += json::parse(t.tool_calls_json, nullptr, false).dump();
    t.event_json += ',';
  }
  t.event_json += "\"turn\":" + std::to_string(t.turn_idx) + ",\"usage\":" + o + "}";
}

usage_totals usage_totals::from_json(std::string_view text) {
  usage_totals u;
  if (text.empty() || text == "{}") return u;  // a job before its first turn: no parse
  json j = json::parse(text, nullptr, false);
  if (!j.is_object()) return u;
  u.prompt_tokens = j.value("prompt_tokens", int64_t{0});
  u.cached_tokens = j.value("cached_tokens", int64_t{0});
  u.computed_tokens = j.value("computed_tokens", int64_t{0});
  u.completion_tokens = j.value("completion_tokens", int64_t{0});
  if (auto d = j.find("completion_tokens_details"); d != j.end() && d->is_object()) {
    u.accepted_prediction_tokens = d->value("accepted_prediction_tokens", int64_t{0});
    u.rejected_prediction_tokens = d->value("rejected_prediction_tokens", int64_t{0});
  }
  u.turns = j.value("turns", 0);
  return u;
}

namespace {

// NOTE: a macro, not a const char*: statements built with it stay string literals, which the
// connection's statement cache finds by address (conn::stmt) instead of building and hashing a
// std::string per call.
#define AQ_JOB_COLS                                                                                          \
  "id, tenant, status, priority, request_json, result_json, error, usage_json, pending_json, attempts, "   \
  "lease_epoch, lease_owner, lease_expires_ms, COALESCE(idempotency_key,''), request_hash, created_ms, "   \
  "started_ms, finished_ms, updated_ms, deadline_ms, deleted_ms, store_content"
#define AQ_TERMINAL_SQL "('completed','failed','cancelled','incomplete')"
// list_jobs' page after the cursor (?3 created_ms, ?4 id; newest first, ?5 rows). `created_ms <= ?3`
// is written apart so that it bounds an index range; the OR alone would not.
#define AQ_LIST_PAGE_SQL \
  "deleted_ms=0 AND created_ms <= ?3 AND (created_ms < ?3 OR id < ?4) ORDER BY created_ms DESC, id DESC LIMIT ?5"

job_row read_job(const sqlite_stmt& s) {
  job_row j;
  j.id = s.col_text(0);
  j.tenant = s.col_text(1);
  j.status = parse_job_status(s.col_text(2)).value_or(job_status::failed);
  j.priority = static_cast<job_priority>(std::clamp<int64_t>(s.col_int(3), 0, 3));
  j.request_json = s.col_text(4);
  j.result_json = s.col_text(5);
  j.error = s.col_text(6);
  j.usage_json = s.col_text(7);
  j.pending_json = s.col_text(8);
  j.attempts = static_cast<int32_t>(s.col_int(9));
  j.lease_epoch = s.col_int(10);
  j.lease_owner = s.col_text(11);
  j.lease_expires_ms = s.col_int(12);
  j.idempotency_key = s.col_text(13);
  j.request_hash = s.col_text(14);
  j.created_ms = s.col_int(15);
  j.started_ms = s.col_int(16);
  j.finished_ms = s.col_int(17);
  j.updated_ms = s.col_int(18);
  j.deadline_ms = s.col_int(19);
  j.deleted_ms = s.col_int(20);
  j.store_content = s.col_int(21) != 0;
  return j;
}

std::optional<job_row> select_job(conn& c, const std::string& id) {
  auto& s = c.stmt("SELECT " AQ_JOB_COLS " FROM jobs WHERE id=?");
  s.bind(1, id);
  if (!s.step()) return std::nullopt;
  return read_job(s);
}

// An event of the job; tenant: the job's (the caller read or wrote its row), or nullptr (read here).
// NOTE: with the tenant given, a one-row INSERT ... VALUES: `INSERT ... SELECT ... FROM jobs` reads
// the job's row (two b-tree seeks), and SQLite runs a statement that may write several rows in a
// statement journal (a copy of every page it writes) inside the writer's transaction.
void insert_event(conn& c, const std::string& job_id, const std::string* tenant, std::string_view type,
                  const std::string& data, int64_t now) {
  if (tenant) {
    c.stmt("INSERT INTO job_events(job_id, tenant, type, data_json, created_ms) VALUES (?,?,?,?,?)")
        .bind_all_static(job_id, *tenant, type, data, now)  // NOTE: no copies; one expression with run()
        .run();
  } else {
    c.stmt("INSERT INTO job_events(job_id, tenant, type, data_json, created_ms) SELECT id, tenant, ?, ?, ? FROM jobs "
           "WHERE id=?")
        .bind_all(type, data, now, job_id)
        .run();
  }
  c.wrote |= conn::k_wrote_event;
}

// s as a JSON string, quoted: the bytes nlohmann's dump() gives (printable ASCII without '"' or '\\'
// as it is; anything else through nlohmann, which escapes it, or throws on invalid UTF-8 as before).
void append_json_string(std::string& out, std::string_view s) {
  for (unsigned char ch : s)
    if (ch < 0x20 || ch >= 0x7f || ch == '"' || ch == '\\') {
      out += json(std::string(s)).dump();
      return;
    }
  out += '"';
  out += s;
  out += '"';
}

// A status event's data: {"status":"..."} with extra's members, keys in nlohmann's (sorted) order.
// NOTE: the common shapes (every submit, claim and job end) are made without a json object, the same
// bytes (unit.store checks them against nlohmann's dump); statuses are plain ASCII words.
std::string status_json(job_status st, const json& extra = json()) {
  if (extra.is_object() && !extra.empty()) {
    json d = extra;
    d["status"] = to_string(st);
    return d.dump();
  }
  std::string data = "{\"status\":\"";
  data += to_string(st);
  data += "\"}";
  return data;
}
// {"error":"...","status":"..."}: a failed or incomplete end.
std::string status_json_error(job_status st, std::string_view error) {
  std::string data = "{\"error\":";
  append_json_string(data, error);
  data += ",\"status\":\"";
  data += to_string(st);
  data += "\"}";
  return data;
}

// The webhook scan's pre-filter on a job's stored request (read_webhook_candidates, store.h), an SQL
// expression over jobs.request_json. Its C++ twin, may_want_delivery below, decides a job end's wake
// of the scan (the worker evaluates it at the claim): the two must agree (unit.webhook_scan).
#define AQ_MAY_WANT_DELIVERY_SQL                                                                 \
  "(instr(request_json, '\"webhook\"')>0 OR instr(request_json, '\"responses\"')>0 OR " \
  "instr(request_json, '\\u')>0)"

}  // namespace

bool may_want_delivery(std::string_view request_json) {
  return request_json.find("\"webhook\"") != std::string_view::npos ||
         request_json.find("\"responses\"") != std::string_view::npos ||
         request_json.find("\\u") != std::string_view::npos;
}

namespace {

// wake_scan: false when the caller knows the job's request cannot want a delivery (the pre-filter
// above said so): the commit then does not wake the webhook scan, which reads the event on its next
// pass all the same (issue 29: a wake per job end was a futex call and a scan pass per job).
void insert_status_event(conn& c, const std::string& job_id, const std::string* tenant, job_status st,
                         const std::string& data, int64_t now, bool wake_scan = true) {
  insert_event(c, job_id, tenant, "status", data, now);
  if (wake_scan && (is_terminal(st) || st == job_status::requires_action)) c.wrote |= conn::k_wrote_webhook_status;
}

void insert_outbox(conn& c, const std::string& kind, const std::string& job_id, const std::string& payload,
                   const std::string& target, int64_t now) {
  auto& s = c.stmt(
      "INSERT INTO outbox(kind, job_id, payload_json, target, next_attempt_ms, created_ms) VALUES (?,?,?,?,0,?)");
  s.bind_all_static(kind, job_id, payload, target, now).run();  // NOTE: no copies; one expression with run()
  c.wrote |= conn::k_wrote_outbox;
}

// seq: the row's place when the caller knows it (a job's first rows, written after the check that it
// has none: a MAX(seq) probe less per row); -1 = after the job's last row. turn_idx: r's unless given.
void insert_transcript(conn& c, const std::string& job_id, const transcript_row& r, int64_t now, int64_t seq = -1,
                       std::optional<int32_t> turn_idx = std::nullopt) {
#define AQ_INSERT_TRANSCRIPT                                                                              \
  "INSERT INTO transcript(job_id, seq, turn_idx, role, content, tool_calls_json, tool_call_id, name, usage_json, " \
  "created_ms) VALUES "
  auto& s = seq >= 0 ? c.stmt(AQ_INSERT_TRANSCRIPT "(?1,?10,?2,?3,?4,?5,?6,?7,?8,?9)")
                     : c.stmt(AQ_INSERT_TRANSCRIPT
                              "(?1, (SELECT COALESCE(MAX(seq),-1)+1 FROM transcript WHERE job_id=?1), ?2,?3,?4,?5,?6,?7,?8,?9)");
#undef AQ_INSERT_TRANSCRIPT
  const int32_t turn = turn_idx.value_or(r.turn_idx);
  // NOTE: no copies of the texts (the content may be long): every bound text outlives the run.
  s.bind_all_static(job_id, turn, r.role, r.content, r.tool_calls_json, r.tool_call_id, r.name, r.usage_json, now);
  if (seq >= 0) s.bind(10, seq);
  s.run();
}

// The job is ours: running at this epoch.
bool fence_ok(conn& c, const std::string& job_id, int64_t epoch) {
  auto& s = c.stmt("SELECT 1 FROM jobs WHERE id=? AND lease_epoch=? AND status='running'");
  s.bind_all(job_id, epoch);
  return s.step();
}
// The same, with the job's tenant (for its events); nullopt when fenced.
std::optional<std::string> fenced_tenant(conn& c, const std::string& job_id, int64_t epoch) {
  auto& s = c.stmt("SELECT tenant FROM jobs WHERE id=? AND lease_epoch=? AND status='running'");
  s.bind_all(job_id, epoch);
  if (!s.step()) return std::nullopt;
  return s.col_text(0);
}

// A publish row's payload: {"priority": N[, "model": M]} (the model routes it: queue.cpp relay_once),
// nlohmann's bytes ("model" sorts first) made directly (every submit).
std::string priority_payload(job_priority p, const std::string& model = {}) {
  std::string out = "{";
  if (!model.empty()) {
    out += "\"model\":";
    append_json_string(out, model);
    out += ',';
  }
  out += "\"priority\":";
  out += std::to_string(static_cast<int>(p));
  out += '}';
  return out;
}

// The bodies of init_transcript, commit_turn and finish_job, shared with commit_step.

// fenced: the caller checked the fence already (apply_step). n_written (when given): the number of
// rows written as the job's first (its transcript was empty), else -1.
write_status apply_init_transcript(conn& c, const std::string& job_id, int64_t epoch,
                                   const std::vector<transcript_row>& input, bool fenced = false,
                                   int64_t* n_written = nullptr) {
  if (n_written) *n_written = -1;
  if (!fenced && !fence_ok(c, job_id, epoch)) return write_status::fenced;
  auto& s = c.stmt("SELECT EXISTS(SELECT 1 FROM transcript WHERE job_id=?)");
  s.bind(1, job_id);
  s.step();
  if (s.col_int(0) > 0) return write_status::ok;
  int64_t now = c.now();
  for (size_t i = 0; i < input.size(); ++i) insert_transcript(c, job_id, input[i], now, static_cast<int64_t>(i), -1);
  if (n_written) *n_written = static_cast<int64_t>(input.size());
  return write_status::ok;
}

// update_job: write the job's usage totals; false when the job's end follows in the same step
// (apply_finish writes them, and the step is fenced already): one UPDATE of the job row less.
// tenant: the job's when the caller has it (insert_event), else nullptr. next_seq: the row's seq when
// this transaction wrote the job's first rows just before (no turn of it can exist yet), else -1.
write_status apply_commit_turn(conn& c, const std::string& job_id, int64_t epoch, const turn_commit& t,
                               bool update_job = true, const std::string* tenant = nullptr, int64_t next_seq = -1) {
  int64_t now = c.now();
  bool exists = false;
  if (next_seq < 0) {
    auto& s = c.stmt("SELECT 1 FROM transcript WHERE job_id=? AND turn_idx=? AND role='assistant'");
    s.bind_all(job_id, t.turn_idx);
    exists = s.step();
  }
  if (update_job) {
    auto& u = c.stmt("UPDATE jobs SET usage_json=?, updated_ms=? WHERE id=? AND lease_epoch=? AND status='running'");
    u.bind_all_static(t.job_usage.to_json(), now, job_id, epoch).run();  // NOTE: one expression: the temporary lives
    if (c.db.changes() == 0) return write_status::fenced;
  }
  if (exists) return write_status::ok;
  transcript_row r;
  r.turn_idx = t.turn_idx;
  r.role = "assistant";
  r.content = t.content;
  r.tool_calls_json = t.tool_calls_json;
  r.usage_json = t.turn_usage_json;
  insert_transcript(c, job_id, r, now, next_seq);
  insert_event(c, job_id, tenant, "turn", t.event_json.empty() ? turn_event_json(t) : t.event_json, now);
  return write_status::ok;
}

write_status apply_finish(conn& c, const std::string& job_id, int64_t epoch, const job_end& e,
                          const std::string* tenant = nullptr) {
  int64_t now = c.now();
  // NOTE: the end wakes the webhook scan only when the job may want a delivery: the caller's flag
  // (the worker had the request at its claim). Session 32 read it here with RETURNING, which costs a
  // third of this UPDATE's time on the writer (SQLite gathers RETURNING rows in an ephemeral table).
  auto& u = c.stmt("UPDATE jobs SET status=?1, result_json=?2, error=?3, usage_json=?4, finished_ms=?5, "
                   "updated_ms=?5, lease_expires_ms=0 WHERE id=?6 AND lease_epoch=?7 AND status='running'");
  // NOTE: bound without copies (the result may be long): the usage's text must outlive the run.
  const std::string usage = e.usage.to_json();
  u.bind_all_static(to_string(e.status), e.result_json, e.error, usage, now, job_id, epoch).run();
  if (c.db.changes() == 0) return write_status::fenced;
  insert_status_event(c, job_id, tenant, e.status,
                      e.error.empty() ? status_json(e.status) : status_json_error(e.status, e.error), now,
                      e.may_want_delivery);
  return write_status::ok;
}

// claim_job's body (store.h): one job's claim inside the writer's transaction. limit: the store's
// tenant_max_running.
claim_result apply_claim(conn& c, const std::string& job_id, const std::string& worker_id, int64_t lease_ms,
                         int32_t max_attempts, int64_t limit) {
  claim_result r;
  int64_t now = c.now();
  auto j = select_job(c, job_id);
  if (!j) {
    r.outcome = claim_outcome::not_found;
    return r;
  }
  if (j->status != job_status::queued && j->status != job_status::running) {
    r.outcome = claim_outcome::not_claimable;
    return r;
  }
  if (j->status == job_status::running && j->lease_expires_ms > now) {
    r.outcome = claim_outcome::busy;
    return r;
  }
  // NOTE: before the poison check: a hold is not a delivery (attempts and epoch stay). A running
  // job with an expired lease is already counted in its tenant's running jobs.
  if (limit > 0 && j->status == job_status::queued) {
    auto v = running_limit::check(c, job_id, j->tenant, limit);
    if (!v.admit) {
      running_limit::hold(c, job_id, j->tenant, v, limit, now);
      r.outcome = claim_outcome::held;
      return r;
    }
  }
  if (max_attempts > 0 && j->attempts + 1 > max_attempts) {
    std::string reason = "poison job: delivered " + std::to_string(j->attempts) +
                         " times without finishing (max " + std::to_string(max_attempts) + ")";
    auto& u = c.stmt("UPDATE jobs SET status='failed', error=?1, finished_ms=?2, updated_ms=?2, "
                     "lease_expires_ms=0 WHERE id=?3 AND status NOT IN " AQ_TERMINAL_SQL);
    u.bind_all(reason, now, job_id).run();
    insert_status_event(c, job_id, &j->tenant, job_status::failed, status_json_error(job_status::failed, reason),
                        now);
    running_limit::refill_for_job(c, job_id, limit, now);
    r.outcome = claim_outcome::poisoned;
    return r;
  }
  auto& u = c.stmt(
      "UPDATE jobs SET status='running', lease_epoch=lease_epoch+1, lease_owner=?1, lease_expires_ms=?2, "
      "attempts=attempts+1, started_ms=CASE WHEN started_ms=0 THEN ?3 ELSE started_ms END, updated_ms=?3, hold=0 "
      "WHERE id=?4 AND status IN ('queued','running')");
  u.bind_all_static(worker_id, now + lease_ms, now, job_id).run();  // NOTE: no copies; one expression
  // NOTE: the row after the UPDATE is made from the one read above (same transaction; no
  // trigger changes a column) rather than read back: one SELECT of the whole row (request
  // included) less per claim on the writer. unit.store checks both are equal.
  std::optional<job_row> after = std::move(j);
  if (c.db.changes() == 1) {
    after->status = job_status::running;
    after->lease_epoch += 1;
    after->lease_owner = worker_id;
    after->lease_expires_ms = now + lease_ms;
    after->attempts += 1;
    if (after->started_ms == 0) after->started_ms = now;
    after->updated_ms = now;
  } else {
    after = select_job(c, job_id);
  }
  // NOTE: nlohmann's bytes for {"worker", "epoch", "attempt"} merged with the status, keys sorted.
  std::string data = "{\"attempt\":" + std::to_string(after->attempts) +
                     ",\"epoch\":" + std::to_string(after->lease_epoch) + ",\"status\":\"running\",\"worker\":";
  append_json_string(data, worker_id);
  data += '}';
  insert_status_event(c, job_id, &after->tenant, job_status::running, data, now);
  r.outcome = claim_outcome::claimed;
  r.won = lease{job_id, after->lease_epoch, std::move(*after)};
  return r;
}

// commit_step's body (one job's step, fenced whole): also each item of commit_steps.
write_status apply_step(conn& c, const std::string& job_id, int64_t epoch, const step_commit& step, int64_t limit) {
  // NOTE: fenced here or not at all: the parts' own checks (epoch, status running) cannot
  // change inside the transaction, so a step is written whole or not.
  const auto tenant = fenced_tenant(c, job_id, epoch);
  if (!tenant) return write_status::fenced;
  write_status ws = write_status::ok;
  int64_t n_first = -1;  // rows written just now as the job's first: its turn's row comes next
  if (!step.input.empty()) ws = apply_init_transcript(c, job_id, epoch, step.input, true, &n_first);
  if (ws == write_status::ok && step.turn)
    ws = apply_commit_turn(c, job_id, epoch, *step.turn, !step.end, &*tenant, n_first);
  if (ws == write_status::ok && step.end) {
    ws = apply_finish(c, job_id, epoch, *step.end, &*tenant);
    if (ws == write_status::ok) running_limit::refill_for_job(c, job_id, limit, c.now());
  }
  return ws;
}

// A steady clock in us (the writer's linger rule; unaffected by store_options::clock, a test's fake).
int64_t steady_us() {
  return std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

// ---------------------------------------------------------------------------

class sqlite_store final : public store {
 public:
  explicit sqlite_store(store_options o) : options_(std::move(o)) {}
  ~sqlite_store() override {
    {
      std::lock_guard lock(mu_);
      stopping_ = true;
    }
    cv_.notify_all();
    if (writer_.joinable()) writer_.join();
    if (checkpointer_)
      spdlog::debug("store: {} write ops in {} transactions; WAL checkpoints: {} passes, {} tails, {} backstops",
                    n_write_ops_.load(), n_transactions_.load(), checkpointer_->n_passes(), checkpointer_->n_tails(),
                    checkpointer_->n_backstop());
  }

  bool open(std::string* error) {
    if (!options_.clock) options_.clock = [] { return now_ms(); };
    try {
      // NOTE: through the WAL-buffering VFS (wal_buffer_vfs.h): a commit's WAL frames in one write.
      writer_conn_ = std::make_unique<conn>(options_.path, options_.busy_timeout_ms, options_.clock, true);
      // NOTE: the writer's group of submits waits while it waits for another connection's write lock
      // (a timeline or webhook commit): poll finely rather than SQLite's 1, 2, 5, 10 ... ms sleeps
      // (session 21: one such sleep measured 64 ms).
      writer_conn_->db.set_fine_busy_wait(options_.busy_timeout_ms);
      std::string why;
      if (!deletion::ensure_incremental_vacuum(writer_conn_->db, &why))
        spdlog::warn("store: incremental auto-vacuum not enabled yet ({}); retried at the next start", why);
      if (!migrate(writer_conn_->db, latest_schema_version(), error)) return false;
      for (int i = 0; i < std::max(1, options_.n_readers); ++i)
        readers_.push_back(std::make_unique<conn>(options_.path, options_.busy_timeout_ms, options_.clock));
      checkpointer_ = std::make_unique<wal_checkpointer>(options_.path, options_.busy_timeout_ms);
      checkpointer_->attach(writer_conn_->db);
    } catch (const sqlite_error& e) {
      *error = e.what();
      return false;
    }
    linger_policy linger;
    linger.linger_us = std::max<int32_t>(0, options_.background_linger_us);
    linger.recent_us = 10 * linger.linger_us;  // "submits arrive": one taken within the last 10 lingers
    queue_ = write_queue<write_op>(
        options_.n_background_shared > 0 ? static_cast<size_t>(options_.n_background_shared) : SIZE_MAX, linger);
    writer_ = std::thread([this] {
      util::name_thread("aq-db-writer");  // per-thread profiles name it
      writer_loop();
    });
    return true;
  }

  // --- write path ------------------------------------------------------------

  struct write_op {
    std::function<void(conn&)> apply;          // runs inside the group's transaction (run_batch); may throw
    std::function<void(bool committed)> done;  // after COMMIT (or failure)
  };

  // Queue fn (T(conn&)) for the writer; done gets fn's value once durable, else fail_value (on the
  // writer thread, after the COMMIT). cls: latency for the writes a client's request waits on
  // (submit, cancel, tool outputs): they go into the next transaction first (store/write_queue.h).
  template <class T, class F>
  void submit_then(F fn, T fail_value, std::function<void(T)> done, op_class cls = op_class::background) {
    auto res = std::make_shared<std::optional<T>>();
    write_op op;
    op.apply = [fn = std::move(fn), res](conn& c) mutable { *res = fn(c); };
    op.done = [done = std::move(done), res, fail_value = std::move(fail_value)](bool committed) mutable {
      if (committed && res->has_value())
        done(std::move(**res));
      else
        done(std::move(fail_value));
    };
    bool wake;
    {
      std::lock_guard lock(mu_);
      queue_.push(std::move(op), cls);
      // NOTE: a lingering writer waits for a submit (or a backlog), not for one more background op.
      wake = writer_idle_ && (!writer_lingering_ || cls == op_class::latency ||
                              queue_.n_background() >= queue_.linger().n_background_max);
    }
    // NOTE: only a writer waiting on the condition variable needs the futex wake; one in a batch
    // takes the queue when it loops (issue 29: a notify per op was a syscall per submit).
    if (wake) cv_.notify_one();
  }

  // The same, the value in a future.
  template <class T, class F>
  std::future<T> submit(F fn, T fail_value, op_class cls = op_class::background) {
    auto p = std::make_shared<std::promise<T>>();
    auto fut = p->get_future();
    submit_then<T>(std::move(fn), std::move(fail_value), [p](T v) { p->set_value(std::move(v)); }, cls);
    return fut;
  }

  void writer_loop() {
    conn& c = *writer_conn_;
    std::vector<write_op> batch;
    for (;;) {
      {
        std::unique_lock lock(mu_);
        writer_idle_ = true;
        cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
        // Background ops alone while submits arrive: wait a moment for a submit to share their commit
        // (write_queue.h, linger_policy); a submit, a backlog or stopping ends the wait at once.
        if (!stopping_ && queue_.should_linger(steady_us())) {
          writer_lingering_ = true;
          const auto deadline = std::chrono::steady_clock::now() + std::chrono::microseconds(queue_.linger().linger_us);
          cv_.wait_until(lock, deadline, [&] {
            return stopping_ || queue_.n_latency() > 0 || queue_.n_background() >= queue_.linger().n_background_max;
          });
          writer_lingering_ = false;
          n_lingers_++;
        }
        writer_idle_ = false;
        if (queue_.empty() && stopping_) return;
        queue_.take(batch, options_.group_commit ? static_cast<size_t>(std::max(1, options_.max_batch_ops)) : 1,
                    steady_us());
      }
      run_batch(c, batch);
      batch.clear();
      // The WAL's tail (checkpointer.h), after the group's answers and only while no submit waits.
      if (checkpointer_) {
        bool submit_waits;
        {
          std::lock_guard lock(mu_);
          submit_waits = queue_.n_latency() > 0;
        }
        checkpointer_->copy_tail(c.db, submit_waits);
      }
    }
  }

  // One transaction for the group: first with no savepoints at all; only when an op throws is the
  // transaction rolled back and the group applied again with a savepoint per op (conn::isolate_ops),
  // so the op that fails is undone alone and the others commit, as before.
  // NOTE: a savepoint makes SQLite copy every page an op writes that existed when it was opened into
  // the statement sub-journal (4 KiB each, in ~1 KiB malloc'd chunks): with a savepoint per op that was
  // ~55 page copies per one-request job on the writer (callgrind, session 26), for ops that almost
  // never fail. An op's apply only writes through c (and sets its result), so running it twice is safe.
  void run_batch(conn& c, std::vector<write_op>& batch) {
    std::vector<bool> applied(batch.size(), false);
    bool committed = run_group(c, batch, applied, false);
    if (!committed && c.op_threw) {
      n_replays_++;
      std::fill(applied.begin(), applied.end(), false);
      committed = run_group(c, batch, applied, true);
    }
    n_transactions_++;
    n_write_ops_ += static_cast<int64_t>(batch.size());
    // NOTE: a waiter is woken only by a commit that wrote what it waits for: every commit used to
    // wake the relay and the webhook scan (and each then read the outbox / events for nothing).
    if (committed && c.wrote != 0) {
      {
        std::lock_guard lock(event_mu_);
        for (int k = 0; k < 3; ++k)
          if (c.wrote & (1u << k)) wake_seq_[k]++;
      }
      for (int k = 0; k < 3; ++k)
        if (c.wrote & (1u << k)) wake_cv_[k].notify_all();
    }
    for (size_t i = 0; i < batch.size(); ++i) batch[i].done(committed && applied[i]);
  }

  // One try of the group's transaction; true when it committed. isolate: a savepoint per op (an op
  // that throws is rolled back alone, logged); else an op that throws rolls the whole transaction
  // back and sets c.op_threw (run_batch then tries again with isolate).
  bool run_group(conn& c, std::vector<write_op>& batch, std::vector<bool>& applied, bool isolate) {
    c.wrote = 0;
    c.op_threw = false;
    c.isolate_ops = isolate;
    bool committed = false;
    // NOTE: the transaction statements are prepared once (conn's cache), not parsed per group as exec() would.
    try {
      c.stmt("BEGIN IMMEDIATE").run();
      for (size_t i = 0; i < batch.size(); ++i) {
        if (isolate) c.stmt("SAVEPOINT op").run();
        try {
          batch[i].apply(c);
          c.reset_all();
          if (isolate) c.stmt("RELEASE op").run();
          applied[i] = true;
        } catch (const std::exception& e) {
          c.reset_all();
          if (!isolate) {
            spdlog::debug("store: write op failed ({}): its group is applied again, a savepoint per op", e.what());
            c.op_threw = true;
            throw;
          }
          spdlog::warn("store: write op failed: {}", e.what());
          n_write_errors_++;
          c.stmt("ROLLBACK TO op").run();
          c.stmt("RELEASE op").run();
        }
      }
      c.stmt("COMMIT").run();
      c.reset_all();
      committed = true;
    } catch (const std::exception& e) {
      if (!c.op_threw) {
        spdlog::error("store: transaction failed: {}", e.what());
        n_write_errors_++;
      }
      c.reset_all();
      try {
        c.db.exec("ROLLBACK");
      } catch (...) {
      }
    }
    c.isolate_ops = false;
    return committed;
  }

  // --- readers -----------------------------------------------------------------

  // with_reader, fn's reads in one read transaction. NOTE: a statement run alone is its own read
  // transaction, which finds the WAL changed by the writer's commits since the last one and so
  // starts with the connection's page cache emptied (its pages read again, a pread each): many
  // small reads together share one snapshot and one cache.
  template <class F>
  auto with_snapshot(F fn) -> decltype(fn(std::declval<conn&>())) {
    return with_reader([&](conn& c) {
      c.stmt("BEGIN").run();
      struct end_tx {
        conn& c;
        ~end_tx() {
          c.reset_all();
          try {
            c.stmt("COMMIT").run();
          } catch (...) {  // a read transaction: nothing to lose; the next BEGIN would fail loudly
          }
        }
      } end{c};
      return fn(c);
    });
  }

  template <class F>
  auto with_reader(F fn) -> decltype(fn(std::declval<conn&>())) {
    std::unique_ptr<conn> c;
    {
      std::unique_lock lock(reader_mu_);
      reader_cv_.wait(lock, [&] { return !readers_.empty(); });
      c = std::move(readers_.back());
      readers_.pop_back();
    }
    struct give_back {
      sqlite_store* self;
      std::unique_ptr<conn>& c;
      ~give_back() {
        {
          std::lock_guard lock(self->reader_mu_);
          self->readers_.push_back(std::move(c));
        }
        self->reader_cv_.notify_one();
      }
    } guard{this, c};
    struct end_reads {
      conn& c;
      ~end_reads() { c.reset_all(); }
    } end{*c};
    return fn(*c);
  }

  // --- API side ------------------------------------------------------------------

  std::future<create_result> create_job(new_job nj) override {
    auto p = std::make_shared<std::promise<create_result>>();
    auto fut = p->get_future();
    create_job_async(std::move(nj), [p](create_result r) { p->set_value(std::move(r)); });
    return fut;
  }

  void create_job_async(new_job nj, std::function<void(create_result)> done) override {
    create_result fail;
    fail.error = "database write failed";
    submit_then<create_result>(
        [nj = std::move(nj)](conn& c) {
          create_result r;
          int64_t now = c.now();
          if (!nj.idempotency_key.empty()) {
            auto& s = c.stmt("SELECT " AQ_JOB_COLS " FROM jobs WHERE tenant=? AND idempotency_key=?");
            s.bind_all(nj.tenant, nj.idempotency_key);
            if (s.step()) {
              r.job = read_job(s);
              if (r.job.request_hash == nj.request_hash) {
                r.outcome = create_outcome::existing;
              } else {
                r.outcome = create_outcome::conflict;
                r.error = "idempotency key reused with a different request";
              }
              return r;
            }
          }
          // NOTE: 48 random bits per ms (job_id.h): a duplicate is improbable, not impossible. It inserts
          // nothing (the primary key's own check, ON CONFLICT(id)) and the job takes a new id: no SELECT
          // of the id before every insert (a statement per submit on the writer).
          auto& ins = c.stmt(
              "INSERT INTO jobs(id, tenant, status, priority, request_json, idempotency_key, request_hash, created_ms, "
              "updated_ms, deadline_ms, store_content) VALUES (?,?,'queued',?,?,?,?,?,?,?,?) ON CONFLICT(id) DO NOTHING");
          std::string id = new_job_id(now);
          for (;;) {
            // NOTE: the texts bound without copies (the request may be long): id and nj outlive the run.
            ins.bind_all_static(id, nj.tenant, static_cast<int64_t>(nj.priority), nj.request_json);
            if (nj.idempotency_key.empty())
              ins.bind_null(5);
            else
              ins.bind_static(5, nj.idempotency_key);
            ins.bind_static(6, nj.request_hash).bind(7, now).bind(8, now).bind(9, nj.deadline_ms).bind(10, int64_t(nj.store_content)).run();
            if (c.db.changes() > 0) break;
            ins.reset();  // its bindings point into id: cleared before id changes
            id = new_job_id(now);
          }
          insert_status_event(c, id, &nj.tenant, job_status::queued, status_json(job_status::queued), now);
          insert_outbox(c, "publish", id, priority_payload(nj.priority, nj.model), "", now);
          // NOTE: in the job's transaction: linked apart, it was a second fsynced commit per submit.
          if (!nj.key_id.empty())
            c.stmt("INSERT OR IGNORE INTO job_keys(job_id, key_id) VALUES (?,?)").bind_all_static(id, nj.key_id).run();
          r.outcome = create_outcome::created;
          // NOTE: the row as inserted, not read back (a SELECT of every column per submit, ~8 % of the
          // submit's instructions on the writer, session 23): the columns not bound above take their
          // defaults ('' and 0, store_content as given; migrations/0001, 0006). unit.store checks that
          // it equals get_job's row.
          job_row& j = r.job;
          j.id = std::move(id);
          j.tenant = nj.tenant;
          j.status = job_status::queued;
          j.priority = nj.priority;
          j.request_json = nj.request_json;
          j.idempotency_key = nj.idempotency_key;
          j.request_hash = nj.request_hash;
          j.created_ms = j.updated_ms = now;
          j.deadline_ms = nj.deadline_ms;
          j.store_content = nj.store_content;
          return r;
        },
        fail, std::move(done), op_class::latency);
  }

  std::optional<job_row> get_job(const std::string& job_id, const std::string& tenant) override {
    return with_reader([&](conn& c) -> std::optional<job_row> {
      auto j = select_job(c, job_id);
      if (j && !tenant.empty() && j->tenant != tenant) return std::nullopt;
      if (j && j->deleted_ms > 0) return std::nullopt;  // a tombstone: every route answers 404
      return j;
    });
  }

  std::vector<job_row> list_jobs(const std::string& tenant, std::optional<job_status> status, int32_t limit,
                                 const std::string& before_id) override {
    return with_reader([&](conn& c) {
      std::vector<job_row> out;
      int64_t before_created = INT64_MAX;
      std::string before = before_id.empty() ? std::string("\x7f") : before_id;
      if (!before_id.empty()) {
        auto& s = c.stmt("SELECT created_ms FROM jobs WHERE id=?");
        s.bind(1, before_id);
        if (s.step()) before_created = s.col_int(0);
      }
      // NOTE: one statement per filter shape, not `(?1='' OR tenant=?1)`: an OR on a bound parameter
      // kept SQLite off every index (EXPLAIN QUERY PLAN: SCAN jobs + a temp B-tree), so each page
      // cost O(all jobs ever stored). Now a tenant's list walks jobs_tenant_created from the cursor
      // down (the page's `created_ms <= ?3` is the range) and a status-only list (the worker's KV
      // sweep) uses jobs_status. Unused parameters stay bound: SQLite counts up to the highest ?N.
      auto& s = !tenant.empty()
                    ? (status ? c.stmt("SELECT " AQ_JOB_COLS " FROM jobs WHERE tenant=?1 AND status=?2 AND " AQ_LIST_PAGE_SQL)
                              : c.stmt("SELECT " AQ_JOB_COLS " FROM jobs WHERE tenant=?1 AND " AQ_LIST_PAGE_SQL))
                    : (status ? c.stmt("SELECT " AQ_JOB_COLS " FROM jobs WHERE status=?2 AND " AQ_LIST_PAGE_SQL)
                              : c.stmt("SELECT " AQ_JOB_COLS " FROM jobs WHERE " AQ_LIST_PAGE_SQL));
      s.bind_all(tenant, status ? std::string(to_string(*status)) : std::string(), before_created, before,
                 static_cast<int64_t>(limit));
      while (s.step()) out.push_back(read_job(s));
      return out;
    });
  }

  std::future<write_status> cancel_job(const std::string& job_id, const std::string& tenant) override {
    return submit<write_status>(
        [job_id, tenant, limit = options_.tenant_max_running](conn& c) {
          int64_t now = c.now();
          auto& u = c.stmt("UPDATE jobs SET status='cancelled', error='cancelled by request', "
                                       "finished_ms=?1, updated_ms=?1, lease_expires_ms=0, pending_json='' "
                                       "WHERE id=?2 AND (?3='' OR tenant=?3) AND status NOT IN " AQ_TERMINAL_SQL);
          u.bind_all(now, job_id, tenant).run();
          if (c.db.changes() == 0) {
            auto j = select_job(c, job_id);
            return (!j || (!tenant.empty() && j->tenant != tenant)) ? write_status::not_found : write_status::fenced;
          }
          insert_status_event(c, job_id, nullptr, job_status::cancelled, status_json(job_status::cancelled), now);
          running_limit::refill_for_job(c, job_id, limit, now);
          return write_status::ok;
        },
        write_status::error, op_class::latency);
  }

  std::future<write_status> submit_tool_outputs(const std::string& job_id, std::vector<tool_output> outputs,
                                                const std::string& tenant) override {
    return submit<write_status>(
        [job_id, outputs = std::move(outputs), tenant](conn& c) {
          int64_t now = c.now();
          auto j = select_job(c, job_id);
          if (!j || (!tenant.empty() && j->tenant != tenant)) return write_status::not_found;
          if (j->status != job_status::requires_action) return write_status::fenced;
          json pending = json::parse(j->pending_json, nullptr, false);
          if (!pending.is_array()) return write_status::invalid;
          std::unordered_map<std::string, std::string> names;  // call id -> tool name
          for (auto& p : pending) names[p.value("id", "")] = p.value("name", "");
          std::unordered_map<std::string, const tool_output*> by_id;
          for (auto& o : outputs) {
            if (!names.count(o.call_id)) return write_status::invalid;
            by_id[o.call_id] = &o;
          }
          // NOTE: already-recorded results (server-side calls of the same turn) count as answered.
          auto& rs = c.stmt("SELECT call_id FROM tool_results WHERE job_id=?");
          rs.bind(1, job_id);
          std::unordered_map<std::string, bool> recorded;
          while (rs.step()) recorded[rs.col_text(0)] = true;
          for (auto& [id, name] : names)
            if (!by_id.count(id) && !recorded.count(id)) return write_status::invalid;
          for (auto& [id, o] : by_id) {
            auto& ins = c.stmt(
                "INSERT OR IGNORE INTO tool_results(job_id, call_id, name, output, is_error, created_ms) "
                "VALUES (?,?,?,?,?,?)");
            ins.bind_all(job_id, id, names[id], o->output, static_cast<int64_t>(o->is_error), now).run();
            if (c.db.changes() > 0) {
              transcript_row r;
              r.role = "tool";
              r.content = o->output;
              r.tool_call_id = id;
              r.name = names[id];
              insert_transcript(c, job_id, r, now);
            }
          }
          auto& u = c.stmt(
              "UPDATE jobs SET status='queued', pending_json='', updated_ms=? WHERE id=? AND status='requires_action'");
          u.bind_all(now, job_id).run();
          insert_status_event(c, job_id, &j->tenant, job_status::queued,
                              status_json(job_status::queued, json{{"reason", "tool_outputs"}}), now);
          insert_outbox(c, "continue", job_id, priority_payload(j->priority), j->lease_owner, now);
          return write_status::ok;
        },
        write_status::error, op_class::latency);
  }

  std::vector<transcript_row> read_transcript(const std::string& job_id) override {
    return with_reader([&](conn& c) { return select_transcript(c, job_id); });
  }

  std::vector<std::optional<job_row>> get_jobs(const std::vector<std::string>& job_ids) override {
    if (job_ids.empty()) return {};
    return with_snapshot([&](conn& c) {
      std::vector<std::optional<job_row>> out;
      out.reserve(job_ids.size());
      for (const auto& id : job_ids) {
        auto j = select_job(c, id);
        if (j && j->deleted_ms > 0) j.reset();  // a tombstone, as get_job
        out.push_back(std::move(j));
      }
      return out;
    });
  }

  std::vector<std::vector<transcript_row>> read_transcripts(const std::vector<std::string>& job_ids) override {
    if (job_ids.empty()) return {};
    return with_snapshot([&](conn& c) {
      std::vector<std::vector<transcript_row>> out;
      out.reserve(job_ids.size());
      for (const auto& id : job_ids) out.push_back(select_transcript(c, id));
      return out;
    });
  }

  static std::vector<transcript_row> select_transcript(conn& c, const std::string& job_id) {
    std::vector<transcript_row> out;
    auto& s = c.stmt(
        "SELECT seq, turn_idx, role, content, tool_calls_json, tool_call_id, name, usage_json, created_ms "
        "FROM transcript WHERE job_id=? ORDER BY seq");
    s.bind(1, job_id);
    while (s.step()) {
      transcript_row r;
      r.seq = s.col_int(0);
      r.turn_idx = static_cast<int32_t>(s.col_int(1));
      r.role = s.col_text(2);
      r.content = s.col_text(3);
      r.tool_calls_json = s.col_text(4);
      r.tool_call_id = s.col_text(5);
      r.name = s.col_text(6);
      r.usage_json = s.col_text(7);
      r.created_ms = s.col_int(8);
      out.push_back(std::move(r));
    }
    return out;
  }

  static std::vector<job_event> read_events_stmt(sqlite_stmt& s) {
    std::vector<job_event> out;
    while (s.step()) {
      job_event e;
      e.id = s.col_int(0);
      e.job_id = s.col_text(1);
      e.type = s.col_text(2);
      e.data_json = s.col_text(3);
      e.created_ms = s.col_int(4);
      out.push_back(std::move(e));
    }
    return out;
  }

  std::vector<job_event> read_events(const std::string& job_id, int64_t after_id, int32_t limit) override {
    return with_reader([&](conn& c) {
      auto& s = c.stmt(
          "SELECT id, job_id, type, data_json, created_ms FROM job_events WHERE job_id=? AND id>? ORDER BY id LIMIT ?");
      s.bind_all(job_id, after_id, static_cast<int64_t>(limit));
      return read_events_stmt(s);
    });
  }

  // NOTE: the filter is the scan's old pre-filter (dispatcher.cpp) moved into SQL: the events of a
  // job that cannot want a delivery (most: a plain job, a Chat Completions or Batch line) are
  // neither copied out nor parsed, and the scan no longer reads each terminal job whole to find that
  // out. CROSS JOIN keeps the events' id range the outer loop (the job looked up by its key).
  webhook_scan_page read_webhook_candidates(int64_t after_id, int32_t limit) override {
    return with_snapshot([&](conn& c) {  // both statements read the same new events' pages
      webhook_scan_page page;
      page.scanned_to = after_id;
      auto& hi =
          c.stmt("SELECT MAX(id), COUNT(*) FROM (SELECT id FROM job_events WHERE id>? ORDER BY id LIMIT ?)");
      hi.bind_all(after_id, static_cast<int64_t>(limit));
      if (!hi.step() || hi.col_null(0)) return page;
      page.scanned_to = hi.col_int(0);
      page.full = hi.col_int(1) >= limit;
      // NOTE: request_json is only the jobs table's (the filter's text is apply_finish's too).
      // NOTE: a job's queued and running events (two of its three or more) never make a delivery
      // (webhook_event_for): their usual texts (status_json's plain queued, the claim's running, which
      // alone starts with "attempt") are passed over before the join to the job's row and its request
      // (~1.7 us an event: a 100,000-line Batch file's queued events were ~9 % of its acceptance's
      // CPU). Any other text goes on to the scan's own check of the status, as before.
      auto& s = c.stmt(
          "SELECT e.id, e.job_id, e.type, e.data_json, e.created_ms FROM job_events e CROSS JOIN jobs j "
          "WHERE e.id>?1 AND e.id<=?2 AND e.type='status' AND e.data_json<>'{\"status\":\"queued\"}' AND "
          "substr(e.data_json,1,11)<>'{\"attempt\":' AND j.id=e.job_id AND " AQ_MAY_WANT_DELIVERY_SQL " ORDER BY e.id");
      s.bind_all(after_id, page.scanned_to);
      page.events = read_events_stmt(s);
      return page;
    });
  }

  std::vector<job_event> read_tenant_events(const std::string& tenant, int64_t after_id, int32_t limit) override {
    return with_reader([&](conn& c) {
      auto& s = c.stmt(
          "SELECT id, job_id, type, data_json, created_ms FROM job_events WHERE tenant=? AND id>? ORDER BY id LIMIT ?");
      s.bind_all(tenant, after_id, static_cast<int64_t>(limit));
      return read_events_stmt(s);
    });
  }

  int64_t last_event_id() override {
    return with_reader([&](conn& c) {
      auto& s = c.stmt("SELECT COALESCE(MAX(id), 0) FROM job_events");
      return s.step() ? s.col_int(0) : int64_t(0);
    });
  }

  bool wait_events(int64_t after_id, std::chrono::milliseconds timeout, wake on) override {
    // NOTE: the index is the conn::k_wrote_* bit of the kind (event 1, webhook_status 2, outbox 4).
    const int k = on == wake::event ? 0 : on == wake::webhook_status ? 1 : 2;
    std::unique_lock lock(event_mu_);
    uint64_t seen = wake_seq_[k];
    return wake_cv_[k].wait_for(lock, timeout, [&] { return wake_seq_[k] != seen; });
  }

  void wake_waiters() override {
    {
      std::lock_guard lock(event_mu_);
      for (auto& seq : wake_seq_) seq++;
    }
    for (auto& cv : wake_cv_) cv.notify_all();
  }

  // --- outbox ----------------------------------------------------------------------

  std::vector<outbox_row> fetch_outbox(const std::string& kind, int32_t limit) override {
    return with_reader([&](conn& c) {
      std::vector<outbox_row> out;
      auto& s = c.stmt(
          "SELECT id, kind, job_id, payload_json, target, attempts, created_ms FROM outbox "
          "WHERE kind=? AND next_attempt_ms<=? ORDER BY id LIMIT ?");
      s.bind_all(kind, c.now(), static_cast<int64_t>(limit));
      while (s.step()) {
        outbox_row r;
        r.id = s.col_int(0);
        r.kind = s.col_text(1);
        r.job_id = s.col_text(2);
        r.payload_json = s.col_text(3);
        r.target = s.col_text(4);
        r.attempts = static_cast<int32_t>(s.col_int(5));
        r.created_ms = s.col_int(6);
        out.push_back(std::move(r));
      }
      return out;
    });
  }

  std::future<write_status> complete_outbox(std::vector<int64_t> ids) override {
    return submit<write_status>(
        [ids = std::move(ids)](conn& c) {
          for (int64_t id : ids) c.stmt("DELETE FROM outbox WHERE id=?").bind(1, id).run();
          return write_status::ok;
        },
        write_status::error);
  }

  std::future<write_status> retry_outbox(int64_t id, int64_t not_before_ms) override {
    return submit<write_status>(
        [id, not_before_ms](conn& c) {
          c.stmt("UPDATE outbox SET attempts=attempts+1, next_attempt_ms=? WHERE id=?").bind_all(not_before_ms, id).run();
          return c.db.changes() ? write_status::ok : write_status::not_found;
        },
        write_status::error);
  }

  // --- reconciler ------------------------------------------------------------------

  std::vector<job_row> list_dispatchable(int64_t grace_ms, int32_t limit) override {
    return with_reader([&](conn& c) {
      std::vector<job_row> out;
      int64_t cutoff = c.now() - grace_ms;
      auto& s = c.stmt("SELECT " AQ_JOB_COLS
                       " FROM jobs WHERE (status='queued' AND priority<3 AND updated_ms<?1 AND hold!=1) OR "
                       "(status='running' AND lease_expires_ms<?1) ORDER BY priority, created_ms LIMIT ?2");
      s.bind_all(cutoff, static_cast<int64_t>(limit));
      while (s.step()) out.push_back(read_job(s));
      return out;
    });
  }

  int32_t refill_held() override {
    const int64_t limit = options_.tenant_max_running;
    // NOTE: read first: the write (a transaction, an fsync) only when some tenant's held jobs have a slot.
    if (!with_reader([&](conn& c) { return running_limit::any_stranded(c, limit); })) return 0;
    return submit<int32_t>([limit](conn& c) { return running_limit::refill_all(c, limit, c.now()); }, 0).get();
  }

  std::future<write_status> fail_job(const std::string& job_id, std::string reason, job_status status) override {
    return submit<write_status>(
        [job_id, reason = std::move(reason), status, limit = options_.tenant_max_running](conn& c) {
          int64_t now = c.now();
          auto& u = c.stmt("UPDATE jobs SET status=?1, error=?2, finished_ms=?3, updated_ms=?3, "
                                       "lease_expires_ms=0 WHERE id=?4 AND status NOT IN " AQ_TERMINAL_SQL);
          u.bind_all(to_string(status), reason, now, job_id).run();
          if (c.db.changes() == 0) return select_job(c, job_id) ? write_status::fenced : write_status::not_found;
          insert_status_event(c, job_id, nullptr, status, status_json_error(status, reason), now);
          running_limit::refill_for_job(c, job_id, limit, now);
          return write_status::ok;
        },
        write_status::error);
  }

  // --- worker side -----------------------------------------------------------------

  std::future<claim_result> claim_job(const std::string& job_id, const std::string& worker_id, int64_t lease_ms,
                                      int32_t max_attempts) override {
    return submit<claim_result>(
        [=, limit = options_.tenant_max_running](conn& c) {
          return apply_claim(c, job_id, worker_id, lease_ms, max_attempts, limit);
        },
        claim_result{});
  }

  void claim_job_async(const std::string& job_id, const std::string& worker_id, int64_t lease_ms, int32_t max_attempts,
                       std::function<void(claim_result)> done) override {
    submit_then<claim_result>(
        [=, limit = options_.tenant_max_running](conn& c) {
          return apply_claim(c, job_id, worker_id, lease_ms, max_attempts, limit);
        },
        claim_result{}, std::move(done));
  }

  std::map<std::string, std::string> job_models(const std::vector<std::string>& job_ids) override {
    if (job_ids.empty()) return {};
    return with_reader([&](conn& c) {
      std::map<std::string, std::string> out;
      for (auto& id : job_ids) {
        auto& s = c.stmt("SELECT CASE WHEN json_valid(request_json) THEN json_extract(request_json, '$.model') END FROM jobs WHERE id=?");
        s.bind(1, id);
        if (s.step()) {
          std::string m = s.col_text(0);
          if (!m.empty()) out[id] = m;
        }
      }
      return out;
    });
  }

  std::future<write_status> append_queued_event(const std::string& job_id, std::string type,
                                                std::string data_json) override {
    return submit<write_status>(
        [job_id, type = std::move(type), data = std::move(data_json)](conn& c) {
          auto j = select_job(c, job_id);
          if (!j) return write_status::not_found;
          if (j->status != job_status::queued) return write_status::fenced;
          insert_event(c, job_id, &j->tenant, type, data, c.now());
          return write_status::ok;
        },
        write_status::error);
  }

  std::future<std::vector<std::string>> fence_worker_leases(const std::string& worker_id) override {
    return submit<std::vector<std::string>>(
        [worker_id](conn& c) {
          std::vector<std::string> ids;
          auto& q = c.stmt("SELECT id FROM jobs WHERE status='running' AND lease_owner=?");
          q.bind_all(worker_id);
          while (q.step()) ids.push_back(q.col_text(0));
          // NOTE: attempts is not bumped: the job did nothing wrong, its worker restarted.
          for (auto& id : ids)
            c.stmt("UPDATE jobs SET lease_epoch=lease_epoch+1, lease_expires_ms=0 WHERE id=? AND status='running'")
                .bind_all(id)
                .run();
          return ids;
        },
        std::vector<std::string>{});
  }

  std::future<std::vector<std::string>> renew_leases(std::vector<std::pair<std::string, int64_t>> jobs,
                                                     int64_t lease_ms) override {
    std::vector<std::string> all;
    for (auto& [id, e] : jobs) all.push_back(id);
    return submit<std::vector<std::string>>(
        [jobs = std::move(jobs), lease_ms](conn& c) {
          std::vector<std::string> lost;
          int64_t now = c.now();
          for (auto& [id, epoch] : jobs) {
            c.stmt("UPDATE jobs SET lease_expires_ms=? WHERE id=? AND lease_epoch=? AND status='running'")
                .bind_all(now + lease_ms, id, epoch)
                .run();
            if (c.db.changes() == 0) lost.push_back(id);
          }
          return lost;
        },
        std::vector<std::string>{});  // NOTE: a failed renew loses nothing; the next one retries
  }

  std::future<write_status> init_transcript(const std::string& job_id, int64_t epoch,
                                            std::vector<transcript_row> input) override {
    return submit<write_status>(
        [job_id, epoch, input = std::move(input)](conn& c) { return apply_init_transcript(c, job_id, epoch, input); },
        write_status::error);
  }

  std::future<write_status> commit_turn(const std::string& job_id, int64_t epoch, turn_commit t) override {
    return submit<write_status>([job_id, epoch, t = std::move(t)](conn& c) { return apply_commit_turn(c, job_id, epoch, t); },
                                write_status::error);
  }

  std::future<write_status> commit_step(const std::string& job_id, int64_t epoch, step_commit step) override {
    return submit<write_status>(
        [job_id, epoch, step = std::move(step), limit = options_.tenant_max_running](conn& c) {
          return apply_step(c, job_id, epoch, step, limit);
        },
        write_status::error);
  }

  void commit_step_async(const std::string& job_id, int64_t epoch, step_commit step,
                         std::function<void(write_status)> done) override {
    submit_then<write_status>(
        [job_id, epoch, step = std::move(step), limit = options_.tenant_max_running](conn& c) {
          return apply_step(c, job_id, epoch, step, limit);
        },
        write_status::error, std::move(done));
  }

  std::future<std::vector<write_status>> commit_steps(std::vector<step_item> items) override {
    const size_t n = items.size();
    return submit<std::vector<write_status>>(
        [items = std::move(items), limit = options_.tenant_max_running](conn& c) {
          std::vector<write_status> out;
          out.reserve(items.size());
          for (const auto& it : items) {
            // NOTE: without the writer's isolate_ops (its first try of a group: run_batch) no savepoint:
            // a job whose writes throw throws the whole op, and the writer applies the group again
            // with isolate_ops; then a savepoint of our own per job: a job whose writes throw is
            // undone alone and answered `error`.
            if (!c.isolate_ops) {
              out.push_back(apply_step(c, it.job_id, it.epoch, it.step, limit));
              c.reset_all();
              continue;
            }
            c.stmt("SAVEPOINT step").run();
            try {
              out.push_back(apply_step(c, it.job_id, it.epoch, it.step, limit));
              c.reset_all();
              c.stmt("RELEASE step").run();
            } catch (const std::exception& e) {
              spdlog::warn("store: commit_steps: job {}: {}", it.job_id, e.what());
              c.reset_all();
              c.stmt("ROLLBACK TO step").run();
              c.stmt("RELEASE step").run();
              out.push_back(write_status::error);
            }
          }
          return out;
        },
        std::vector<write_status>(n, write_status::error));
  }

  std::future<write_status> record_tool_result(const std::string& job_id, int64_t epoch, tool_output o,
                                               std::string name) override {
    return submit<write_status>(
        [job_id, epoch, o = std::move(o), name = std::move(name)](conn& c) {
          if (!fence_ok(c, job_id, epoch)) return write_status::fenced;
          int64_t now = c.now();
          c.stmt("INSERT OR IGNORE INTO tool_results(job_id, call_id, name, output, is_error, created_ms) "
                 "VALUES (?,?,?,?,?,?)")
              .bind_all(job_id, o.call_id, name, o.output, static_cast<int64_t>(o.is_error), now)
              .run();
          if (c.db.changes() == 0) return write_status::ok;
          transcript_row r;
          r.role = "tool";
          r.content = o.output;
          r.tool_call_id = o.call_id;
          r.name = name;
          insert_transcript(c, job_id, r, now);
          insert_event(c, job_id, nullptr, "tool_result",
                       json{{"call_id", o.call_id}, {"name", name}, {"is_error", o.is_error}}.dump(), now);
          return write_status::ok;
        },
        write_status::error);
  }

  std::future<write_status> require_action(const std::string& job_id, int64_t epoch,
                                           std::string pending_calls_json) override {
    return submit<write_status>(
        [job_id, epoch, pending = std::move(pending_calls_json), limit = options_.tenant_max_running](conn& c) {
          int64_t now = c.now();
          c.stmt("UPDATE jobs SET status='requires_action', pending_json=?1, lease_expires_ms=0, attempts=0, "
                 "updated_ms=?2 WHERE id=?3 AND lease_epoch=?4 AND status='running'")
              .bind_all(pending, now, job_id, epoch)
              .run();
          if (c.db.changes() == 0) return write_status::fenced;
          insert_status_event(c, job_id, nullptr, job_status::requires_action,
                              status_json(job_status::requires_action, json{{"tool_calls", json::parse(pending, nullptr, false)}}),
                              now);
          running_limit::refill_for_job(c, job_id, limit, now);  // waiting on its client, it holds no slot
          return write_status::ok;
        },
        write_status::error);
  }

  std::future<write_status> finish_job(const std::string& job_id, int64_t epoch, job_status status,
                                       std::string result_json, std::string error, usage_totals usage) override {
    return submit<write_status>(
        [job_id, epoch, e = job_end{status, std::move(result_json), std::move(error), usage},
         limit = options_.tenant_max_running](conn& c) {
          auto ws = apply_finish(c, job_id, epoch, e);
          if (ws == write_status::ok) running_limit::refill_for_job(c, job_id, limit, c.now());
          return ws;
        },
        write_status::error);
  }

  std::future<write_status> release_job(const std::string& job_id, int64_t epoch) override {
    return submit<write_status>(
        [job_id, epoch, limit = options_.tenant_max_running](conn& c) {
          int64_t now = c.now();
          c.stmt("UPDATE jobs SET status='queued', lease_expires_ms=0, attempts=MAX(attempts-1,0), updated_ms=?1 "
                 "WHERE id=?2 AND lease_epoch=?3 AND status='running'")
              .bind_all(now, job_id, epoch)
              .run();
          if (c.db.changes() == 0) return write_status::fenced;
          auto j = select_job(c, job_id);
          insert_status_event(c, job_id, &j->tenant, job_status::queued,
                              status_json(job_status::queued, json{{"reason", "released"}}), now);
          insert_outbox(c, "publish", job_id, priority_payload(j->priority), "", now);
          running_limit::refill_for_job(c, job_id, limit, now);
          return write_status::ok;
        },
        write_status::error);
  }

  std::future<write_status> append_event(const std::string& job_id, int64_t epoch, std::string type,
                                         std::string data_json) override {
    return submit<write_status>(
        [job_id, epoch, type = std::move(type), data = std::move(data_json)](conn& c) {
          if (!fence_ok(c, job_id, epoch)) return write_status::fenced;
          insert_event(c, job_id, nullptr, type, data, c.now());
          return write_status::ok;
        },
        write_status::error);
  }

  std::vector<std::string> cancelled_among(const std::vector<std::string>& job_ids) override {
    if (job_ids.empty()) return {};
    return with_reader([&](conn& c) {
      std::vector<std::string> out;
      for (auto& id : job_ids) {
        auto& s = c.stmt("SELECT status FROM jobs WHERE id=?");
        s.bind(1, id);
        if (s.step() && s.col_text(0) == "cancelled") out.push_back(id);
      }
      return out;
    });
  }

  std::vector<tool_output> read_tool_results(const std::string& job_id) override {
    return with_reader([&](conn& c) {
      std::vector<tool_output> out;
      auto& s = c.stmt("SELECT call_id, output, is_error FROM tool_results WHERE job_id=? ORDER BY created_ms");
      s.bind(1, job_id);
      while (s.step()) out.push_back(tool_output{s.col_text(0), s.col_text(1), s.col_int(2) != 0});
      return out;
    });
  }

  // --- deletion and retention (SQL in store/deletion.cpp) ---------------------------------

  std::future<write_status> delete_job(const std::string& job_id, const std::string& tenant) override {
    return submit<write_status>(
        [job_id, tenant](conn& c) {
          auto j = select_job(c, job_id);
          if (!j || j->deleted_ms > 0 || (!tenant.empty() && j->tenant != tenant)) return write_status::not_found;
          if (!is_terminal(j->status)) return write_status::fenced;
          return deletion::tombstone(c, job_id, c.now()) ? write_status::ok : write_status::fenced;
        },
        write_status::error);
  }

  std::future<int64_t> delete_jobs(std::vector<std::string> job_ids) override {
    return submit<int64_t>(
        [job_ids = std::move(job_ids)](conn& c) {
          int64_t n = 0, now = c.now();
          for (const auto& id : job_ids) n += deletion::tombstone(c, id, now) ? 1 : 0;
          return n;
        },
        int64_t{-1});
  }

  std::vector<std::string> list_expired(int64_t default_retention_ms, int32_t limit) override {
    return with_reader([&](conn& c) { return deletion::select_expired(c, c.now(), default_retention_ms, limit); });
  }

  std::vector<std::string> list_unstored_done(int32_t limit) override {
    return with_reader([&](conn& c) { return deletion::select_unstored_done(c, limit); });
  }

  std::vector<job_row> list_tenant_jobs(const std::string& tenant, int32_t limit) override {
    return with_reader([&](conn& c) {
      std::vector<job_row> out;
      auto& s = c.stmt("SELECT " AQ_JOB_COLS " FROM jobs WHERE tenant=? AND deleted_ms=0 LIMIT ?");
      s.bind_all(tenant, int64_t(limit));
      while (s.step()) out.push_back(read_job(s));
      return out;
    });
  }

  std::future<int64_t> reclaim_space(int32_t max_pages) override {
    return submit<int64_t>([max_pages](conn& c) { return deletion::incremental_vacuum(c, max_pages); }, int64_t{-1});
  }

  bool checkpoint() override {
    return with_reader([](conn& c) {
      auto& s = c.stmt("PRAGMA wal_checkpoint(TRUNCATE)");
      return s.step() && s.col_int(0) == 0;  // column 0: 1 when a reader or writer kept it from finishing
    });
  }

  store_space space() override {
    store_space sp;
    with_reader([&](conn& c) {
      auto pragma = [&c](const char* sql) {
        auto& s = c.stmt(sql);
        return s.step() ? s.col_int(0) : int64_t{0};
      };
      sp.page_size = pragma("PRAGMA page_size");
      sp.n_pages = pragma("PRAGMA page_count");
      sp.n_free_pages = pragma("PRAGMA freelist_count");
      return 0;
    });
    sp.db_bytes = sp.page_size * sp.n_pages;
    std::error_code ec;
    auto wal = std::filesystem::file_size(options_.path + "-wal", ec);
    sp.wal_bytes = ec ? 0 : int64_t(wal);
    return sp;
  }

  int64_t now() const override { return options_.clock(); }

  store_stats stats() const override {
    store_stats st{n_write_ops_.load(), n_transactions_.load(), n_write_errors_.load()};
    st.n_background_lingers = n_lingers_.load();
    st.n_isolated_replays = n_replays_.load();
    if (checkpointer_) {
      st.n_checkpoint_passes = checkpointer_->n_passes();
      st.n_checkpoint_tails = checkpointer_->n_tails();
      st.n_checkpoint_backstops = checkpointer_->n_backstop();
    }
    return st;
  }

 private:
  store_options options_;
  std::unique_ptr<wal_checkpointer> checkpointer_;  // NOTE: before writer_conn_: outlives the hook it installs
  std::unique_ptr<conn> writer_conn_;
  std::thread writer_;
  std::mutex mu_;
  std::condition_variable cv_;
  write_queue<write_op> queue_;  // guarded by mu_
  bool stopping_ = false;
  bool writer_lingering_ = false;  // the writer waits for a submit to join its background ops (guarded by mu_)
  bool writer_idle_ = false;  // the writer waits on cv_ (guarded by mu_): only then does submit notify

  std::mutex reader_mu_;
  std::condition_variable reader_cv_;
  std::vector<std::unique_ptr<conn>> readers_;

  std::mutex event_mu_;
  std::condition_variable wake_cv_[3];  // by wait_events kind: event, webhook_status, outbox
  uint64_t wake_seq_[3] = {0, 0, 0};

  std::atomic<int64_t> n_write_ops_{0}, n_transactions_{0}, n_write_errors_{0}, n_lingers_{0}, n_replays_{0};
};

std::unique_ptr<store> store::open(const store_options& options, std::string* error) {
  auto s = std::make_unique<sqlite_store>(options);
  if (!s->open(error)) return nullptr;
  return s;
}

}  // namespace agentq::store
