// The checker for fault-injection scenarios: reads what a test::cluster recorded (client log with
// the 202 acknowledgements and every poll, tool-server and webhook-receiver requests) plus the
// SQLite file and Redis, and verifies agentq's promises (docs/RELIABILITY.md, "Promises"):
//   P1 every job acknowledged with 202 reached exactly one terminal state (one terminal status event)
//   P2 no terminal state or result changed until the job was deleted (every poll after the first
//      terminal one agrees; after a DELETE answered 200 every poll is a 404, and the tombstone keeps
//      the terminal status the polls saw)
//   P3 at most one side effect per tool call id: every call the tool server saw belongs to a
//      committed turn of its job (ids are stable, turns never re-generated), and no call is sent
//      again after its result was committed (repeats before that are counted as duplicates)
//   P4 every terminal event delivered to the webhook receiver at least once, always with the same
//      webhook-id, correctly signed
//   P5 PRAGMA integrity_check = ok
//   P6 nothing pending in Redis after drain (XPENDING on every job stream)
// Call cluster::drain() first. report.ok() / report.summary() / report.to_json().
#pragma once

#include <sqlite3.h>

#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "cluster.h"
#include "sqlite_lock.h"
#include "webhooks/signing.h"

namespace agentq::test {

struct history_report {
  std::string scenario;
  int64_t n_submitted = 0, n_acked = 0;  // POST /v1/jobs sent / answered 202
  int64_t n_completed = 0, n_incomplete = 0, n_failed = 0, n_cancelled = 0;
  int64_t n_lost = 0;  // acked, not terminal
  int64_t n_deleted = 0;  // acked jobs that are tombstones (deleted on request or by retention)
  int64_t n_polls = 0;
  int64_t n_tool_requests = 0, n_tool_calls = 0;         // requests / distinct call ids
  int64_t n_tool_duplicates = 0;                         // repeated requests of one call id (absorbed)
  int64_t n_webhook_hits = 0, n_webhook_duplicates = 0;  // deliveries / beyond the first per webhook-id
  int64_t n_redis_pending = 0, n_dead_lettered = 0;
  std::string integrity;
  std::vector<std::string> violations;

