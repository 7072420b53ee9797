// The webhook scanner over a real SQLite store: a terminal job becomes a delivery to its own
// webhook.url and, for a Responses job, to each of its tenant's OpenAI endpoints subscribed to the
// event; a Chat Completions or Batch line ("surface":"chat") without a webhook makes none (the
// scanner skips parsing such requests: webhooks/dispatcher.cpp's pre-filter, which must not drop
// the others).
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>
#include <chrono>
#include <map>
#include <future>
#include <set>
#include <thread>

#include "api/job_view.h"
#include "net/http_client.h"
#include "net/ssrf_guard.h"
#include "store/sqlite.h"
#include "store/store.h"
#include "temp_dir.h"
#include "webhooks/dispatcher.h"

using namespace agentq;
using json = nlohmann::json;

namespace {
// A completed job of tenant "t" whose request is a one-message chat with `extra`'s keys added.
std::string finished_job(store::store& st, const json& extra) {
  json req = {{"model", "m"}, {"messages", json::array({{{"role", "user"}, {"content", "hi"}}})}};
  for (auto& [k, v] : extra.items()) req[k] = v;
  store::new_job nj;
  nj.tenant = "t";
  nj.request_json = req.dump();
  auto made = st.create_job(std::move(nj)).get();
  REQUIRE(made.outcome == store::create_outcome::created);
  auto c = st.claim_job(made.job.id, "w", 60000, 3).get();
  REQUIRE(c.outcome == store::claim_outcome::claimed);
  // NOTE: as the worker ends a job: its end carries the pre-filter of the request it claimed.
  store::step_commit step;
  step.end = store::job_end{store::job_status::completed, "{}", "", {},
                            store::may_want_delivery(c.won->job.request_json)};
  REQUIRE(st.commit_step(made.job.id, c.won->epoch, std::move(step)).get() == store::write_status::ok);
  return made.job.id;
}
// A store on a new file in dir; *so: its options (the dispatcher opens the same file).
std::unique_ptr<store::store> open_store(test::temp_dir& dir, store::store_options* so) {
  std::string err;
  so->path = dir.file("jobs.db");
  auto st = store::store::open(*so, &err);
  REQUIRE_MESSAGE(st, err);
  return st;
}
}  // namespace

TEST_CASE("webhook scan: Responses jobs reach OpenAI endpoints, webhook.url jobs theirs, chat lines none") {
  test::temp_dir dir;
  std::string err;
  store::store_options so;
  auto st = open_store(dir, &so);
  auto d = webhooks::dispatcher::open({}, *st, so.path, net::http_client(net::ssrf_guard{}), nullptr, &err);
  REQUIRE_MESSAGE(d, err);
  {
    store::sqlite_db db(so.path, 5000);
    db.exec(
        "INSERT INTO openai_webhook_endpoints(id, tenant, url, events_json, created_ms) VALUES "
        "('we_1', 't', 'http://127.0.0.1:9/openai', '[\"response.completed\"]', 0)");
  }
  auto job = [&](json openai, json webhook) {
    json extra = json::object();
    if (!openai.is_null()) extra["openai"] = std::move(openai);
    if (!webhook.is_null()) extra["webhook"] = std::move(webhook);
    return finished_job(*st, extra);
  };
  auto responses = job(json{{"surface", "responses"}}, nullptr);
  auto chat = job(json{{"surface", "chat"}}, nullptr);
  auto chat_hook = job(json{{"surface", "chat"}}, json{{"url", "http://127.0.0.1:9/job"}});
  auto plain = job(nullptr, nullptr);
  int32_t n = 0;
  for (int i = 0; i < 10; ++i) n += d->scan_once();
  CHECK(n == 2);
  auto r = d->list(responses);
  REQUIRE(r.size() == 1);
  CHECK(r[0].url == "http://127.0.0.1:9/openai");
  CHECK(r[0].event_type == "response.completed");
  CHECK(d->list(chat).empty());
  auto h = d->list(chat_hook);
  REQUIRE(h.size() == 1);
  CHECK(h[0].url == "http://127.0.0.1:9/job");
  CHECK(h[0].event_type == "job.completed");
  CHECK(d->list(plain).empty());
}

