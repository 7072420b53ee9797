// The store writer's two op classes (store/write_queue.h): the rule alone (submits first, the
// background bounded beside them, never starved), then through a real store on a real SQLite file:
// a submit queued behind 200 background writes is applied first in the next transaction; while
// submits arrive, background writes alone wait a moment to share a submit's commit (linger_policy).
#include "store/write_queue.h"

#include <doctest/doctest.h>

#include <sqlite3.h>

#include <chrono>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "store/store.h"
#include "temp_dir.h"

using namespace agentq::store;

TEST_CASE("write_queue: latency ops first, background bounded beside them, all of it when alone") {
  write_queue<int> q(4);
  for (int i = 0; i < 10; ++i) q.push(100 + i, op_class::background);
  q.push(1, op_class::latency);
  q.push(2, op_class::latency);
  std::vector<int> g;
  q.take(g, 512);
  CHECK(g == std::vector<int>{1, 2, 100, 101, 102, 103});  // arrival order within each class
  g.clear();
  q.take(g, 512);  // no submit waiting: the background's whole backlog
  CHECK(g == std::vector<int>{104, 105, 106, 107, 108, 109});
  CHECK(q.empty());
  g.clear();
  q.take(g, 512);
  CHECK(g.empty());
}

TEST_CASE("write_queue: max_ops bounds the group; a steady stream of submits never starves the background") {
  write_queue<int> q(4);
  for (int i = 0; i < 8; ++i) q.push(i, op_class::latency);
  for (int i = 0; i < 8; ++i) q.push(100 + i, op_class::background);
  std::vector<int> g;
  q.take(g, 5);
  CHECK(g == std::vector<int>{0, 1, 2, 3, 4});
  g.clear();
  q.take(g, 5);
  CHECK(g == std::vector<int>{5, 6, 7, 100, 101});  // what max_ops leaves, up to the bound
  // Every group while submits keep arriving still carries the bound's worth of background ops.
  int n_bg = 2;
  for (int round = 0; round < 3; ++round) {
    q.push(round, op_class::latency);
    g.clear();
    q.take(g, 512);
    REQUIRE(g.size() == (round < 1 ? 5u : (round == 1 ? 3u : 1u)));
    n_bg += static_cast<int>(g.size()) - 1;
  }
  CHECK(n_bg == 8);
  CHECK(q.empty());
  g.clear();
  q.push(7, op_class::background);
  q.take(g, 0);  // at least one op whatever max_ops says
  CHECK(g == std::vector<int>{7});
}

TEST_CASE("store: a submit queued behind 200 background writes commits in the next transaction, ahead of them") {
  agentq::test::temp_dir dir;
  auto path = dir.file("jobs.db");
  std::string err;
  store_options o;
  o.path = path;
  auto s = store::open(o, &err);
  REQUIRE_MESSAGE(s, err);
  new_job nj;
  nj.tenant = "t";
  nj.request_json = R"({"messages":[{"role":"user","content":"hi"}]})";
  auto target = s->create_job(nj).get();
  REQUIRE(target.outcome == create_outcome::created);

  // Hold SQLite's write lock from another connection so the writer stops in its BEGIN with its
  // first group (one background op) taken; everything after that queues behind it.
  sqlite3* other = nullptr;
  REQUIRE(sqlite3_open(path.c_str(), &other) == SQLITE_OK);
  REQUIRE(sqlite3_exec(other, "BEGIN IMMEDIATE", nullptr, nullptr, nullptr) == SQLITE_OK);
  std::vector<std::future<write_status>> bg;
  bg.push_back(s->append_queued_event(target.job.id, "note", R"({"i":0})"));
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  for (int i = 1; i <= 200; ++i)
    bg.push_back(s->append_queued_event(target.job.id, "note", "{\"i\":" + std::to_string(i) + "}"));
  auto submitted = s->create_job(nj);
  REQUIRE(sqlite3_exec(other, "COMMIT", nullptr, nullptr, nullptr) == SQLITE_OK);
  sqlite3_close(other);
  auto created = submitted.get();
  REQUIRE(created.outcome == create_outcome::created);
  for (auto& f : bg) REQUIRE(f.get() == write_status::ok);

  // The order the writer applied them in is the order of their event ids.
  int64_t submit_event = 0;
  int n_notes_before = 0, n_notes = 0;
  for (auto& e : s->read_events(created.job.id, 0, 10000)) submit_event = e.id;
  REQUIRE(submit_event > 0);
  for (auto& e : s->read_events(target.job.id, 0, 10000))
    if (e.type == "note") {
      ++n_notes;
      if (e.id < submit_event) ++n_notes_before;
    }
  CHECK(n_notes == 201);
  MESSAGE("background writes applied before the submit: " << n_notes_before << " of 201");
  // Only the group the writer had already taken (1 op); a submit leads its own group. In arrival
  // order (before session 22) all 200 came first.
  CHECK(n_notes_before <= 1);
}