  bool ok() const { return violations.empty(); }
  json to_json() const {
    return {{"scenario", scenario},
            {"submitted", n_submitted},
            {"acked", n_acked},
            {"completed", n_completed},
            {"incomplete", n_incomplete},
            {"failed", n_failed},
            {"cancelled", n_cancelled},
            {"lost", n_lost},
            {"deleted", n_deleted},
            {"polls", n_polls},
            {"tool_requests", n_tool_requests},
            {"tool_calls", n_tool_calls},
            {"tool_duplicates", n_tool_duplicates},
            {"webhook_hits", n_webhook_hits},
            {"webhook_duplicates", n_webhook_duplicates},
            {"redis_pending", n_redis_pending},
            {"dead_lettered", n_dead_lettered},
            {"integrity", integrity},
            {"violations", violations}};
  }
  // One line of figures, then one line per violation.
  std::string summary() const {
    std::ostringstream s;
    s << "scenario " << scenario << ": submitted " << n_submitted << ", acked " << n_acked << ", completed "
      << n_completed << ", incomplete " << n_incomplete << ", failed " << n_failed << ", cancelled " << n_cancelled
      << ", lost " << n_lost << ", deleted " << n_deleted << "; tool requests " << n_tool_requests << " for " << n_tool_calls
      << " call ids (duplicates " << n_tool_duplicates << "); webhooks " << n_webhook_hits << " (duplicates "
      << n_webhook_duplicates << "); dead-lettered " << n_dead_lettered << "; redis pending " << n_redis_pending
      << "; integrity " << integrity;
    for (auto& v : violations) s << "\n  VIOLATION: " << v;
    return s.str();
  }
};

namespace detail {

// Rows of a read-only query, every column as text.
inline std::vector<std::vector<std::string>> query(sqlite3* db, const std::string& sql,
                                                   const std::vector<std::string>& args = {}) {
  std::vector<std::vector<std::string>> out;
  sqlite3_stmt* st = nullptr;
  if (sqlite3_prepare_v2(db, sql.c_str(), -1, &st, nullptr) != SQLITE_OK) return out;
  for (size_t i = 0; i < args.size(); ++i) sqlite3_bind_text(st, int(i + 1), args[i].c_str(), -1, SQLITE_TRANSIENT);
  while (sqlite3_step(st) == SQLITE_ROW) {
    std::vector<std::string> row;
    for (int c = 0; c < sqlite3_column_count(st); ++c) {
      auto* t = sqlite3_column_text(st, c);
      row.push_back(t ? reinterpret_cast<const char*>(t) : "");
    }
    out.push_back(std::move(row));
  }
  sqlite3_finalize(st);
  return out;
}

}  // namespace detail

// A read-only query on the cluster's SQLite file (scenario-specific assertions), columns as text.
inline std::vector<std::vector<std::string>> query_db(cluster& c, const std::string& sql,
                                                      const std::vector<std::string>& args = {}) {
  sqlite3* db = nullptr;
  std::vector<std::vector<std::string>> out;
  if (sqlite3_open_v2(c.db_path().c_str(), &db, SQLITE_OPEN_READONLY, nullptr) == SQLITE_OK) {
    sqlite3_busy_timeout(db, 5000);
    out = detail::query(db, sql, args);
  }
  sqlite3_close(db);
  return out;
}

// SIGSTOP p at a moment it holds no SQLite write lock (sqlite_lock.h); false if never.
inline bool pause_outside_write(cluster& c, child_process& p) {
  return pause_outside_write(
      c.db_path(), [&p] { p.pause(); }, [&p] { p.resume(); });
}

inline history_report check_history(cluster& c, const std::string& scenario = "") {
  history_report r;
  r.scenario = scenario;
  auto log = c.client().log();
  auto acked = c.client().acked_ids();
  std::set<std::string> acked_set(acked.begin(), acked.end());
  r.n_acked = int64_t(acked.size());
  for (auto& x : log)
    if (x.method == "POST" && x.path == "/v1/jobs") r.n_submitted++;

  sqlite3* db = nullptr;
  if (sqlite3_open_v2(c.db_path().c_str(), &db, SQLITE_OPEN_READONLY, nullptr) != SQLITE_OK) {
    r.violations.push_back("cannot open " + c.db_path());
    sqlite3_close(db);
    return r;
  }
  sqlite3_busy_timeout(db, 5000);

  // P5
  auto ic = detail::query(db, "PRAGMA integrity_check");
  r.integrity = ic.empty() ? "no answer" : ic[0][0];
  if (r.integrity != "ok") r.violations.push_back("PRAGMA integrity_check: " + r.integrity);

  // P1: final state and terminal status events per acked job
  std::map<std::string, std::string> final_status, final_output;
  std::set<std::string> tombstones;  // deleted jobs: their transcript and tool results went with their content
  for (auto& id : acked) {
    auto row = detail::query(db, "SELECT status, result_json, error, deleted_ms FROM jobs WHERE id=?", {id});
    if (row.empty()) {
      r.violations.push_back(id + ": acknowledged with 202 but absent from SQLite");
      r.n_lost++;
      continue;
    }
    std::string st = row[0][0];
    final_status[id] = st;
    final_output[id] = row[0][1] + "|" + row[0][2];
    if (!is_terminal_status(st)) {
      r.violations.push_back(id + ": not terminal after drain (" + st + ")");
      r.n_lost++;
      continue;
    }
    (st == "completed"    ? r.n_completed
     : st == "incomplete" ? r.n_incomplete
     : st == "failed"     ? r.n_failed
                          : r.n_cancelled)++;
    if (row[0][3] != "0") {
      // a tombstone: its events went with its content; the kept status is its one terminal state
      r.n_deleted++;
      tombstones.insert(id);
      continue;
    }
    int n_terminal_events = 0;
    for (auto& e : detail::query(db, "SELECT data_json FROM job_events WHERE job_id=? AND type='status'", {id})) {
      json d = json::parse(e[0], nullptr, false);
      if (d.is_object() && is_terminal_status(d.value("status", ""))) n_terminal_events++;
    }
    if (n_terminal_events != 1)
      r.violations.push_back(id + ": " + std::to_string(n_terminal_events) + " terminal status events");
  }

  // P2: the poll history never shows a terminal state or result changing, until the job is deleted;
  // after a DELETE answered 200 (completed, in log order) every read of the job is a 404.
  std::map<std::string, int64_t> deleted_at;  // id -> the DELETE exchange's log seq
  for (auto& x : log)
    if (x.method == "DELETE" && x.status == 200 && x.path.starts_with("/v1/jobs/") &&
        x.path.find('/', 9) == std::string::npos && !deleted_at.count(x.path.substr(9)))
      deleted_at[x.path.substr(9)] = x.seq;
  std::map<std::string, std::string> first_terminal;  // id -> status|output|error seen first
  for (auto& x : log) {
    if (x.method != "GET" || x.status != 200 || !x.path.starts_with("/v1/jobs/")) continue;
    std::string id = x.path.substr(9);
    if (id.find('/') != std::string::npos) id = id.substr(0, id.find('/'));
    if (auto d = deleted_at.find(id); d != deleted_at.end() && x.t_send_ms > log[size_t(d->second)].t_recv_ms)
      r.violations.push_back(id + ": " + x.path + " answered 200 after the job was deleted");
    if (x.path.size() != 9 + id.size()) continue;
    r.n_polls++;
    json j = json::parse(x.response, nullptr, false);
    if (!j.is_object()) continue;
    std::string st = j.value("status", "");
    if (!is_terminal_status(st)) {
      if (first_terminal.count(id))
        r.violations.push_back(id + ": polled " + st + " after having been " + first_terminal[id]);
      continue;
    }
    std::string seen = st + "|" + j["output"].dump() + "|" + j["error"].dump();
    auto [it, fresh] = first_terminal.emplace(id, seen);
    if (!fresh && it->second != seen)
      r.violations.push_back(id + ": terminal state changed from " + it->second.substr(0, 200) + " to " +
                             seen.substr(0, 200));
  }
  for (auto& [id, st] : final_status)
    if (first_terminal.count(id) && first_terminal[id].substr(0, first_terminal[id].find('|')) != st)
      r.violations.push_back(id + ": polled terminal state differs from SQLite's " + st);

  // P3: tool calls
  std::map<std::string, std::vector<int64_t>> requests_by_call;  // job/call -> arrival times
  for (auto& q : c.tools().requests()) {
    json b = json::parse(q.body, nullptr, false);
    if (!b.is_object()) continue;
    requests_by_call[b.value("job_id", "") + "/" + b.value("call_id", "")].push_back(q.t_ms);
    r.n_tool_requests++;
  }
  r.n_tool_calls = int64_t(requests_by_call.size());
  for (auto& [key, times] : requests_by_call) {
    r.n_tool_duplicates += int64_t(times.size()) - 1;
    std::string job = key.substr(0, key.find('/')), call = key.substr(key.find('/') + 1);
    // NOTE: a deleted job's committed turns and tool results are gone with its content (#33), so
    // its calls cannot be matched to them; the duplicate count above still covers them.
    if (tombstones.count(job)) continue;
    // the call must be one of a committed turn of its job
    bool committed = false;
    for (auto& row :
         detail::query(db, "SELECT tool_calls_json FROM transcript WHERE job_id=? AND role='assistant'", {job})) {
      json calls = json::parse(row[0], nullptr, false);
      if (calls.is_array())
        for (auto& tc : calls) committed = committed || tc.value("id", "") == call;
    }
    if (!committed) r.violations.push_back(key + ": tool call not in any committed turn (re-generated turn?)");
    auto res = detail::query(db, "SELECT created_ms FROM tool_results WHERE job_id=? AND call_id=?", {job, call});
    if (!res.empty()) {
      int64_t recorded = std::stoll(res[0][0]);
      for (int64_t t : times)
        if (t > recorded)
          r.violations.push_back(key + ": called again " + std::to_string(t - recorded) +
                                 " ms after its result was committed");
    }
  }

  // P4: webhooks
  std::map<std::string, std::set<std::string>> ids_by_event;  // "job job.status" -> webhook-ids
  std::map<std::string, int> hits_by_webhook_id;
  int64_t now_s = wall_ms() / 1000;
  for (auto& h : c.webhooks().requests()) {
    r.n_webhook_hits++;
    json b = json::parse(h.body, nullptr, false);
    if (!b.is_object() || !b.contains("data")) {
      r.violations.push_back("webhook with a malformed body");
      continue;
    }
    std::string id = b["data"].value("id", ""), type = b.value("type", "");
    std::string wid = h.header("webhook-id");
    hits_by_webhook_id[wid]++;
    auto v = webhooks::verify(c.webhook_secret(), wid, h.header("webhook-timestamp"), h.body,
                              h.header("webhook-signature"), now_s);
    if (v != webhooks::verify_result::ok && v != webhooks::verify_result::stale_timestamp)
      r.violations.push_back(id + ": webhook " + wid + " badly signed");
    if (type == "job.requires_action") continue;
    ids_by_event[id + " " + type].insert(wid);
    if (final_status.count(id) && type != "job." + final_status[id])
      r.violations.push_back(id + ": webhook " + type + " but the job is " + final_status[id]);
  }
  for (auto& [wid, n] : hits_by_webhook_id) r.n_webhook_duplicates += n - 1;
  for (auto& [event, wids] : ids_by_event)
    if (wids.size() > 1)
      r.violations.push_back(event + ": delivered under " + std::to_string(wids.size()) + " webhook-ids");
  for (auto& [id, st] : final_status) {
    if (!is_terminal_status(st)) continue;
    auto req = detail::query(db, "SELECT request_json FROM jobs WHERE id=?", {id});
    json rj = req.empty() ? json() : json::parse(req[0][0], nullptr, false);
    if (!rj.is_object() || !rj.contains("webhook")) continue;
    if (!ids_by_event.count(id + " job." + st))
      r.violations.push_back(id + ": terminal webhook job." + st + " never delivered");
  }
  sqlite3_close(db);

  // P6
  r.n_redis_pending = c.n_redis_pending();
  if (r.n_redis_pending != 0)
    r.violations.push_back("Redis: " + std::to_string(r.n_redis_pending) + " entries pending after drain");
  queue::redis_options ro;
  ro.port = c.redis().port();
  queue::redis_client rc(ro);
  auto dl = rc.command({"XLEN", "agentq:dead"});
  r.n_dead_lettered = dl.type == queue::redis_reply::kind::integer ? dl.integer : 0;
  return r;
}

}  // namespace agentq::test