// The store's side of the scan's pre-filter (read_webhook_candidates): of a page of events only the
// status events of jobs whose request may want a delivery come back, and the cursor moves to the
// page's last event even when none of them did; a scan walks pages of none to the one it wants.
TEST_CASE("webhook scan: the cursor moves over pages with no candidate; only candidates are read") {
  test::temp_dir dir;
  std::string err;
  store::store_options so;
  auto st = open_store(dir, &so);
  auto job = [&](const json& extra) { return finished_job(*st, extra); };
  const int64_t start = st->last_event_id();
  for (int i = 0; i < 300; ++i) job(json::object());  // >= 2 status events each: pages of none
  const int64_t plain_end = st->last_event_id();
  REQUIRE(plain_end - start >= 600);
  auto none = st->read_webhook_candidates(start, 500);
  CHECK(none.events.empty());
  CHECK(none.scanned_to > start);
  CHECK(none.scanned_to <= plain_end);
  CHECK(none.full);  // 500 events looked at: more may follow
  auto hook = job(json{{"webhook", {{"url", "http://127.0.0.1:9/job"}}}});
  auto resp = job(json{{"openai", {{"surface", "responses"}}}});
  auto escaped = job(json{{"metadata", {{"note", "\x01"}}}});  // dumped as \u0001: kept (cannot rule out)
  job(json{{"openai", {{"surface", "chat"}}}});
  auto all = st->read_webhook_candidates(plain_end, 500);
  std::set<std::string> ids;
  for (auto& e : all.events) {
    CHECK(e.type == "status");
    ids.insert(e.job_id);
  }
  CHECK(ids == std::set<std::string>{hook, resp, escaped});
  CHECK(all.scanned_to == st->last_event_id());
  CHECK_FALSE(all.full);
  auto after = st->read_webhook_candidates(all.scanned_to, 500);
  CHECK(after.events.empty());
  CHECK(after.scanned_to == all.scanned_to);  // no event: the cursor stays

  // The scan itself from the start: two pages of plain jobs' events, then the webhook job's delivery.
  auto d = webhooks::dispatcher::open({}, *st, so.path, net::http_client(net::ssrf_guard{}), nullptr, &err);
  REQUIRE_MESSAGE(d, err);
  for (int i = 0; i < 10 && d->list(hook).empty(); ++i) d->scan_once();
  auto h = d->list(hook);
  REQUIRE(h.size() == 1);
  CHECK(h[0].event_type == "job.completed");
}

// The scan's page passes over a job's queued and running events (no status of theirs makes a
// delivery) before it reads the job's request, and keeps every event whose status does: a webhook
// job's completed, failed (its error naming a running status) and cancelled ends all come back.
TEST_CASE("webhook scan: queued and running events are passed over; every end that may deliver is read") {
  test::temp_dir dir;
  store::store_options so;
  auto st = open_store(dir, &so);
  const json hook = {{"webhook", {{"url", "http://127.0.0.1:9/job"}}}};
  const int64_t start = st->last_event_id();
  const std::string done = finished_job(*st, hook);
  auto ended = [&](store::job_status status, const std::string& error) {
    json req = {{"model", "m"}, {"messages", json::array({{{"role", "user"}, {"content", "hi"}}})}};
    req.update(hook);
    store::new_job nj;
    nj.tenant = "t";
    nj.request_json = req.dump();
    auto made = st->create_job(std::move(nj)).get();
    auto c = st->claim_job(made.job.id, "w", 60000, 3).get();
    REQUIRE(c.outcome == store::claim_outcome::claimed);
    store::step_commit step;
    step.end = store::job_end{status, "{}", error, {}, true};
    REQUIRE(st->commit_step(made.job.id, c.won->epoch, std::move(step)).get() == store::write_status::ok);
    return made.job.id;
  };
  const std::string failed = ended(store::job_status::failed, R"(tool said {"status":"running"})");
  const std::string cancelled = ended(store::job_status::cancelled, "");
  std::map<std::string, std::string> want;  // job -> the status its read event carries
  for (const auto& id : {done, failed, cancelled})
    for (const auto& e : st->read_events(id, 0, 100)) {
      if (e.type != "status") continue;
      auto status = store::parse_job_status(json::parse(e.data_json).value("status", ""));
      REQUIRE(status);
      if (!api::webhook_event_for(*status).empty()) want[id] = store::to_string(*status);
    }
  REQUIRE(want.size() == 3);
  std::map<std::string, std::string> got;
  for (const auto& e : st->read_webhook_candidates(start, 1000).events) {
    INFO(e.data_json);
    CHECK(e.data_json != R"({"status":"queued"})");
    CHECK(e.data_json.rfind(R"({"attempt":)", 0) == std::string::npos);
    got[e.job_id] = json::parse(e.data_json).value("status", "");
  }
  CHECK(got == want);
}