TEST_CASE("write_queue: a background-only group lingers only while submits arrive, bounded") {
  linger_policy lp;
  lp.linger_us = 2000;
  lp.recent_us = 20'000;
  lp.n_background_max = 4;
  lp.n_background_alone = 3;
  write_queue<int> q(16, lp);
  q.push(100, op_class::background);
  CHECK_FALSE(q.should_linger(0));  // no submit seen yet: background alone commits at once
  q.push(1, op_class::latency);
  std::vector<int> g;
  q.take(g, 512, 1'000);
  CHECK(g == std::vector<int>{1, 100});
  q.push(101, op_class::background);
  CHECK(q.should_linger(5'000));         // a submit 4 ms ago: wait for the next one
  CHECK(q.linger_deadline(5'000) == 7'000);
  CHECK_FALSE(q.should_linger(22'000));  // none for 21 ms: the background goes alone
  q.push(2, op_class::latency);
  CHECK_FALSE(q.should_linger(5'000));   // a submit is queued: take it now
  g.clear();
  q.take(g, 512, 5'000);
  CHECK(g == std::vector<int>{2, 101});
  for (int i = 0; i < 4; ++i) q.push(200 + i, op_class::background);
  CHECK_FALSE(q.should_linger(6'000));   // a backlog of n_background_max: no waiting
  g.clear();
  q.take(g, 512, 6'000);                 // background alone while submits arrive: at most 3
  CHECK(g == std::vector<int>{200, 201, 202});
  g.clear();
  q.take(g, 512, 40'000);                // submits stopped: the whole backlog again
  CHECK(g == std::vector<int>{203});
  write_queue<int> off(16);              // the default policy never lingers
  off.push(1, op_class::latency);
  g.clear();
  off.take(g, 512, 0);
  off.push(100, op_class::background);
  CHECK_FALSE(off.should_linger(1));
}

namespace {
new_job small_job() {
  new_job nj;
  nj.tenant = "t";
  nj.request_json = R"({"messages":[{"role":"user","content":"hi"}]})";
  return nj;
}
}  // namespace

TEST_CASE("store: while submits arrive a background write waits for the next submit and shares its commit") {
  agentq::test::temp_dir dir;
  std::string err;
  store_options o;
  o.path = dir.file("jobs.db");
  o.background_linger_us = 300'000;  // long (and "recent" is 10 x that), so the test does not race the clock
  auto s = store::open(o, &err);
  REQUIRE_MESSAGE(s, err);
  auto first = s->create_job(small_job()).get();  // a submit: the writer has seen one just now
  REQUIRE(first.outcome == create_outcome::created);
  const int64_t n_tx0 = s->stats().n_transactions;

  auto bg = s->append_queued_event(first.job.id, "note", "{}");
  // NOTE: before session 24 the background op committed alone at once (its own transaction and flush).
  CHECK(bg.wait_for(std::chrono::milliseconds(100)) == std::future_status::timeout);
  auto second = s->create_job(small_job());
  REQUIRE(second.get().outcome == create_outcome::created);
  REQUIRE(bg.get() == write_status::ok);
  CHECK(s->stats().n_transactions - n_tx0 == 1);  // one commit for both
  CHECK(s->stats().n_background_lingers >= 1);

  // No submit comes: the background op commits alone once the linger has passed.
  const auto t0 = std::chrono::steady_clock::now();
  auto alone = s->append_queued_event(first.job.id, "note", "{}");
  REQUIRE(alone.wait_for(std::chrono::seconds(5)) == std::future_status::ready);
  CHECK(alone.get() == write_status::ok);
  CHECK(std::chrono::steady_clock::now() - t0 >= std::chrono::milliseconds(250));
}

TEST_CASE("store: background_linger_us 0 commits a background write at once") {
  agentq::test::temp_dir dir;
  std::string err;
  store_options o;
  o.path = dir.file("jobs.db");
  o.background_linger_us = 0;
  auto s = store::open(o, &err);
  REQUIRE_MESSAGE(s, err);
  auto first = s->create_job(small_job()).get();
  REQUIRE(first.outcome == create_outcome::created);
  auto bg = s->append_queued_event(first.job.id, "note", "{}");
  CHECK(bg.wait_for(std::chrono::seconds(5)) == std::future_status::ready);
}
