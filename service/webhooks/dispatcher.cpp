// Webhook outbox scanner and sender (see dispatcher.h).
#include "webhooks/dispatcher.h"

#include <pthread.h>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include <condition_variable>
#include <ctime>
#include <mutex>
#include <random>

#include "api/job_view.h"
#include "api/schema.h"
#include "metrics/registry.h"
#include "store/sqlite.h"
#include "store/store.h"
#include "util/crypto.h"
#include "util/fault.h"
#include "webhooks/signing.h"
#include <agentq/thread_class.h>

namespace agentq::webhooks {

using json = nlohmann::json;

struct dispatcher::impl {
  dispatcher_options options;
  store::store& store;
  net::http_client client;
  secret_fn secrets;
  std::mutex db_mu;
  std::unique_ptr<store::sqlite_db> db;
  std::atomic<bool> running{false};
  std::mutex stop_mu;  // with stop_cv: the send thread's idle wait, cut short by stop()
  std::condition_variable stop_cv;
  std::thread scan_thread, send_thread;
  std::mt19937_64 rng{std::random_device{}()};
  std::atomic<int64_t> last_cursor{0};
  int64_t scanned_to = -1;                          // the scan cursor in memory (-1: read it from the table)
  bool in_write = false;                            // scan_once opened its write transaction
  bool scan_full = false;                           // scan_once's last page was full: read on at once
  std::chrono::steady_clock::time_point saved_at{};  // the cursor's last save

  // The scan's write transaction, begun at its first write (most scans write nothing).
  void begin_write() {
    if (in_write) return;
    db->exec("BEGIN IMMEDIATE");
    in_write = true;
  }

  impl(dispatcher_options o, store::store& s, net::http_client c, secret_fn f)
      : options(std::move(o)), store(s), client(std::move(c)), secrets(std::move(f)) {}

  int64_t cursor() {
    auto s = db->prepare("SELECT value FROM service_cursors WHERE name='webhooks'");
    return s.step() ? s.col_int(0) : 0;
  }

  bool endpoint_disabled(const std::string& tenant, const std::string& url) {
    auto s = db->prepare("SELECT disabled_ms FROM webhook_endpoints WHERE tenant=? AND url=?");
    s.bind_all(tenant, url);
    return s.step() && s.col_int(0) > 0;
  }

  // OpenAI-shaped webhook endpoints (POST /v1/webhook_endpoints, api/openai_registry.h): a Responses
  // job's terminal status event becomes a thin {"id","object":"event","created_at","type","data":{"id"}}
  // delivery to each of its tenant's endpoints subscribed to that type. Returns deliveries enqueued.
  int32_t fan_out_openai(const store::job_event& e, const store::job_row& job, const json& req, store::job_status st) {
    if (!store::is_terminal(st)) return 0;
    if (!req.is_object() || !req.contains("openai") || !req["openai"].is_object() ||
        req["openai"].value("surface", "") != "responses")
      return 0;
    std::string type = std::string("response.") + store::to_string(st);
    std::vector<std::pair<std::string, std::string>> endpoints;  // (id, url)
    try {
      auto q = db->prepare("SELECT id, url, events_json FROM openai_webhook_endpoints WHERE tenant=? ORDER BY id");
      q.bind(1, job.tenant);
      while (q.step()) {
        json ev = json::parse(q.col_text(2), nullptr, false);
        bool wanted = false;
        if (ev.is_array())
          for (const auto& x : ev) wanted = wanted || (x.is_string() && x.get<std::string>() == type);
        if (wanted) endpoints.emplace_back(q.col_text(0), q.col_text(1));
      }
    } catch (const store::sqlite_error&) {
      return 0;  // no endpoints table yet: no API process has opened the registry
    }
    int32_t n = 0;
    for (size_t k = 0; k < endpoints.size() && k < 64; ++k) {
      json body = {{"id", "evt_" + crypto::random_token(16)},
                   {"object", "event"},
                   {"created_at", e.created_ms / 1000},
                   {"type", type},
                   {"data", {{"id", "resp_" + job.id.substr(4)}}}};
      int64_t now = store::now_ms();
      const std::string& url = endpoints[k].second;
      // NOTE: event_id is UNIQUE (one job webhook per event); endpoint deliveries take negative ids
      // derived from (event, endpoint index), so a rescan after a crash inserts nothing twice.
      int64_t event_id = -(e.id * 64 + int64_t(k) + 1);
      begin_write();
      db->prepare(
            "INSERT OR IGNORE INTO webhook_deliveries(id, event_id, job_id, tenant, event_type, url, payload_json, "
            "state, next_attempt_ms, created_ms, updated_ms) VALUES (?,?,?,?,?,?,?,?,?,?,?)")
          .bind_all("msg_" + crypto::random_token(16), event_id, job.id, job.tenant, type, url, body.dump(),
                    std::string(endpoint_disabled(job.tenant, url) ? "disabled" : "pending"), now, now, now)
          .run();
      ++n;
    }
    return n;
  }