// The pre-filter twice: the scan's SQL reads the jobs whose end it must look at, the worker's C++ decides
// whether an end wakes the scan. They must agree, or a job the scan would read is left unwoken.
TEST_CASE("webhook scan: store::may_want_delivery agrees with the scan's SQL pre-filter") {
  test::temp_dir dir;
  store::store_options so;
  auto st = open_store(dir, &so);
  const json extras[] = {
      json::object(),
      {{"openai", {{"surface", "chat"}}}},
      {{"webhook", {{"url", "http://127.0.0.1:9/job"}}}},
      {{"openai", {{"surface", "responses"}}}},
      {{"metadata", {{"note", "\x01"}}}},            // dumped as \u0001
      {{"metadata", {{"note", "caf\xc3\xa9 \xf0\x9f\x99\x82"}}}},  // UTF-8 kept as it is: no escape
      {{"metadata", {{"note", "webhook responses"}}}},  // the words, not as strings of their own
      {{"metadata", {{"note", "webhook"}}}},            // "webhook" as a string: cannot rule out
      {{"metadata", {{"webhooks", "x"}}}},              // another key
      {{"metadata", {{"note", "back\\slash u"}}}},     // a \\ escape, no \u
  };
  std::set<std::string> want;
  const int64_t start = st->last_event_id();
  for (const auto& extra : extras) {
    const std::string id = finished_job(*st, extra);
    if (store::may_want_delivery(st->get_job(id)->request_json)) want.insert(id);
  }
  std::set<std::string> got;
  for (auto& e : st->read_webhook_candidates(start, 1000).events) got.insert(e.job_id);
  CHECK(got == want);
  CHECK(want.size() == 4);  // webhook, responses, \u0001 and the "webhook" string
}

// A job's end wakes the scan only when its request may want a delivery (the pre-filter, evaluated
// by the worker at the claim); the others' events wait for the scan's next pass, which reads a backlog page
// after page without waiting between them: a webhook job's delivery behind 900 plain events is made
// at its end's wake, well inside the scan's idle poll.
TEST_CASE("webhook scan: only an end that may want a delivery wakes the scan; a backlog is read at once") {
  test::temp_dir dir;
  std::string err;
  store::store_options so;
  auto st = open_store(dir, &so);
  using namespace std::chrono_literals;
  // Whether finishing a job with `extra` wakes a waiter of the scan's kind within `timeout`.
  auto wakes = [&](const json& extra, std::chrono::milliseconds timeout) {
    auto waiter = std::async(std::launch::async,
                             [&] { return st->wait_events(0, timeout, store::store::wake::webhook_status); });
    std::this_thread::sleep_for(100ms);  // the waiter is waiting (it sees only commits after it began)
    finished_job(*st, extra);
    return waiter.get();
  };
  CHECK_FALSE(wakes(json::object(), 600ms));
  CHECK_FALSE(wakes(json{{"openai", {{"surface", "chat"}}}}, 600ms));
  CHECK(wakes(json{{"webhook", {{"url", "http://127.0.0.1:9/job"}}}}, 10s));
  CHECK(wakes(json{{"openai", {{"surface", "responses"}}}}, 10s));
  CHECK(wakes(json{{"metadata", {{"note", "\x01"}}}}, 10s));  // \u0001 in the stored text: cannot rule out

  webhooks::dispatcher_options o;
  o.poll = 4s;  // longer than the check below waits: only a wake and the page-after-page read can pass it
  auto d = webhooks::dispatcher::open(o, *st, so.path, net::http_client(net::ssrf_guard{}), nullptr, &err);
  REQUIRE_MESSAGE(d, err);
  d->start();
  std::this_thread::sleep_for(300ms);  // the scan reads what is there and waits
  for (int i = 0; i < 300; ++i) finished_job(*st, json::object());  // >= 900 events, no wake
  auto hook = finished_job(*st, json{{"webhook", {{"url", "http://127.0.0.1:9/late"}}}});
  auto t0 = std::chrono::steady_clock::now();
  bool made = false;
  while (!made && std::chrono::steady_clock::now() - t0 < 2s) {
    made = !d->list(hook).empty();
    if (!made) std::this_thread::sleep_for(20ms);
  }
  CHECK(made);
  auto s0 = std::chrono::steady_clock::now();
  d->stop();  // both threads' idle waits end at once (they waited out the 4 s poll before)
  CHECK(std::chrono::steady_clock::now() - s0 < 2s);
}