  int64_t backoff_ms(int32_t n_attempts) {
    auto base = double(options.schedule[size_t(n_attempts - 1)].count());
    std::uniform_real_distribution<double> d(1.0 - options.jitter, 1.0 + options.jitter);
    return int64_t(base * d(rng));
  }
};

dispatcher::dispatcher(std::unique_ptr<impl> i) : impl_(std::move(i)) {}
dispatcher::~dispatcher() { stop(); }

std::unique_ptr<dispatcher> dispatcher::open(dispatcher_options options, store::store& store,
                                             const std::string& db_path, net::http_client client, secret_fn secrets,
                                             std::string* error) {
  auto i = std::make_unique<impl>(std::move(options), store, std::move(client), std::move(secrets));
  try {
    i->db = std::make_unique<store::sqlite_db>(db_path, 5000);
    if (!api::ensure_api_schema(*i->db, error)) return nullptr;
  } catch (const std::exception& e) {
    if (error) *error = std::string("webhooks: opening database: ") + e.what();
    return nullptr;
  }
  return std::unique_ptr<dispatcher>(new dispatcher(std::move(i)));
}

// NOTE: the cursor is saved with the deliveries a scan enqueues, else at most once a second: a scan
// that enqueues nothing (most: a job's queued/running/turn events) commits nothing and takes no write
// lock; it was an fsynced transaction per scan. A crash rescans from the saved cursor, and the
// deliveries' UNIQUE event_id makes that insert nothing twice.
int32_t dispatcher::scan_once() {
  auto& m = *impl_;
  std::lock_guard lock(m.db_mu);
  if (m.scanned_to < 0) m.scanned_to = m.cursor();
  int64_t after = m.scanned_to;
  // Only the status events of jobs that may want a delivery (store.h read_webhook_candidates: the
  // request pre-filter runs in SQL); the cursor moves over the page's others all the same.
  auto page = m.store.read_webhook_candidates(after, 500);
  after = std::max(after, page.scanned_to);
  m.scan_full = false;  // set below once the page is handled (a failed pass waits before the next)
  int32_t n_enqueued = 0;
  m.in_write = false;
  try {
    for (const auto& e : page.events) {
      json data = json::parse(e.data_json, nullptr, false);
      auto st = data.is_object() ? store::parse_job_status(data.value("status", "")) : std::nullopt;
      if (!st) continue;
      std::string event_type = api::webhook_event_for(*st);
      if (event_type.empty()) continue;
      auto job = m.store.get_job(e.job_id);
      if (!job) continue;
      // NOTE: why a job without "webhook" or "responses" in its stored request is not here: store.h
      // read_webhook_candidates.
      json req = json::parse(job->request_json, nullptr, false);  // once for both kinds of delivery
      n_enqueued += m.fan_out_openai(e, *job, req, *st);
      if (!req.is_object() || !req.contains("webhook") || !req["webhook"].is_object()) continue;
      const json& wh = req["webhook"];
      std::string url = wh.value("url", "");
      if (url.empty()) continue;
      if (auto ev = wh.find("events"); ev != wh.end() && ev->is_array()) {
        bool wanted = false;
        for (const auto& x : *ev) wanted = wanted || (x.is_string() && x.get<std::string>() == event_type);
        if (!wanted) continue;
      }
      json job_obj = api::job_object(*job, nullptr);
      // NOTE: the event's own status wins over the row's, which may have moved on since.
      job_obj["status"] = store::to_string(*st);
      json body = {{"type", event_type}, {"timestamp", double(e.created_ms) / 1000.0}, {"data", job_obj}};
      int64_t now = store::now_ms();
      std::string state = m.endpoint_disabled(job->tenant, url) ? "disabled" : "pending";
      m.begin_write();
      m.db->prepare(
               "INSERT OR IGNORE INTO webhook_deliveries(id, event_id, job_id, tenant, event_type, url, payload_json, "
               "state, next_attempt_ms, created_ms, updated_ms) VALUES (?,?,?,?,?,?,?,?,?,?,?)")
          .bind_all("msg_" + crypto::random_token(16), e.id, job->id, job->tenant, event_type, url,
                    body.dump(-1, ' ', false, json::error_handler_t::replace), state, now, now, now)
          .run();
      ++n_enqueued;
    }
    auto now_tp = std::chrono::steady_clock::now();
    if (m.in_write || (after != m.last_cursor && now_tp - m.saved_at >= std::chrono::seconds(1))) {
      m.begin_write();
      m.db->prepare("INSERT INTO service_cursors(name, value) VALUES ('webhooks', ?) "
                    "ON CONFLICT(name) DO UPDATE SET value=excluded.value")
          .bind(1, after)
          .run();
      m.db->exec("COMMIT");
      m.in_write = false;
      m.last_cursor = after;
      m.saved_at = now_tp;
    }
    m.scanned_to = after;
    m.scan_full = page.full;
  } catch (const std::exception& ex) {
    spdlog::error("webhooks: scan failed: {}", ex.what());
    if (m.in_write) {
      try {
        m.db->exec("ROLLBACK");
      } catch (...) {
      }
    }
    m.in_write = false;
    return 0;
  }
  return n_enqueued;
}

namespace {
struct due_row {
  std::string id, job_id, tenant, url, payload;
  int32_t n_attempts = 0;
};

// One attempt in /metrics: outcome = the delivery's state after it ("pending" = will retry).
void record_attempt_metrics(const std::string& state, double seconds) {
  static auto& attempts = metrics::global().counter_family(
      "agentq_webhook_deliveries_total", "Webhook delivery attempts by outcome (succeeded, retry, failed, disabled).",
      {"outcome"});
  static auto& latency = metrics::global().histogram_family("agentq_webhook_delivery_duration_seconds",
                                                            "Webhook delivery attempt time, until the response or error.");
  attempts.with({state == "pending" ? "retry" : state}).inc();
  latency.with().observe(seconds);
}
}  // namespace

int32_t dispatcher::send_once() {
  auto& m = *impl_;
  std::vector<due_row> due;
  {
    std::lock_guard lock(m.db_mu);
    int64_t now = store::now_ms();
    try {
      auto s = m.db->prepare(
          "SELECT id, job_id, tenant, url, payload_json, n_attempts FROM webhook_deliveries "
          "WHERE state='pending' AND next_attempt_ms<=? ORDER BY next_attempt_ms LIMIT ?");
      s.bind_all(now, int64_t(std::max(1, m.options.n_senders)));
      while (s.step()) due.push_back({s.col_text(0), s.col_text(1), s.col_text(2), s.col_text(3), s.col_text(4),
                                      int32_t(s.col_int(5))});
      // lease: nobody else picks these up while this attempt runs. NOTE: an attempt is bounded by the
      // client timeout, so the lease is that plus a margin; it is also how long a sender killed
      // mid-attempt delays the retry (found by tests/e2e/chaos_api_webhook.cpp: +60 s before).
      int64_t lease_until = now + m.options.timeout.count() + 5000;
      for (const auto& d : due)
        m.db->prepare("UPDATE webhook_deliveries SET next_attempt_ms=? WHERE id=?").bind_all(lease_until, d.id).run();
    } catch (const std::exception& ex) {
      spdlog::error("webhooks: reading due deliveries failed: {}", ex.what());
      return 0;
    }
  }
  std::vector<std::thread> threads;
  for (const auto& d : due) {
    threads.emplace_back([&m, d] {
      std::string secret;
      if (auto job = m.store.get_job(d.job_id)) {
        json req = json::parse(job->request_json, nullptr, false);
        if (req.is_object() && req.contains("webhook") && req["webhook"].is_object())
          secret = req["webhook"].value("secret", "");
      }
      if (secret.empty() && m.secrets) secret = m.secrets(d.job_id, d.tenant);
      int64_t ts = int64_t(std::time(nullptr));
      net::http_request req;
      req.method = "POST";
      req.url = d.url;
      req.body = d.payload;
      req.timeout = m.options.timeout;
      req.max_response_bytes = m.options.max_response_bytes;
      req.headers.emplace_back("Content-Type", "application/json");
      req.headers.emplace_back("webhook-id", d.id);
      req.headers.emplace_back("webhook-timestamp", std::to_string(ts));
      if (auto sig = sign(secret, d.id, ts, d.payload)) req.headers.emplace_back("webhook-signature", *sig);
      net::http_result res = m.client.send(req);
      int32_t code = res.ok() ? res.response.status : 0;
      if (code / 100 == 2) fault_point("mid_webhook", d.payload);  // delivered, not yet recorded: re-sent
      std::string error = res.ok() ? (code / 100 == 2 ? "" : "HTTP " + std::to_string(code)) : res.message;
      int32_t n = d.n_attempts + 1;
      int64_t now = store::now_ms();
      std::string state = "pending";
      int64_t next = 0;
      if (code / 100 == 2) {
        state = "succeeded";
      } else if (code == 410) {
        state = "disabled";
      } else if (size_t(n) > m.options.schedule.size()) {
        state = "failed";
      } else {
        next = now + m.backoff_ms(n);
      }
      record_attempt_metrics(state, double(res.elapsed_ms) / 1000.0);
      std::lock_guard lock(m.db_mu);
      try {
        m.db->prepare(
                 "INSERT INTO webhook_attempts(delivery_id, attempt_idx, status_code, error, duration_ms, created_ms) "
                 "VALUES (?,?,?,?,?,?)")
            .bind_all(d.id, n, code, error, int64_t(res.elapsed_ms), now)
            .run();
        m.db->prepare("UPDATE webhook_deliveries SET state=?, n_attempts=?, next_attempt_ms=?, updated_ms=? WHERE id=?")
            .bind_all(state, n, next, now, d.id)
            .run();
        if (state == "disabled") {
          m.db->prepare("INSERT INTO webhook_endpoints(tenant, url, disabled_ms, reason) VALUES (?,?,?,'410 Gone') "
                        "ON CONFLICT(tenant, url) DO UPDATE SET disabled_ms=excluded.disabled_ms")
              .bind_all(d.tenant, d.url, now)
              .run();
          m.db->prepare("UPDATE webhook_deliveries SET state='disabled', updated_ms=? "
                        "WHERE tenant=? AND url=? AND state='pending'")
              .bind_all(now, d.tenant, d.url)
              .run();
          spdlog::warn("webhooks: {} answered 410 Gone; endpoint disabled for tenant {}", d.url, d.tenant);
        }
      } catch (const std::exception& ex) {
        spdlog::error("webhooks: recording attempt of {} (job {}) failed: {}", d.id, d.job_id, ex.what());
      }
      if (state != "succeeded")
        spdlog::info("webhooks: delivery {} of job {} attempt {} to {}: {} -> {}", d.id, d.job_id, n, d.url, error, state);
    });
  }
  for (auto& t : threads) t.join();
  return int32_t(due.size());
}

std::vector<delivery_record> dispatcher::list(const std::string& job_id) {
  auto& m = *impl_;
  std::lock_guard lock(m.db_mu);
  std::vector<delivery_record> out;
  auto s = m.db->prepare(
      "SELECT id, job_id, event_type, url, state, n_attempts, next_attempt_ms, created_ms FROM webhook_deliveries "
      "WHERE job_id=? ORDER BY event_id");
  s.bind(1, job_id);
  while (s.step()) {
    delivery_record r;
    r.id = s.col_text(0);
    r.job_id = s.col_text(1);
    r.event_type = s.col_text(2);
    r.url = s.col_text(3);
    r.state = s.col_text(4);
    r.n_attempts = int32_t(s.col_int(5));
    r.next_attempt_ms = s.col_int(6);
    r.created_ms = s.col_int(7);
    out.push_back(std::move(r));
  }
  for (auto& r : out) {
    auto a = m.db->prepare(
        "SELECT attempt_idx, status_code, error, duration_ms, created_ms FROM webhook_attempts WHERE delivery_id=? "
        "ORDER BY attempt_idx");
    a.bind(1, r.id);
    while (a.step())
      r.attempts.push_back({int32_t(a.col_int(0)), int32_t(a.col_int(1)), a.col_text(2), a.col_int(3), a.col_int(4)});
  }
  return out;
}

void dispatcher::start() {
  auto& m = *impl_;
  if (m.running.exchange(true)) return;
  m.scan_thread = std::thread([this] {
    util::name_thread("aq-webhook-scan");  // per-thread profiles name it
    auto& m = *impl_;
    auto next_drain = std::chrono::steady_clock::now();
    while (m.running) {
      int32_t n = scan_once();
      // drain any "terminal" job-store outbox rows: status events drive webhooks instead. NOTE: only
      // older versions write them, so a look every 10 s, not a read per pass (per commit).
      auto rows = std::chrono::steady_clock::now() < next_drain ? std::vector<store::outbox_row>{}
                                                                 : m.store.fetch_outbox("terminal", 256);
      if (rows.empty()) next_drain = std::chrono::steady_clock::now() + std::chrono::seconds(10);
      if (!rows.empty()) {
        std::vector<int64_t> ids;
        for (const auto& r : rows) ids.push_back(r.id);
        m.store.complete_outbox(std::move(ids)).wait();
      }
      // NOTE: not after a full page: the end of a job that cannot want a delivery wakes nobody, so a
      // backlog of such events waits for the scan, which reads it page after page.
      if (n == 0 && !m.scan_full)
        m.store.wait_events(m.scanned_to, m.options.poll, store::store::wake::webhook_status);
    }
  });
  m.send_thread = std::thread([this] {
    auto& m = *impl_;
    while (m.running) {
      if (send_once() == 0) {
        std::unique_lock lock(m.stop_mu);
        m.stop_cv.wait_for(lock, m.options.poll, [&] { return !m.running; });
      }
    }
  });
}

void dispatcher::stop() {
  auto& m = *impl_;
  {
    std::lock_guard lock(m.stop_mu);  // NOTE: under the send thread's lock: it cannot miss the wake
    if (!m.running.exchange(false)) return;
  }
  // NOTE: both threads' idle waits end now, not a poll (200 ms) later: agentqd's stop waited them out.
  m.stop_cv.notify_all();
  m.store.wake_waiters();
  if (m.scan_thread.joinable()) m.scan_thread.join();
  if (m.send_thread.joinable()) m.send_thread.join();
}

}  // namespace agentq::webhooks
